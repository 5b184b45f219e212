#!/usr/bin/python3
"""Overlap with backward (``Monitor(..., observe_during_backward=True)``):
the time of backward + ``after_backward`` per step with the units observed
by their gradient hooks during backward, against the after_backward path
(every unit's statistics computed by ``after_backward``), and against no
Monitor at all (what the statistics cost), in one run.

Model: ``--layers`` Linear layers of ``--width`` x ``--width`` (default 12 of
1024 x 1024, 12.6 M fp32 parameters, 48 MB of gradients: large enough that
the statistics show), a batch of ``--batch`` rows, on the CPU. Three models
with the same weights, one per variant, run in rounds that cycle through
the variants (so the machine's load drifts alike over all three); each
round times ``--steps`` steps of each. Forward and the optimizer are not
timed (zero_grad and forward run before the clock starts).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python <venv python> bench/overlap_backward.py

Prints the median milliseconds per step (backward + after_backward, and
after_backward alone) and the ratios. No daemon (target "local").
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import gnmr.torch as gt  # noqa: E402
from gnmr import _overlap  # noqa: E402


def make(layers: int, width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*mods)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--steps", type=int, default=1, help="steps per variant per round")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = p.parse_args()
    if not _overlap.AVAILABLE:
        print(f"PyTorch {torch.__version__} has no register_post_accumulate_grad_hook "
              "(>= 2.1): nothing to compare", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    variants = {}
    for name, overlap in (("no Monitor", None), ("after_backward", False),
                          ("observe_during_backward", True)):
        model = make(args.layers, args.width)
        mon = (gt.Monitor(model, target="local", job_id=f"overlap-{name.replace(' ', '-')}",
                          observe_during_backward=overlap) if overlap is not None else None)
        variants[name] = (model, mon, [], [])
    x = torch.randn(args.batch, args.width)
    steps = dict.fromkeys(variants, 0)  # each Monitor's own step numbers
    for r in range(args.rounds + 1):  # round 0 warms up, not counted
        for name, (model, mon, total, after) in variants.items():
            for _ in range(args.steps):
                for q in model.parameters():
                    q.grad = None
                loss = model(x).square().mean()
                t0 = time.perf_counter()
                loss.backward()
                t1 = time.perf_counter()
                if mon is not None:
                    mon.after_backward(steps[name])
                steps[name] += 1
                t2 = time.perf_counter()
                if r > 0:
                    total.append((t2 - t0) * 1e3)
                    after.append((t2 - t1) * 1e3)
    base = statistics.median(variants["no Monitor"][2])
    plain = statistics.median(variants["after_backward"][2])
    print(f"{args.layers} x Linear({args.width}, {args.width}), batch {args.batch}, "
          f"{torch.get_num_threads()} torch thread(s), PyTorch {torch.__version__}, "
          f"{args.rounds} rounds x {args.steps} steps per variant")
    print("| variant | backward + after_backward, median ms | after_backward alone, ms "
          "| vs after_backward | statistics cost over no Monitor |")
    print("| --- | --- | --- | --- | --- |")
    for name, (_, mon, total, after) in variants.items():
        t = statistics.median(total)
        a = statistics.median(after)
        print(f"| {name} | {t:.2f} | {a:.2f} | {t / plain:.3f} | "
              f"{(t - base):+.2f} ms ({100 * (t - base) / base:+.1f}%) |")
    for _, mon, _, _ in variants.values():
        if mon is not None:
            assert mon.errors == 0
            mon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
