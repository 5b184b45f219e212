"""One training run: (arm, fault kind, seed) -> a JSON-able result.

Everything random is seeded from the run's seed: the model's initialisation,
the batches and the fault schedule, so all arms of a seed are paired. Runs
use one thread (two runs in parallel use both cores best).
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Dict

import torch

from . import arms as A
from . import faults as F
from .data import Batches, load_corpus, validation_windows
from .model import ByteTransformer, ModelConfig

DEFAULTS = dict(steps=320, batch=8, ctx=64, lr=1e-3, weight_decay=0.1, lr_warmup=100,
                val_windows=64, base_clip=0.0, layers=2, recipe="tensor")

_CORPUS = None


def corpus():
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = load_corpus()
    return _CORPUS


def make_arm(spec: Dict[str, Any]) -> A.Arm:
    kind = spec["arm"]
    if kind == "hf":
        return A.NoControl(low_cost=False)
    if kind == "lc":
        return A.NoControl(low_cost=True)
    if kind == "gnmr":
        return A.GnmrArm(spec["target"], spec["job_id"], spec["config"],
                         rank=spec.get("rank", 0), world_size=spec.get("world_size", 1),
                         decision_wait_ms=spec.get("decision_wait_ms", 10000.0),
                         group=spec.get("group"), forward=spec.get("forward", False),
                         backward=spec.get("backward", False))
    if kind == "oracle":
        return A.OracleArm(spec["lag"], spec.get("tau", 2.5), spec.get("clip_min_scale", 0.01))
    if kind == "random":
        return A.RandomArm(spec["budget"], spec["lock"])
    if kind == "gclip":
        return A.GlobalClipArm(spec["max_norm"])
    if kind == "zclip":
        return A.ZClipArm(spec["z"])
    if kind in ("static", "autoswitch", "skip", "spam"):
        from . import peers
        if kind == "static":
            return peers.StaticHP(spec["units"])
        if kind == "autoswitch":
            return peers.Autoswitch(spec.get("underflow", 0.05), spec.get("rel_error", 1e-4))
        if kind == "skip":
            return peers.SkipBatch(spec.get("factor", 1.25))
        return peers.Spam(spec.get("interval", 500), spec.get("theta", 5000.0))
    raise ValueError(f"unknown arm {kind!r}")


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


@torch.no_grad()
def validation_loss(model, ctx: int, windows: int) -> float:
    """Mean cross-entropy (nats/byte) on fixed validation windows, fp32 path."""
    model.eval()
    promoted = [u.gnmr_promoted for u in model.units()]
    low = [u.low_cost for u in model.units()]
    faults = [u.fault for u in model.units()]
    model.set_low_cost(False)
    for u in model.units():
        u.fault = None
    x, y = validation_windows(corpus().val, ctx, windows)
    loss = float(model(x, y))
    for u, p, l, f in zip(model.units(), promoted, low, faults):
        u.gnmr_promoted, u.low_cost, u.fault = p, l, f
    model.train()
    return loss


def run(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Trains one arm on one seed; see the module docstring."""
    cfg = dict(DEFAULTS)
    cfg.update({k: spec[k] for k in DEFAULTS if k in spec})
    torch.set_num_threads(1)
    seed, steps = int(spec["seed"]), int(cfg["steps"])
    rank, world = int(spec.get("rank", 0)), int(spec.get("world_size", 1))
    ddp = world > 1 and torch.distributed.is_initialized()

    torch.manual_seed(seed)
    model = ByteTransformer(ModelConfig(ctx=cfg["ctx"], layers=int(cfg["layers"])))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"],
                                  weight_decay=cfg["weight_decay"], betas=(0.9, 0.95))
    batches = Batches(corpus().train, cfg["batch"], cfg["ctx"], seed=10_000 + seed)
    units = model.units()
    schedule = F.make_schedule(seed, spec.get("faults", "none"), len(units), steps)
    arm = make_arm(spec)
    model.set_low_cost(arm.low_cost)
    # The backward quantizer exists in "grad"-fault runs only, and in the
    # clean runs of an arm that observes it (its false-admission check).
    for u in units:
        u.grad_quant = spec.get("faults") == "grad" or spec.get("grad_quant", False)
        u.recipe = cfg["recipe"]
    arm.setup(model, optimizer, schedule, seed, steps)

    # alternate > 0 (the overhead measurement): the arm runs only in every
    # other block of `alternate` steps, so one run times steps with and
    # without the monitor under the same conditions. With
    # "overhead_modes": 3 the blocks cycle through three modes instead:
    # 0 monitor off, 1 gradients only, 2 gradients and forward tensors
    # (an arm built with forward=True), so the forward channel's own cost
    # is a paired difference within one run.
    alternate = int(spec.get("alternate", 0))
    modes = int(spec.get("overhead_modes", 2))
    losses, norms, in_force, times, watched_steps, step_modes = [], [], [], [], [], []
    cpu_times = []  # the training thread's CPU time per step: no preemption by other processes
    skipped = 0
    try:
        for t in range(steps):
            t0, c0 = time.perf_counter(), time.thread_time()
            for g in optimizer.param_groups:
                g["lr"] = lr_at(t, steps, cfg["lr"], cfg["lr_warmup"])
            active = F.faults_at(schedule, t)
            for i, u in enumerate(units):
                u.fault = active.get(i)
            mode = 1 if alternate <= 0 else (t // alternate) % modes
            watched = mode > 0
            if watched:
                if modes == 3:
                    arm.forward_step = mode == 2
                arm.before_forward(t)
            x, y = batches.next()
            if ddp:  # each rank takes its half of the batch: the mean equals the full batch's
                half = x.shape[0] // world
                x, y = x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
            loss = model(x, y)
            loss.backward()
            if ddp:
                for p in model.parameters():
                    if p.grad is not None:
                        torch.distributed.all_reduce(p.grad)
                        p.grad.div_(world)
                lt = loss.detach().clone()
                torch.distributed.all_reduce(lt)
                loss = lt / world
            total = math.sqrt(sum(float(p.grad.double().pow(2).sum())
                                  for p in model.parameters() if p.grad is not None))
            arm.last_loss = float(loss)  # the skip-batch peer reads it
            if not watched or arm.after_backward(t):
                if cfg["base_clip"] > 0 and not arm.replaces_base_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["base_clip"])
                optimizer.step()
            else:
                skipped += 1
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.thread_time() - c0)
            losses.append(float(loss))
            norms.append(total)
            in_force.append(sorted(arm.in_force) if watched else [])
            watched_steps.append(watched)
            step_modes.append(mode)
            if spec.get("stop_nonfinite") and not math.isfinite(losses[-1]):
                break  # diverged (setting N2's natural runs): the rest is NaN too
    finally:
        arm.close()
    for u in units:
        u.fault, u.gnmr_promoted = None, False
    val = validation_loss(model, cfg["ctx"], cfg["val_windows"])
    return {
        "name": spec["name"], "arm": spec["arm"], "seed": seed, "faults": spec.get("faults", "none"),
        "steps": steps, "units": model.unit_names(), "val_loss": val, "train_loss": losses,
        "grad_norm": norms, "in_force": in_force, "admissions": arm.admissions,
        "schedule": [e.__dict__ for e in schedule], "step_time_s": times,
        "step_cpu_s": cpu_times, "watched": watched_steps,
        "modes": step_modes,
        "optimizer_skips": skipped, "extra": arm.extra(), "spec": {
            k: v for k, v in spec.items() if k not in ("target",)},
        "pid": os.getpid(),
    }
