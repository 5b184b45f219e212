"""`denied: clip` (docs/controller.md, "Denied candidates"): at lag 0 a unit
the budget leaves out has its gradient of that very step scaled toward its
mean by Monitor.apply, and nothing is done to it on the next step. Two
units spike together with max_o 1; local mode and gnmrd give the same."""
from __future__ import annotations

import math

import pytest
import torch

import gnmr.torch as gt
from gnmr import _gnmr
from gnmr_testlib import batch, make

CFG = {"warmup": 5, "max_o": 1, "lock_steps": 4, "lag": 0, "denied": "clip"}
SPIKE_STEP = 12
SPIKES = {"b": 40.0, "c": 20.0}  # b ranks first (admitted), c is denied


def _grads(model, name):
    return [p.grad.detach().clone() for p in getattr(model, name).parameters()]


def _run(target, job):
    model, opt = make(seed=7)
    mon = gt.Monitor(model, target=target, job_id=job, config=CFG, strict=True)
    seen = {}
    for step in range(SPIKE_STEP + 3):
        mon.before_forward(step)
        opt.zero_grad(set_to_none=True)
        x, y = batch(step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        if step == SPIKE_STEP:
            with torch.no_grad():
                for name, factor in SPIKES.items():
                    for p in getattr(model, name).parameters():
                        p.grad.mul_(factor)
        before = _grads(model, "c")
        mon.after_backward(step)
        applied = mon.apply(step, opt)
        seen[step] = (applied, before, _grads(model, "c"))
    counters = mon.counters().as_dict()
    mon.close()
    return seen, counters


def _check(seen, counters):
    applied, before, after = seen[SPIKE_STEP]
    assert applied.has_decision
    names = {e.unit: e for e in applied.plan.entries}
    c = [e for e in applied.plan.entries if e.denied_clip]
    assert len(c) == 1, applied.plan.entries
    e = c[0]
    assert e.action == _gnmr.Action.CLIP
    assert (e.since, e.until, e.first_step) == (SPIKE_STEP, SPIKE_STEP + 1, True)
    assert 0.0 < e.scale < 0.5  # a 20x spike, pulled toward the mean
    assert math.isclose(e.scale, _gnmr.clip_scale(e.ref_norm, e.norm, e.clip_min_scale))
    assert "c" in applied.clipped and applied.clipped["c"] == pytest.approx(e.scale)
    for b, a in zip(before, after):
        assert torch.allclose(a, b * e.scale)
    assert len(names) == 2  # b's lock and c's clip
    # The next step: b still locked, nothing for c, its gradient untouched.
    applied, before, after = seen[SPIKE_STEP + 1]
    assert all(not e.denied_clip for e in applied.plan.entries)
    assert "c" not in applied.clipped
    for b, a in zip(before, after):
        assert torch.equal(a, b)
    assert counters["missed_decisions"] == 0


def test_local_mode_clips_the_denied_unit_on_that_step_only():
    seen, counters = _run("local", "denied-local")
    _check(seen, counters)


def test_gnmrd_gives_the_same_clip(gnmrd):
    local, _ = _run("local", "denied-cmp")
    seen, counters = _run(gnmrd.target, "denied-cmp")
    _check(seen, counters)
    for step, (applied, _b, after) in seen.items():
        assert applied.digest == local[step][0].digest, step
        assert torch.equal(after[0], local[step][2][0]), step


def test_clip_needs_lag_zero():
    model, _ = make()
    with pytest.raises(ValueError, match="denied"):
        gt.Monitor(model, target="local", job_id="bad-denied", config={**CFG, "lag": 1})
