"""The training-loop recipes of examples/recipes (docs/recipes.md), each run
against the real gnmrd on CPU PyTorch, asserting what its docstring claims.
ctest python_recipes."""
from __future__ import annotations

import math
import os
import sys
import warnings

import pytest
import torch

RECIPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "recipes")
sys.path.insert(0, os.path.abspath(RECIPES))

import _toy  # noqa: E402
import amp_gradscaler  # noqa: E402
import clip_grad_norm  # noqa: E402
import ddp_no_sync  # noqa: E402
import grad_accumulation  # noqa: E402
import gnmr.torch as gt  # noqa: E402
import lr_scheduler  # noqa: E402
import promote_two_paths  # noqa: E402


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def bit_identical(xs, ys):
    return all(torch.equal(x, y) for x, y in zip(xs, ys))


def monitor(model, gnmrd, job_id, **kwargs):
    return gt.Monitor(model, target=gnmrd.target, job_id=job_id, config=_toy.CONFIG,
                      decision_wait_ms=3000, strict=True, **kwargs)


def faults(spikes=None, infs=None, seen=None):
    """A hook injecting spikes {step: (unit, factor)} and infs {step: unit};
    `seen` collects each step's gradients after the injection."""
    spikes, infs = spikes or {}, infs or {}

    def hook(step, model):
        if step in spikes:
            _toy.spike(model, *spikes[step])
        if step in infs:
            _toy.poison(model, infs[step])
        if seen is not None:
            seen[step] = {u: [p.grad.detach().clone() for p in getattr(model, u).parameters()]
                          for u in _toy.UNITS}
    return hook


def norm(grads):
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))


# ------------------------------------------------------------ GradScaler

def test_amp_gradscaler_skipped_inf_step_leaves_params_bit_identical(gnmrd):
    torch.manual_seed(0)
    model = _toy.Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = amp_gradscaler.make_scaler("cpu")  # disabled on CPU: bf16 autocast
    mon = monitor(model, gnmrd, "amp")
    seen = {}
    hook = faults(spikes={8: ("b", 100.0)}, infs={12: "c"}, seen=seen)
    for step in range(16):
        before = params(model)
        applied = amp_gradscaler.train_step(step, model, opt, scaler, mon, "cpu", hook)
        info = mon.last_step_info()
        if step == 12:
            assert applied.skip_step and applied.nonfinite and not applied.optimizer_stepped
            assert bit_identical(before, params(model))
        else:
            assert not applied.skip_step and not bit_identical(before, params(model)), step
            # GNMR measured the gradients scaler.step applied (unscaled).
            for u in _toy.UNITS:
                assert info.norms[u] == pytest.approx(norm(seen[step][u]), rel=1e-6)
        if step == 8:  # the spike (lag 0) was clipped before the scaler's step
            assert applied.clipped["b"] < 0.1
    mon.close()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="an enabled GradScaler needs CUDA in this torch (untested here)")
def test_amp_gradscaler_enabled_on_cuda(gnmrd):
    torch.manual_seed(0)
    model = _toy.Net().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = amp_gradscaler.make_scaler("cuda")
    mon = monitor(model, gnmrd, "amp-cuda")
    hook = faults(infs={9: "c"})
    for step in range(12):
        before, scale = params(model), scaler.get_scale()
        applied = amp_gradscaler.train_step(step, model, opt, scaler, mon, "cuda", hook)
        if step == 9:
            assert applied.skip_step and bit_identical(before, params(model))
            assert scaler.get_scale() == scale / 2  # update() still lowered the scale
    mon.close()


# ------------------------------------------------------- accumulation

def test_grad_accumulation_observes_once_per_optimizer_step(gnmrd):
    torch.manual_seed(0)
    model = _toy.Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mon = monitor(model, gnmrd, "accum")
    seen = {}
    hook = faults(spikes={9: ("a", 100.0)}, seen=seen)
    admitted = []
    for step in range(14):
        applied = grad_accumulation.train_step(step, model, opt, mon, hook=hook)
        info = mon.last_step_info()
        assert applied.optimizer_stepped and info.has_decision
        # The accumulated gradient, the one the optimizer applies.
        for u in _toy.UNITS:
            assert info.norms[u] == pytest.approx(norm(seen[step][u]), rel=1e-6), (step, u)
        admitted += [(step, u) for u, e in info.units.items() if e.first_step]
    assert (9, "a") in admitted
    c = mon.counters()
    assert c.reports_enqueued == 14  # one per optimizer step, not per micro-batch
    mon.close()


# ----------------------------------------------------------- scheduler

def test_lr_scheduler_counts_only_updates_taken(gnmrd):
    torch.manual_seed(0)
    model = _toy.Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = lr_scheduler.make_scheduler(opt)
    mon = monitor(model, gnmrd, "lr")
    hook = faults(infs={0: "a", 6: "b"})  # step 0 skipped: the first optimizer step
    skipped = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch's "scheduler before optimizer" warning
        for step in range(12):
            before = params(model)
            applied = lr_scheduler.train_step(step, model, opt, sched, mon, hook)
            if step in (0, 6):
                assert applied.skip_step and bit_identical(before, params(model))
            skipped += applied.skip_step
    assert skipped == 2 and sched.last_epoch == 10
    ref_opt = torch.optim.AdamW(_toy.Net().parameters(), lr=1e-3)
    ref = lr_scheduler.make_scheduler(ref_opt)
    for _ in range(10):
        ref_opt.step()
        ref.step()
    assert sched.get_last_lr() == ref.get_last_lr()
    mon.close()


# -------------------------------------------------------- clip_grad_norm_

def run_clip(gnmrd, job_id, use_gnmr):
    torch.manual_seed(0)
    model = _toy.Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    mon = monitor(model, gnmrd, job_id) if use_gnmr else None
    seen = {}
    spike = faults(spikes={8: ("a", 1000.0)}, seen=seen)
    out = {}
    for step in range(12):
        if use_gnmr:
            applied, total = clip_grad_norm.train_step(step, model, opt, mon, max_norm=5.0,
                                                       hook=spike)
            info = mon.last_step_info()
        else:  # the global clip alone, for contrast
            opt.zero_grad(set_to_none=True)
            x, y = _toy.batch(step)
            torch.nn.functional.mse_loss(model(x), y).backward()
            spike(step, model)
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            applied = info = None
        b_after = [p.grad.detach().clone() for p in model.b.parameters()]
        out[step] = (applied, info, total, seen[step], b_after)
    if mon is not None:
        mon.close()
    return out


def test_clip_grad_norm_after_gnmr_keeps_a_spike_from_shrinking_other_units(gnmrd):
    with_gnmr = run_clip(gnmrd, "clip", True)
    applied, info, total, raw, b_after = with_gnmr[8]
    # GNMR saw the raw spike and clipped unit a (lag 0) before the global clip...
    assert info.norms["a"] == pytest.approx(norm(raw["a"]), rel=1e-6)
    assert "a" in applied.clipped and applied.clipped["a"] <= 0.01
    # ...so the global clip left b's gradient as it was.
    assert float(total) <= 5.0 and bit_identical(raw["b"], b_after)
    # Without GNMR, the same spike makes the global clip shrink b's
    # gradient more than 10-fold (5 / total).
    _, _, total_alone, raw_alone, b_alone = run_clip(gnmrd, "clip-alone", False)[8]
    assert float(total_alone) > 50.0
    assert norm(b_alone) < norm(raw_alone["b"]) / 10


# --------------------------------------------------------- DDP no_sync

def _ddp_spike(step, model):
    if step == 9:  # after the all-reduce: the same on both ranks
        _toy.spike(model, "a", 100.0)


def test_ddp_no_sync_ranks_apply_identical_plans(gnmrd, tmp_path):
    r0, r1 = ddp_no_sync.launch(gnmrd.target, 14, str(tmp_path), hook=_ddp_spike)
    for a, b in zip(r0["record"], r1["record"]):
        assert a["digest"] == b["digest"] and a["has_decision"] and b["has_decision"]
        assert a["norms"] == b["norms"]  # both observed the all-reduced gradient
        assert a["clipped"] == b["clipped"] and a["promoted"] == b["promoted"]
    assert "a" in r0["record"][9]["clipped"]
    assert bit_identical(r0["params"], r1["params"])
    for r in (r0, r1):
        assert r["counters"]["reports_enqueued"] == 14 and r["counters"]["missed_decisions"] == 0
    # By default one replica reports for both (docs/scale.md). The all-reduced
    # gradients are bit-identical, so the replica check finds nothing and the
    # standby keeps standing by: it never has to send its held reports.
    held = sorted(r["counters"]["reports_held"] for r in (r0, r1))
    assert held[0] == 0 and held[1] >= 10, held
    assert "replicas_differ" not in gnmrd.read_log() and "not data-parallel replicas" not in gnmrd.read_log()


# ------------------------------------------------------ promote callback

def test_promote_callback_switches_the_real_path(gnmrd):
    torch.manual_seed(0)
    model = _toy.Net(linear=promote_two_paths.TwoPathLinear)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mon = promote_two_paths.make_monitor(model, gnmrd.target, job_id="promote",
                                         decision_wait_ms=3000, strict=True)
    hook = faults(spikes={8: ("b", 100.0)})
    promoted_steps = []
    for step in range(20):
        applied = promote_two_paths.train_step(step, model, opt, mon, hook)
        paths = {u: getattr(model, u).last_path for u in _toy.UNITS}
        # The forward pass of `step` ran the path the plan of `step` chose.
        for u in _toy.UNITS:
            assert paths[u] == ("fp32" if u in applied.promoted else "bf16"), (step, u)
        if applied.promoted:
            promoted_steps.append(step)
    assert promoted_steps and promoted_steps[0] == 9  # spike at 8, lag 1
    assert not model.b.promoted and promoted_steps[-1] < 19  # released again
    # The two paths really differ: fp32 vs bf16 on the same input.
    x = torch.randn(4, 16)
    model.b.promoted = True
    hi = model.b(x)
    model.b.promoted = False
    assert not torch.equal(hi, model.b(x))
    mon.close()
