"""Hand-written torch builders: recurrent nets, a UNet, a transformer encoder, control flow.

Recurrent models are ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (stacked, some bidirectional)
with a Linear head on the last step. The control-flow models call ``torch.jit.script``
functions with a data-dependent ``if`` and a ``for`` over a dimension, which the legacy
(TorchScript) exporter keeps as ONNX ``If`` and ``Loop``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SMALL", "small"]


def recurrent(kind: str, layers: int, bidirectional: bool) -> tuple[Any, tuple]:
    import torch

    class Recurrent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = getattr(torch.nn, kind)(16, 32, num_layers=layers, bidirectional=bidirectional,
                                               batch_first=True)
            self.head = torch.nn.Linear(64 if bidirectional else 32, 10)

        def forward(self, x: Any) -> Any:
            out, _ = self.rnn(x)
            return self.head(out[:, -1])

    return Recurrent(), (torch.randn(2, 12, 16),)


def unet() -> tuple[Any, tuple]:
    """A two-level UNet: conv blocks, max-pooling down, ConvTranspose up, skip concatenations."""
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down1, self.down2, self.mid = block(3, 8), block(8, 16), block(16, 32)
            self.up2, self.dec2 = nn.ConvTranspose2d(32, 16, 2, stride=2), block(32, 16)
            self.up1, self.dec1 = nn.ConvTranspose2d(16, 8, 2, stride=2), block(16, 8)
            self.out = nn.Conv2d(8, 2, 1)

        def forward(self, x: Any) -> Any:
            d1 = self.down1(x)
            d2 = self.down2(nn.functional.max_pool2d(d1, 2))
            m = self.mid(nn.functional.max_pool2d(d2, 2))
            u2 = self.dec2(torch.cat([self.up2(m), d2], 1))
            u1 = self.dec1(torch.cat([self.up1(u2), d1], 1))
            return self.out(u1)

    return UNet(), (torch.rand(1, 3, 32, 32),)


def transformer_encoder() -> tuple[Any, tuple]:
    """``nn.TransformerEncoder``: 2 layers, width 32, 4 heads, on (1, 10, 32)."""
    import torch

    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True, dropout=0.0)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), (torch.randn(1, 10, 32),)


def _scripted() -> tuple[Any, Any]:
    import torch

    @torch.jit.script
    def clip_norm(x: torch.Tensor, limit: float) -> torch.Tensor:
        norm = torch.sqrt((x * x).sum())
        if bool(norm > limit):
            return x * (limit / norm)
        return x - 1.0

    @torch.jit.script
    def scan(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.zeros_like(x[:, 0])
        for t in range(x.size(1)):
            h = torch.tanh(torch.matmul(x[:, t], w) + h)
        return h

    return clip_norm, scan


def control_if() -> tuple[Any, tuple]:
    """A Linear, then an ``If`` on the activation's norm (exported by the legacy exporter)."""
    import torch

    clip_norm, _ = _scripted()

    class ClipNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            return clip_norm(self.fc(x), 3.0)

    return ClipNorm(), (torch.randn(2, 8),)


def control_loop() -> tuple[Any, tuple]:
    """A ``Loop`` over the sequence axis: an RNN cell written as a scripted for loop."""
    import torch

    _, scan = _scripted()

    class Scan(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 8) * 0.3)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: Any) -> Any:
            return self.fc(scan(x, self.w))

    return Scan(), (torch.randn(2, 6, 8),)


SMALL = {
    "lstm": lambda: recurrent("LSTM", 1, False),
    "lstm_stacked_bidirectional": lambda: recurrent("LSTM", 2, True),
    "gru_bidirectional": lambda: recurrent("GRU", 1, True),
    "gru_stacked": lambda: recurrent("GRU", 2, False),
    "rnn_tanh": lambda: recurrent("RNN", 1, False),
    "unet": unet,
    "transformer_encoder": transformer_encoder,
    "control_if": control_if,
    "control_loop": control_loop,
}


def small(name: str) -> tuple[Any, tuple]:
    import torch

    torch.manual_seed(0)
    module, args = SMALL[name]()
    return module.eval(), args
