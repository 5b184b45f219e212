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

from gnmr_eval import arms as A  # noqa: E402
from gnmr_eval.trace import uncontrolled_steps  # noqa: E402


def gnmr_trace(seed: int, kind: str, tau: float):
    mu, n, trace, schedule, names = None, None, [], [], []
    for _, model, schedule in uncontrolled_steps(seed, kind):
        if mu is None:
            names = model.unit_names()
            mu, n = [0.0] * len(names), [0] * len(names)
        row = []
        for i, v in enumerate(A.unit_norms(model.units())):
            row.append(v / mu[i] if n[i] >= A.WARMUP else math.nan)
            mu[i] = A.update_mean(mu[i], n[i], v, tau)
            n[i] += 1
        trace.append(row)
    return names, schedule, trace


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
