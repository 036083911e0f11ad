"""Optimizers with their options, as ``onnxruntime.training.onnxblock.optim`` names them.

Pass one as ``generate_artifacts(..., optimizer=AdamW(weight_decay=0.0))``; the optimizer
model then updates the parameters as ``torch.optim`` does with the same options.
"""

from __future__ import annotations

from typing import Optional


class AdamW:
    """torch.optim.AdamW: decoupled weight decay, bias-corrected moments (switchable)."""

    def __init__(
        self,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair, got {betas!r}")
        self.bias_correction: bool = bool(bias_correction)
        self.betas: tuple[float, float] = (float(betas[0]), float(betas[1]))
        self.eps: float = float(eps)
        self.weight_decay: float = float(weight_decay)

    def _options(self) -> dict:
        return {
            "optimizer": "adamw",
            "bias_correction": self.bias_correction,
            "beta1": self.betas[0],
            "beta2": self.betas[1],
            "epsilon": self.eps,
            "weight_decay": self.weight_decay,
        }

    def __repr__(self) -> str:
        return (f"AdamW(bias_correction={self.bias_correction}, betas={self.betas}, eps={self.eps}, "
                f"weight_decay={self.weight_decay})")


class SGD:
    """torch.optim.SGD: weight decay added to the gradient, momentum with dampening,
    Nesterov. ``lr`` is the initial learning rate stored in the checkpoint (default 1e-3)."""

    def __init__(
        self,
        lr: Optional[float] = None,
        momentum: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        self.lr: Optional[float] = None if lr is None else float(lr)
        self.momentum: float = float(momentum)
        self.dampening: float = float(dampening)
        self.nesterov: bool = bool(nesterov)
        self.weight_decay: float = float(weight_decay)

    def _options(self) -> dict:
        return {
            "optimizer": "sgd",
            "learning_rate": self.lr,
            "momentum": self.momentum,
            "dampening": self.dampening,
            "nesterov": self.nesterov,
            "sgd_weight_decay": self.weight_decay,
        }

    def __repr__(self) -> str:
        return (f"SGD(lr={self.lr}, momentum={self.momentum}, dampening={self.dampening}, "
                f"nesterov={self.nesterov}, weight_decay={self.weight_decay})")


__all__ = ["AdamW", "SGD"]
