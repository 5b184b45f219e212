"""Recipe: a promote callback for a module with two real paths
(docs/recipes.md).

``TwoPathLinear`` computes in bf16 (the low-precision path, standing in for
FP8) unless it is promoted; then in fp32. GNMR's ``promote`` action calls
``promote_callback(name, module, True)`` when the unit enters recovery and
``(..., False)`` when it leaves; ``before_forward(step)`` switches before
the forward pass (lag >= 1: the plan of ``step`` is already decided).

    python3 examples/recipes/promote_two_paths.py --target unix:/run/gnmr/gnmrd.sock
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import gnmr.torch as gt
from _toy import CONFIG, Net, batch, target_arg


class TwoPathLinear(torch.nn.Linear):
    promoted = False
    last_path = ""

    def forward(self, x):
        if self.promoted:                      # high fidelity: fp32
            self.last_path = "fp32"
            return F.linear(x, self.weight, self.bias)
        self.last_path = "bf16"                # low precision
        return F.linear(x.bfloat16(), self.weight.bfloat16(), self.bias.bfloat16()).float()


def promote(name: str, module: torch.nn.Module, promoted: bool) -> None:
    module.promoted = promoted


def make_monitor(model, target, job_id="recipe-promote", **kwargs):
    config = dict(CONFIG, lag=1)               # every unit's action: promote (the default)
    return gt.Monitor(model, target=target, job_id=job_id, config=config,
                      unit_filter=lambda name, m: isinstance(m, TwoPathLinear),
                      promote_callback=promote, **kwargs)


def train_step(step, model, optimizer, monitor, hook=None):
    monitor.before_forward(step)               # promotions in force at `step`
    optimizer.zero_grad(set_to_none=True)
    x, y = batch(step)
    F.mse_loss(model(x), y).backward()
    if hook is not None:
        hook(step, model)                      # (tests inject faults here)
    monitor.after_backward(step)
    return monitor.apply(step, optimizer)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target_arg(p)
    args = p.parse_args()
    model = Net(linear=TwoPathLinear)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with make_monitor(model, args.target) as mon:
        for step in range(args.steps):
            applied = train_step(step, model, opt, mon)
            print(step, {n: getattr(model, n).last_path for n in "abcd"}, applied.promoted)


if __name__ == "__main__":
    main()
