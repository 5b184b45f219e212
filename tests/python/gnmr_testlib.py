"""A small deterministic training loop for the Python tests.

Four Linear units a, b, c, d; spikes multiply one unit's gradient after
backward (after the DP all-reduce, so every rank sees the same), a NaN
poisons one. Every step records what the Monitor applied, and the grads
right before apply() so tests can check the exact arithmetic.
"""
from __future__ import annotations

import dataclasses
import socket
from typing import Dict, List, Optional, Tuple

import torch

import gnmr.torch as gt

UNITS = ["a", "b", "c", "d"]


def free_port() -> int:
    """A free TCP port on loopback for a gloo process group."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 16)
        self.c = torch.nn.Linear(16, 16, bias=False)
        self.d = torch.nn.Linear(16, 4)

    def forward(self, x):
        x = torch.tanh(self.a(x))
        x = torch.tanh(self.b(x))
        x = torch.tanh(self.c(x))
        return self.d(x)


def make(seed: int = 0, opt: str = "sgd"):
    torch.manual_seed(seed)
    model = Net()
    if opt == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    return model, optimizer


def batch(step: int, rank: int = 0):
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(32, 8, generator=g)
    y = torch.randn(32, 4, generator=g)
    return x, y


@dataclasses.dataclass
class StepRecord:
    step: int
    applied: gt.AppliedPlan
    grads_before: Dict[str, List[Optional[torch.Tensor]]]  # unit -> grads before apply
    grads_after: Dict[str, List[Optional[torch.Tensor]]]
    params_before: Dict[str, List[torch.Tensor]]
    params_after: Dict[str, List[torch.Tensor]]
    opt_steps: Dict[str, float]  # unit -> optimizer state 'step' of its weight after apply


def _snap(model, grads: bool):
    out = {}
    for name in UNITS:
        m = getattr(model, name)
        if grads:
            out[name] = [None if p.grad is None else p.grad.detach().clone()
                         for p in m.parameters()]
        else:
            out[name] = [p.detach().clone() for p in m.parameters()]
    return out


def train(model, optimizer, monitor: Optional[gt.Monitor], steps, *,
          spikes: Dict[int, Tuple[str, float]] = None, nans: Dict[int, str] = None,
          ddp=None, rank: int = 0, record: bool = True) -> List[StepRecord]:
    """Runs `steps` (an iterable of step numbers); returns per-step records."""
    spikes = spikes or {}
    nans = nans or {}
    net = ddp if ddp is not None else model
    records = []
    for step in steps:
        if monitor is not None:
            monitor.before_forward(step)
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(step, rank=0 if ddp is not None else rank)
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        with torch.no_grad():
            if step in spikes:
                unit, factor = spikes[step]
                for p in getattr(model, unit).parameters():
                    p.grad.mul_(factor)
            if step in nans:
                getattr(model, nans[step]).weight.grad[0, 0] = float("nan")
        gb = _snap(model, True) if record else None
        pb = _snap(model, False) if record else None
        if monitor is not None:
            monitor.after_backward(step)
            applied = monitor.apply(step, optimizer)
        else:
            optimizer.step()
            applied = gt.AppliedPlan(step=step, optimizer_stepped=True)
        ga = _snap(model, True) if record else None
        pa = _snap(model, False) if record else None
        steps_after = {}
        for name in UNITS:
            st = optimizer.state.get(getattr(model, name).weight, {})
            steps_after[name] = float(st["step"]) if "step" in st else 0.0
        records.append(StepRecord(step, applied, gb, ga, pb, pa, steps_after))
    return records


def digests(records: List[StepRecord]):
    """(step, has_decision, digest, sorted entries) per step."""
    out = []
    for r in records:
        entries = []
        if r.applied.plan is not None:
            entries = [(e.unit, int(e.action), e.since, e.until, e.first_step)
                       for e in r.applied.plan.entries]
        out.append((r.step, r.applied.has_decision, r.applied.digest, tuple(entries),
                    r.applied.global_skip))
    return out
