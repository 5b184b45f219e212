"""Per-unit gradient statistics of an uncontrolled run, as a `gnmrctl replay`
trace (CSV: step,unit,sumsq,amax,nonfinite,zeros,numel; README "Tuning
offline").

The run is the evaluation's LC arm (train.py's recipe: FP8 inputs, AdamW,
warmup then cosine) with no controller attached, so one trace can be
replayed under any controller config. What a unit reports is what
gnmr.torch.Monitor reports for it: the statistics of the gradients of all
its parameters (weight and bias) together. uncontrolled_steps() is the run
itself, shared with experiments/gnmr_traces.py.
"""
from __future__ import annotations

import os
from typing import Iterator, List, Optional, Tuple

import torch

from . import faults as F
from . import train as T
from .data import Batches
from .model import ByteTransformer, ModelConfig


def _unit_stats(unit) -> Tuple[float, float, int, int, int]:
    sumsq, amax, nonfinite, zeros, numel = 0.0, 0.0, 0, 0, 0
    for p in unit.parameters():
        g = p.grad
        if g is None:
            continue
        g = g.detach().double()
        finite = torch.isfinite(g)
        nonfinite += int((~finite).sum())
        zeros += int((g == 0).sum())
        numel += g.numel()
        if bool(finite.all()):
            sumsq += float(g.pow(2).sum())
            amax = max(amax, float(g.abs().max()))
        else:
            sumsq = float("nan")
    return sumsq, amax, nonfinite, zeros, numel


def uncontrolled_steps(seed: int, faults: str = "none", steps: Optional[int] = None
                       ) -> Iterator[Tuple[int, ByteTransformer, List[F.FaultEvent]]]:
    """Trains the LC arm of `seed` (fault schedule `faults`: none | amp | att)
    for `steps` steps (default: the evaluation's 320) with no controller, and
    yields (step, model, schedule) after each backward pass, before the
    optimizer step. One thread, like every evaluation run."""
    cfg = dict(T.DEFAULTS)
    steps = int(steps or cfg["steps"])
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = ByteTransformer(ModelConfig(ctx=cfg["ctx"]))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"],
                            betas=(0.9, 0.95))
    batches = Batches(T.corpus().train, cfg["batch"], cfg["ctx"], seed=10_000 + seed)
    units = model.units()
    schedule = F.make_schedule(seed, faults, len(units), steps)
    model.set_low_cost(True)
    for t in range(steps):
        for g in opt.param_groups:
            g["lr"] = T.lr_at(t, steps, cfg["lr"], cfg["lr_warmup"])
        active = F.faults_at(schedule, t)
        for i, u in enumerate(units):
            u.fault = active.get(i)
        x, y = batches.next()
        model(x, y).backward()
        yield t, model, schedule
        opt.step()
        opt.zero_grad(set_to_none=True)


def record(path: str, seed: int, faults: str = "none", steps: Optional[int] = None) -> str:
    """Writes the trace of uncontrolled_steps(seed, faults, steps) to `path`
    and returns `path`."""
    rows: List[str] = ["step,unit,sumsq,amax,nonfinite,zeros,numel"]
    for t, model, _ in uncontrolled_steps(seed, faults, steps):
        for name, u in zip(model.unit_names(), model.units()):
            s, a, nf, z, n = _unit_stats(u)
            rows.append(f"{t},{name},{s!r},{a!r},{nf},{z},{n}")
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(tmp, "w") as f:
        f.write("\n".join(rows) + "\n")
    os.replace(tmp, path)
    return path
