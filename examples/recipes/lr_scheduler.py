"""Recipe: an LR scheduler when a step is skipped (docs/recipes.md).

The scheduler steps only when the optimizer did (``applied.optimizer_stepped``):
the schedule counts updates taken, as Megatron-LM does for a skipped
iteration and as GradScaler users do. A skipped step (a NaN/Inf, or the
plan's global skip) then neither advances warmup or decay nor triggers
PyTorch's "lr_scheduler.step() before optimizer.step()" warning. Per-unit
skips and clips still take the optimizer step, so they advance it.

    python3 examples/recipes/lr_scheduler.py --target unix:/run/gnmr/gnmrd.sock
"""
from __future__ import annotations

import argparse

import torch

import gnmr.torch as gt
from _toy import CONFIG, Net, batch, target_arg


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: min(1.0, (n + 1) / 10))


def train_step(step, model, optimizer, scheduler, monitor, hook=None):
    optimizer.zero_grad(set_to_none=True)
    x, y = batch(step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    if hook is not None:
        hook(step, model)               # (tests inject faults here)
    monitor.after_backward(step)
    applied = monitor.apply(step, optimizer)
    if applied.optimizer_stepped:
        scheduler.step()                # only after an update was taken
    return applied


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target_arg(p)
    args = p.parse_args()
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = make_scheduler(opt)
    with gt.Monitor(model, target=args.target, job_id="recipe-lr", config=CONFIG) as mon:
        for step in range(args.steps):
            applied = train_step(step, model, opt, sched, mon)
            print(step, "skip" if applied.skip_step else "", sched.get_last_lr()[0])


if __name__ == "__main__":
    main()
