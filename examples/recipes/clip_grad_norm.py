"""Recipe: GNMR with ``torch.nn.utils.clip_grad_norm_`` (docs/recipes.md).

Order: GNMR observes the raw gradients, applies its plan (a spiking unit is
clipped to its own recent norm, or dropped), and only then the global clip
runs, on a step GNMR did not skip. Observing after the global clip would
hide a spike from GNMR (every unit scaled by the same factor); clipping
globally before GNMR acts lets one spiking unit shrink every other unit's
update for that step.

    python3 examples/recipes/clip_grad_norm.py --target unix:/run/gnmr/gnmrd.sock
"""
from __future__ import annotations

import argparse

import torch

import gnmr.torch as gt
from _toy import CONFIG, Net, batch, target_arg

MAX_NORM = 1.0


def train_step(step, model, optimizer, monitor, max_norm=MAX_NORM, hook=None):
    """Returns (AppliedPlan, total norm before the global clip or None)."""
    optimizer.zero_grad(set_to_none=True)
    x, y = batch(step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    if hook is not None:
        hook(step, model)               # (tests inject faults here)
    monitor.after_backward(step)        # 1. raw per-unit gradients
    applied = monitor.apply(step, optimizer, step_optimizer=False)  # 2. GNMR's plan
    total = None
    if not applied.skip_step:           # never clip (or step) a NaN/Inf gradient
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # 3. global clip
        optimizer.step()
    return applied, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target_arg(p)
    args = p.parse_args()
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with gt.Monitor(model, target=args.target, job_id="recipe-clip", config=CONFIG) as mon:
        for step in range(args.steps):
            applied, total = train_step(step, model, opt, mon)
            print(step, "skip" if applied.skip_step else f"total norm {float(total):.3f}",
                  applied.clipped or "")


if __name__ == "__main__":
    main()
