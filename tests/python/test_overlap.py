"""Overlap with backward (``Monitor(..., observe_during_backward=True)``):
units observed by their gradient hooks while backward runs give the same
statistics (every StepInfo norm, bit for bit), the same plans (digests) and
so bit-identical parameters as the after_backward path, over a run with
spikes, a NaN (the same-step guard skips the step) and a unit that gets no
gradient on some steps (inactive). Gradient accumulation over micro-batches
gives the same with and without ``accumulating()``. On PyTorch < 2.1 (no
post-accumulate-grad hooks) the option warns and falls back; the tests that
need the hooks skip there."""
from __future__ import annotations

import math
import struct
import warnings

import pytest
import torch

import gnmr.torch as gt
import gnmr_testlib
from gnmr import _overlap

HOOKS = _overlap.AVAILABLE
needs_hooks = pytest.mark.skipif(not HOOKS, reason="PyTorch < 2.1: no "
                                 "register_post_accumulate_grad_hook")

UNITS = ["a", "b", "c", "d", "e"]
CFG = {"warmup": 6, "lock_steps": 4, "max_o": 2, "lag": 0,
       "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.01},
                   {"pattern": "b", "action": "skip"}]}
SPIKES = {12: ("a", 40.0), 20: ("b", 60.0), 28: ("d", 50.0), 29: ("c", 30.0)}
NAN_STEP, NAN_UNIT = 24, "c"
STEPS = 36


class Net(gnmr_testlib.Net):
    """gnmr_testlib's a, b, c (no bias), d in a row, plus e, a side branch
    used on two steps of three (a unit without gradient on the others:
    inactive)."""

    def __init__(self) -> None:
        super().__init__()
        self.e = torch.nn.Linear(16, 4)

    def forward(self, x, use_e: bool):
        x = torch.tanh(self.a(x))
        x = torch.tanh(self.b(x))
        x = torch.tanh(self.c(x))
        y = self.d(x)
        return y + self.e(x) if use_e else y


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _run(overlap: bool, job: str, micro: int = 1, hint: bool = False):
    torch.manual_seed(7)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if not HOOKS else "error")
        mon = gt.Monitor(model, target="local", job_id=job, config=CFG, strict=True,
                         observe_during_backward=overlap)
    out, early = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        hooks = []
        # Spikes and the NaN enter through tensor hooks, i.e. during
        # backward, before each gradient is accumulated: a gradient edited
        # after backward would not be seen by observe_during_backward.
        if step in SPIKES:
            unit, f = SPIKES[step]
            hooks += [p.register_hook(lambda g, f=f: g * f)
                      for p in getattr(model, unit).parameters()]
        if step == NAN_STEP:
            def poison(g):
                g = g.clone()
                g[0, 0] = float("nan")
                return g
            hooks.append(getattr(model, NAN_UNIT).weight.register_hook(poison))
        for k in range(micro):
            gen = torch.Generator().manual_seed(100 * step + k)
            x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)
            loss = torch.nn.functional.mse_loss(model(x, use_e=step % 3 != 0), y) / micro
            if hint and k < micro - 1:
                with mon.accumulating():
                    loss.backward()
            else:
                loss.backward()
        for h in hooks:
            h.remove()
        mon.after_backward(step)
        mon.apply(step, opt)
        info = mon.last_step_info()
        out.append((step, info.has_decision, info.digest, info.skip_step, info.nonfinite,
                    sorted(info.units), {n: _bits(info.norms[n]) for n in UNITS}))
        if mon._backward_hooks is not None:
            early.append(mon._backward_hooks.last_early)
    params = [p.detach().clone() for p in model.parameters()]
    assert mon.errors == 0
    mon.close()
    return out, params, early


def _same(a, b):
    assert len(a[0]) == len(b[0])
    for x, y in zip(a[0], b[0]):
        assert x == y, (x, y)
    for p, q in zip(a[1], b[1]):
        assert torch.equal(p, q)


def test_overlap_is_bit_identical_to_after_backward():
    plain = _run(False, "ov-plain")
    over = _run(True, "ov-early")
    _same(plain, over)
    steps = plain[0]
    assert any(s[1] for s in steps) and any(s[5] for s in steps), "spikes admit units"
    assert steps[NAN_STEP][3] and steps[NAN_STEP][4], "the NaN skips its step"
    assert not math.isfinite(struct.unpack("<d", steps[NAN_STEP][6][NAN_UNIT])[0])
    assert struct.unpack("<d", steps[0][6]["e"])[0] == 0.0, "e without gradient: inactive"
    if HOOKS:
        # Every unit with a gradient was observed by its hooks.
        assert over[2] == [5 if s % 3 else 4 for s in range(STEPS)]


@needs_hooks
@pytest.mark.parametrize("hint", [False, True])
def test_gradient_accumulation_matches_the_plain_path(hint):
    plain = _run(False, f"ov-acc-plain-{hint}", micro=3)
    over = _run(True, f"ov-acc-early-{hint}", micro=3, hint=hint)
    _same(plain, over)
    per_step = [5 if s % 3 else 4 for s in range(STEPS)]
    # With the hint only the last micro-batch observes; without, every one.
    assert over[2] == (per_step if hint else [3 * n for n in per_step])


@needs_hooks
def test_partial_unit_is_left_to_after_backward():
    """A unit whose parameters do not all get a gradient in the last
    backward keeps no stale result: after_backward computes it."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    mon = gt.Monitor(model, target="local", job_id="ov-partial", strict=True,
                     unit_group=lambda name: "all", observe_during_backward=True)
    x = torch.randn(3, 4)
    model(x).sum().backward()            # every parameter: the unit is observed early
    assert mon._backward_hooks.stored == [True]
    model[1](x).sum().backward()         # only the second layer's: stale now
    assert mon._backward_hooks.done == [False]
    mon.after_backward(0)
    want = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()))
    assert mon.client.unit_norms(0)[0] == pytest.approx(want, rel=1e-6)
    assert mon._backward_hooks.last_early == 1
    mon.close()


def test_refused_where_gradients_change_after_their_hooks():
    model = Net()
    with pytest.raises(ValueError, match="world_size > 1"):
        gt.Monitor(model, target="local", job_id="ov-dp", world_size=2, rank=0, start=False,
                   observe_during_backward=True)


@pytest.mark.skipif(HOOKS, reason="PyTorch >= 2.1 has the hooks")
def test_old_pytorch_warns_and_falls_back():
    with pytest.warns(RuntimeWarning, match="PyTorch >= 2.1"):
        mon = gt.Monitor(Net(), target="local", job_id="ov-old", start=False,
                         observe_during_backward=True)
    assert not mon.observe_during_backward
