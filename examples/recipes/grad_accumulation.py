"""Recipe: gradient accumulation (docs/recipes.md).

GNMR observes once per optimizer step, at the accumulation boundary: the
gradient it measures is the one the optimizer will apply, and ``step`` is the
optimizer step's number, not the micro-batch's. Observing each micro-batch
would report partial sums as steps and stretch warmup and lock periods by
the accumulation factor.

    python3 examples/recipes/grad_accumulation.py --target unix:/run/gnmr/gnmrd.sock
"""
from __future__ import annotations

import argparse

import torch

import gnmr.torch as gt
from _toy import CONFIG, Net, batch, target_arg

ACCUMULATE = 4


def train_step(step, model, optimizer, monitor, accumulate=ACCUMULATE, hook=None):
    optimizer.zero_grad(set_to_none=True)
    for micro in range(accumulate):
        x, y = batch(step, micro)
        loss = torch.nn.functional.mse_loss(model(x), y) / accumulate
        loss.backward()                 # sums into .grad; GNMR does not look yet
    if hook is not None:
        hook(step, model)               # (tests inject faults here)
    monitor.after_backward(step)        # once: the accumulated gradient
    return monitor.apply(step, optimizer)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target_arg(p)
    args = p.parse_args()
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with gt.Monitor(model, target=args.target, job_id="recipe-accum", config=CONFIG) as mon:
        for step in range(args.steps):
            applied = train_step(step, model, opt, mon)
            print(step, "skip" if applied.skip_step else "", applied.clipped or "")


if __name__ == "__main__":
    main()
