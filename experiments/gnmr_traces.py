#!/usr/bin/env python3
"""Per-unit GNMR around each fault of an uncontrolled low-cost run (the
numbers docs/evaluation.md quotes for attention coupling and LayerNorm
masking). GNMR is computed offline exactly as the controller keeps its mean
(plain average for 50 samples, then EMA 0.98 with the clamp min(norm, tau*mu)).

    /usr/bin/python3 experiments/gnmr_traces.py --seed 1 --faults amp
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from gnmr_eval import arms as A  # noqa: E402
from gnmr_eval import faults as F  # noqa: E402
from gnmr_eval import train as T  # noqa: E402
from gnmr_eval.data import Batches  # noqa: E402
from gnmr_eval.model import ByteTransformer, ModelConfig  # noqa: E402


def gnmr_trace(seed: int, kind: str, tau: float):
    cfg = T.DEFAULTS
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = ByteTransformer(ModelConfig(ctx=cfg["ctx"]))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"],
                            betas=(0.9, 0.95))
    batches = Batches(T.corpus().train, cfg["batch"], cfg["ctx"], seed=10_000 + seed)
    units = model.units()
    steps = cfg["steps"]
    schedule = F.make_schedule(seed, kind, len(units), steps)
    mu, n, trace = [0.0] * len(units), [0] * len(units), []
    for t in range(steps):
        for g in opt.param_groups:
            g["lr"] = T.lr_at(t, steps, cfg["lr"], cfg["lr_warmup"])
        active = F.faults_at(schedule, t)
        for i, u in enumerate(units):
            u.fault = active.get(i)
        x, y = batches.next()
        model(x, y).backward()
        row = []
        for i, v in enumerate(A.unit_norms(units)):
            row.append(v / mu[i] if n[i] >= A.WARMUP else math.nan)
            mu[i] = A.update_mean(mu[i], n[i], v, tau)
            n[i] += 1
        trace.append(row)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model.unit_names(), schedule, trace


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--faults", choices=["amp", "att"], default="amp")
    p.add_argument("--tau", type=float, default=6.0, help="the history clamp (default 6)")
    a = p.parse_args()
    names, schedule, trace = gnmr_trace(a.seed, a.faults, a.tau)
    print(f"seed {a.seed}, {a.faults} faults: GNMR of the faulty unit over its first steps, "
          "and the three highest other units at its first step")
    for e in schedule:
        own = " ".join(f"{trace[t][e.unit]:.2f}" for t in range(e.first, min(e.last, e.first + 5) + 1))
        others = sorted(((trace[e.first][j], names[j]) for j in range(len(names)) if j != e.unit),
                        reverse=True)[:3]
        print(f"  {names[e.unit]:18s} steps {e.first}-{e.last}: {own}   | "
              + ", ".join(f"{n} {v:.1f}" for v, n in others))
    values = [v for row in trace[60:] for v in row if not math.isnan(v)]
    q = statistics.quantiles(values, n=100)
    print(f"  all unit-steps from 60: 1st percentile {q[0]:.2f}, 5th {q[4]:.2f}, median {q[49]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
