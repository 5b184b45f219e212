"""Recipe: mixed precision with torch's GradScaler (docs/recipes.md).

Order per step: unscale first, so GNMR measures the true gradients, not
gradients times a loss scale that changes on its own; then GNMR's plan
(clip or drop units, the same-step guard); then ``scaler.step`` unless the
plan skips the step; ``scaler.update()`` always, so an overflow still lowers
the scale. A step with an inf is skipped by both (GradScaler's found_inf,
GNMR's guard): the parameters stay bit-identical.

fp16 autocast and an enabled GradScaler need CUDA; on a CPU the same code
runs bf16 autocast with the scaler disabled (bf16 needs no loss scaling).

    python3 examples/recipes/amp_gradscaler.py --target unix:/run/gnmr/gnmrd.sock
"""
from __future__ import annotations

import argparse

import torch

import gnmr.torch as gt
from _toy import CONFIG, Net, batch, target_arg


def make_scaler(device: str):
    # torch >= 2.3: torch.amp.GradScaler(device); older (1.13): CUDA only.
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device, enabled=(device == "cuda"))
    return torch.cuda.amp.GradScaler(enabled=(device == "cuda"))


def train_step(step, model, optimizer, scaler, monitor, device="cpu", hook=None):
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    optimizer.zero_grad(set_to_none=True)
    x, y = (t.to(device) for t in batch(step))
    with torch.autocast(device_type=device, dtype=dtype):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)          # 1. true gradients (records found_inf)
    if hook is not None:
        hook(step, model)               # (tests inject faults here)
    monitor.after_backward(step)        # 2. GNMR's statistics of them
    applied = monitor.apply(step, optimizer, step_optimizer=False)  # 3. the plan
    if not applied.skip_step:
        scaler.step(optimizer)          # 4. itself skips when unscale_ saw an inf
    scaler.update()                     # 5. always: an overflow lowers the scale
    return applied


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target_arg(p)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Net().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = make_scaler(device)
    with gt.Monitor(model, target=args.target, job_id="recipe-amp", config=CONFIG) as mon:
        for step in range(args.steps):
            applied = train_step(step, model, opt, scaler, mon, device)
            print(step, "skip" if applied.skip_step else "", applied.clipped or "")


if __name__ == "__main__":
    main()
