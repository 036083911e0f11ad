"""Small torch modules that the training tests train against PyTorch and bench/training_step.py
times (issue 13's models): an LSTM next-token model (keyboard-style), a GRU classifier and a
quantization-aware CNN. Their sizes default to the tests'; the bench makes them larger."""

from __future__ import annotations

import torch


class LstmLanguageModel(torch.nn.Module):
    """embedding -> LSTM -> linear: next-token logits [batch * seq, vocab]."""

    def __init__(self, vocab: int = 24, embedding: int = 16, hidden: int = 20) -> None:
        super().__init__()
        self.vocab = vocab
        self.embedding = torch.nn.Embedding(vocab, embedding)
        self.lstm = torch.nn.LSTM(embedding, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, input_ids):  # type: ignore[no-untyped-def]
        y, _ = self.lstm(self.embedding(input_ids))
        return self.head(y).reshape(-1, self.vocab)


class GruClassifier(torch.nn.Module):
    """bidirectional GRU -> both last hidden states -> linear."""

    def __init__(self, features: int = 6, hidden: int = 12, classes: int = 5) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(features, hidden, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(2 * hidden, classes)

    def forward(self, x):  # type: ignore[no-untyped-def]
        _, h = self.gru(x)  # [2, batch, hidden]
        return self.head(torch.cat([h[0], h[1]], dim=1))


class QATNet(torch.nn.Module):
    """conv 3x3 -> ReLU -> max pool 2 -> linear, fake-quantized as QAT does it: weights int8 per
    output channel, activations uint8 per tensor. Scales are powers of two, so x / scale (ONNX)
    and x * (1 / scale) (torch) are the same number and both quantize alike."""

    def __init__(self, channels: int = 8, size: int = 8, classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, channels, 3, padding=1)
        self.fc = torch.nn.Linear(channels * (size // 2) ** 2, classes)
        self.register_buffer("conv_scale", torch.full((channels,), 2.0**-7))
        self.register_buffer("fc_scale", torch.full((classes,), 2.0**-8))
        self.register_buffer("zero", torch.zeros(max(channels, classes), dtype=torch.int32))

    @staticmethod
    def act(x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, 0, 255)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels, classes = self.conv.out_channels, self.fc.out_features
        x = self.act(x, 2.0**-5, 128)
        w = torch.fake_quantize_per_channel_affine(self.conv.weight, self.conv_scale, self.zero[:channels], 0, -128,
                                                   127)
        y = torch.relu(torch.nn.functional.conv2d(x, w, self.conv.bias, padding=1))
        y = self.act(y, 2.0**-5, 0)
        y = torch.nn.functional.max_pool2d(y, 2).flatten(1)
        w = torch.fake_quantize_per_channel_affine(self.fc.weight, self.fc_scale, self.zero[:classes], 0, -128, 127)
        return torch.nn.functional.linear(y, w, self.fc.bias)
