"""ORTModule's options: DebugOptions, LogLevel, and the environment variables users know
from ONNX Runtime (``ORTMODULE_FALLBACK_POLICY``, ``ORTMODULE_ENABLE_COMPUTE_OPTIMIZER``,
``ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER``, ``ORTMODULE_LOG_LEVEL``,
``ORTMODULE_SAVE_ONNX_PATH``)."""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass

logger = logging.getLogger("onnxtrain.ortmodule")


class LogLevel(enum.IntEnum):
    VERBOSE = 0
    DEVINFO = 1
    INFO = 2
    WARNING = 3
    FATAL = 4

    def python_level(self) -> int:
        return {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.CRITICAL}[self]


class FallbackPolicy(enum.IntFlag):
    """When ORTModule runs the module in PyTorch instead of failing (ONNX Runtime's names)."""

    FALLBACK_DISABLE = 0
    FALLBACK_UNSUPPORTED_DEVICE = 1
    FALLBACK_UNSUPPORTED_DATA = 2
    FALLBACK_UNSUPPORTED_TORCH_MODEL = 4
    FALLBACK_UNSUPPORTED_ONNX_MODEL = 8
    FALLBACK_BAD_INITIALIZATION = 16
    FALLBACK_FORCE_TORCH_FORWARD = 32
    FALLBACK_FORCE_TORCH_BACKWARD = 64

    @classmethod
    def default(cls) -> FallbackPolicy:
        return (
            cls.FALLBACK_UNSUPPORTED_DEVICE
            | cls.FALLBACK_UNSUPPORTED_DATA
            | cls.FALLBACK_UNSUPPORTED_TORCH_MODEL
            | cls.FALLBACK_UNSUPPORTED_ONNX_MODEL
        )

    @classmethod
    def parse(cls, text: str) -> FallbackPolicy:
        """``"FALLBACK_DISABLE"`` or names joined by ``|``, as ORTMODULE_FALLBACK_POLICY holds."""
        policy = cls.FALLBACK_DISABLE
        for part in text.replace(" ", "").split("|"):
            if not part:
                continue
            name = part.split(".")[-1]  # "_FallbackPolicy.FALLBACK_..." as ORT's docs write it
            if name not in cls.__members__:
                known = ", ".join(cls.__members__)
                raise ValueError(f"ORTMODULE_FALLBACK_POLICY: unknown policy {part!r} (known: {known})")
            policy |= cls[name]
        return policy


@dataclass
class DebugOptions:
    """``log_level``: how much ORTModule logs; ``save_onnx``: write the exported, pre-gradient
    and training graphs as ``<onnx_prefix>_torch_exported_<mode>.onnx``,
    ``<onnx_prefix>_pre_grad_optimized_<mode>.onnx`` and ``<onnx_prefix>_<mode>.onnx``
    (mode ``training`` or ``inference``), in ``ORTMODULE_SAVE_ONNX_PATH`` when set.
    ``profile_prefix``: when set, every forward and backward run is timed kernel by kernel
    and ``ORTModule.end_profiling()`` writes the profiles (Chrome-trace JSON) as
    ``<profile_prefix>_<mode>_<date>_<time>.json``."""

    log_level: LogLevel = LogLevel.WARNING
    save_onnx: bool = False
    onnx_prefix: str = ""
    profile_prefix: str = ""

    def __post_init__(self) -> None:
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("DebugOptions: save_onnx=True needs an onnx_prefix")
        self.log_level = LogLevel(self.log_level)


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value not in ("0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {value!r}")
    return value == "1"


@dataclass
class RuntimeOptions:
    """The options one ORTModule runs with: its DebugOptions, then the environment."""

    log_level: LogLevel
    save_onnx: bool
    onnx_prefix: str
    fallback_policy: FallbackPolicy
    label_sparsity: bool
    label_density_threshold: float = 0.9
    profile_prefix: str = ""

    @classmethod
    def from_debug_options(cls, debug: DebugOptions) -> RuntimeOptions:
        log_level = debug.log_level
        if "ORTMODULE_LOG_LEVEL" in os.environ:
            text = os.environ["ORTMODULE_LOG_LEVEL"]
            log_level = LogLevel[text] if text in LogLevel.__members__ else LogLevel(int(text))
        prefix = debug.onnx_prefix
        save_path = os.environ.get("ORTMODULE_SAVE_ONNX_PATH")
        if debug.save_onnx and save_path:
            prefix = os.path.join(save_path, prefix)
        policy_text = os.environ.get("ORTMODULE_FALLBACK_POLICY")
        policy = FallbackPolicy.parse(policy_text) if policy_text else FallbackPolicy.default()
        compute_optimizer = _flag("ORTMODULE_ENABLE_COMPUTE_OPTIMIZER", True)
        label_sparsity = compute_optimizer and _flag("ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER", True)
        return cls(log_level, debug.save_onnx, prefix, policy, label_sparsity, profile_prefix=debug.profile_prefix)
