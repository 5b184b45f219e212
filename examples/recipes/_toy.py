"""The toy model and data the recipes train (CPU, seconds): four Linear
layers a, b, c, d, each one GNMR unit, and a deterministic batch per step.
``spike`` and ``poison`` are how the tests inject the faults a recipe is
about; a real job has no use for them."""
from __future__ import annotations

import torch

UNITS = ["a", "b", "c", "d"]
# A small config so something happens within a few dozen steps (the
# defaults warm up for 50 steps): lag 0 acts on the step a spike is seen.
CONFIG = {"warmup": 5, "lock_steps": 4, "max_o": 4, "lag": 0, "entry": "clip"}


class Net(torch.nn.Module):
    def __init__(self, linear=torch.nn.Linear) -> None:
        super().__init__()
        self.a = linear(8, 16)
        self.b = linear(16, 16)
        self.c = linear(16, 16)
        self.d = linear(16, 4)

    def forward(self, x):
        x = torch.tanh(self.a(x))
        x = torch.tanh(self.b(x))
        x = torch.tanh(self.c(x))
        return self.d(x)


def batch(step: int, micro: int = 0, rank: int = 0, n: int = 16):
    g = torch.Generator().manual_seed(100_000 * rank + 1000 * step + micro)
    return torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)


def spike(model: torch.nn.Module, unit: str, factor: float) -> None:
    """Multiplies `unit`'s gradient (a gradient spike)."""
    with torch.no_grad():
        for p in getattr(model, unit).parameters():
            p.grad.mul_(factor)


def poison(model: torch.nn.Module, unit: str) -> None:
    """Puts an inf into `unit`'s weight gradient (an fp16 overflow)."""
    with torch.no_grad():
        getattr(model, unit).weight.grad[0, 0] = float("inf")


def target_arg(parser) -> None:
    parser.add_argument("--target", default="unix:/run/gnmr/gnmrd.sock",
                        help="gnmrd address (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=30)
