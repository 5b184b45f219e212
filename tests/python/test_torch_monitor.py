"""gnmr.torch.Monitor on CPU PyTorch with the real gnmrd: actions applied as
planned (exact arithmetic), lag 0 and lag 1, a NaN skips the step, None
grads, and the daemon absent."""
from __future__ import annotations

import warnings

import pytest
import torch

import gnmr
import gnmr.torch as gt
from gnmr_testlib import UNITS, batch, make, train

# d's spike is large enough for its lag-0 entry clip to hit the default
# clip_min_scale (0.01: a x50 spike would be scaled to its mean, unclamped).
SPIKES = {8: ("a", 50.0), 14: ("b", 50.0), 20: ("c", 50.0), 26: ("d", 1000.0)}


def config(lag):
    return {"warmup": 5, "lock_steps": 4, "max_o": 4, "lag": lag, "entry": "clip",
            "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.001},
                        {"pattern": "b", "action": "skip"},
                        {"pattern": "c", "action": "reset_state"}]}  # d: promote


def check_step(r, model, lag):
    """Every entry of the plan was carried out exactly; nothing else changed."""
    plan = r.applied.plan
    assert plan is not None
    by_unit = {UNITS[e.unit]: e for e in plan.entries}
    for name in UNITS:
        e = by_unit.get(name)
        gb, ga = r.grads_before[name], r.grads_after[name]
        promoted = name in r.applied.promoted
        if e is None:
            assert all(torch.equal(x, y) for x, y in zip(gb, ga)), (r.step, name)
            assert not promoted
            continue
        A = gnmr.Action
        clip = e.action == A.CLIP or (e.action == A.PROMOTE and e.first_step and
                                      e.entry == gnmr.EntryTreatment.CLIP)
        skip = e.first_step and (e.action == A.SKIP or (
            e.action == A.PROMOTE and e.entry == gnmr.EntryTreatment.SKIP))
        if clip:
            assert r.applied.clipped[name] == e.scale
            assert e.scale == gnmr.clip_scale(e.ref_norm, e.norm, e.clip_min_scale)
            assert all(torch.equal(x * e.scale, y) for x, y in zip(gb, ga)), (r.step, name)
        elif skip:
            assert all(y is None for y in ga) and name in r.applied.skipped
            assert all(torch.equal(x, y) for x, y in
                       zip(r.params_before[name], r.params_after[name]))
        else:
            assert all(torch.equal(x, y) for x, y in zip(gb, ga)), (r.step, name)
        if e.action == A.RESET_STATE and e.first_step:
            assert name in r.applied.reset
            assert r.opt_steps[name] == 1.0  # state cleared, then one fresh Adam step
        assert promoted == (e.action == A.PROMOTE)
        assert e.since <= r.step < e.until


@pytest.mark.parametrize("lag", [0, 1])
def test_actions_applied_as_planned(gnmrd, lag):
    model, opt = make(seed=1, opt="adam")
    calls = []

    def promote_cb(name, module, promoted):
        calls.append((name, promoted))
        gt.default_promote_callback(name, module, promoted)

    mon = gt.Monitor(model, target=gnmrd.target, job_id=f"act{lag}", config=config(lag),
                     decision_wait_ms=3000, promote_callback=promote_cb, strict=True)
    assert mon.unit_names == UNITS
    assert mon.wait_connected(10)
    recs = train(model, opt, mon, range(34), spikes=SPIKES)
    for r in recs:
        if r.step >= 1 or lag == 0:
            assert r.applied.has_decision, r.step
        check_step(r, model, lag)
    # Each spiked unit was admitted with its decision in force from spike + lag.
    for spike, (name, _) in SPIKES.items():
        r = recs[spike + lag]
        e = r.applied.plan.find(UNITS.index(name))
        assert e is not None and e.since == spike + lag and e.first_step, (name, r.applied)
        assert e.until == spike + lag + 4
    # Lag 0 treats the spiking gradient itself: the clip unit's and the promoted
    # unit's (entry clip) spike steps are scaled down.
    if lag == 0:
        assert recs[8].applied.clipped["a"] < 0.1
        # clamped at the default clip_min_scale
        assert recs[26].applied.clipped["d"] == gnmr.default_config()["clip_min_scale"] == 0.01
    assert recs[14 + lag].applied.skipped == ["b"]
    assert "c" in recs[20 + lag].applied.reset
    assert ("d", True) in calls and ("d", False) in calls  # promoted, then demoted
    mon.client.flush(2000)
    k = mon.counters()
    assert k.acks_sent >= 30 and k.decisions_rejected == 0 and mon.errors == 0
    mon.close()


def test_nan_skips_optimizer_step(gnmrd):
    model, opt = make(seed=2)
    mon = gt.Monitor(model, target=gnmrd.target, job_id="nan", config=config(0),
                     decision_wait_ms=3000, strict=True)
    assert mon.wait_connected(10)
    recs = train(model, opt, mon, range(12), nans={9: "b"})
    for r in recs:
        check_step(r, model, 0)
        if r.step == 9:
            assert r.applied.global_skip and not r.applied.optimizer_stepped
            for name in UNITS:
                assert all(torch.equal(x, y) for x, y in
                           zip(r.params_before[name], r.params_after[name]))
        else:
            assert not r.applied.global_skip and r.applied.optimizer_stepped
    mon.close()


def test_none_grads_are_zero(gnmrd):
    model, opt = make(seed=3)
    for p in model.c.parameters():
        p.requires_grad_(False)  # frozen: not a unit
    mon = gt.Monitor(model, target=gnmrd.target, job_id="none", config=config(1),
                     decision_wait_ms=3000, strict=True)
    assert mon.unit_names == ["a", "b", "d"]
    for step in range(3):
        opt.zero_grad(set_to_none=True)
        mon.after_backward(step)  # every grad None: observed as zeros (inactive)
        applied = mon.apply(step, opt)
        assert applied.clipped == {} and applied.skipped == []
    mon.close()


class _Recording:
    """The Monitor's client, recording the units marked inactive per observe."""

    def __init__(self, client):
        self._client = client
        self.marked = []
        self.observed = {}

    def mark_inactive(self, unit):
        self.marked.append(unit)
        return self._client.mark_inactive(unit)

    def observe(self, step, *args):
        self.observed[step] = sorted(self.marked)
        self.marked = []
        return self._client.observe(step, *args)

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_units_without_grads_are_left_out(gnmrd):
    """A MoE-like step where one expert's forward did not run: its grads are
    None, the Monitor marks it inactive (left out of the sparse report), and
    the step is still decided over real gRPC (docs/statistics.md)."""
    model, opt = make(seed=4)
    mon = gt.Monitor(model, target=gnmrd.target, job_id="moe", config=config(1),
                     decision_wait_ms=3000, strict=True)
    rec = mon.client = _Recording(mon.client)
    b = UNITS.index("b")
    for step in range(8):
        opt.zero_grad(set_to_none=True)
        x, y = batch(step)
        h = torch.tanh(model.a(x))
        if step % 2 == 0:  # expert b gets tokens on even steps only
            h = torch.tanh(model.b(h))
        torch.nn.functional.mse_loss(model.d(torch.tanh(model.c(h))), y).backward()
        mon.after_backward(step)
        applied = mon.apply(step, opt)
        assert rec.observed[step] == ([] if step % 2 == 0 else [b]), step
        if step >= 1:
            assert applied.plan is not None and applied.plan.has_decision, step
    assert mon.errors == 0
    assert mon.counters().missed_decisions == 0
    mon.close()


def test_daemon_absent_training_unchanged():
    ref_model, ref_opt = make(seed=4)
    train(ref_model, ref_opt, None, range(20), spikes=SPIKES, record=False)

    model, opt = make(seed=4)
    mon = gt.Monitor(model, target="unix:/nonexistent-gnmr/gnmrd.sock", job_id="absent",
                     config=config(0), decision_wait_ms=3000)
    import time
    t0 = time.monotonic()
    recs = train(model, opt, mon, range(20), spikes=SPIKES, record=False)
    assert time.monotonic() - t0 < 10  # never waits while disconnected
    for r in recs:
        a = r.applied
        assert not a.has_decision and a.optimizer_stepped
        assert not (a.clipped or a.skipped or a.reset or a.promoted or a.global_skip)
    for p, q in zip(ref_model.parameters(), model.parameters()):
        assert torch.equal(p, q)
    with pytest.warns(RuntimeWarning, match="not saved"):
        sd = mon.state_dict()
    assert sd["controller_state"] is None and sd["units"] == UNITS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mon.load_state_dict(sd) is False  # nothing to restore
    assert mon.errors == 0
    mon.close()


def test_unit_group_makes_one_unit_of_several_modules(gnmrd):
    """b and c as one unit "bc": one norm, promoted together; the callback
    sees each module under its own name."""
    model, opt = make(seed=4)
    calls = []

    def callback(name, module, promoted):
        calls.append((name, promoted))
        module.gnmr_promoted = promoted

    mon = gt.Monitor(model, target=gnmrd.target, job_id="group",
                     config={"warmup": 4, "lag": 1, "lock_steps": 3, "max_o": 1},
                     unit_group=lambda n: "bc" if n in ("b", "c") else n,
                     promote_callback=callback, decision_wait_ms=3000, strict=True)
    assert mon.wait_connected(10)
    assert mon.unit_names == ["a", "bc", "d"]
    assert mon.unit_modules("bc") == [model.b, model.c]
    recs = train(model, opt, mon, range(14), spikes={8: ("c", 50.0)}, record=False)
    promoted = [r.applied.promoted for r in recs]
    assert promoted[9] == ["bc"] and promoted[11] == ["bc"] and promoted[12] == []
    assert ("b", True) in calls and ("c", True) in calls
    assert ("b", False) in calls and ("c", False) in calls
    assert not model.b.gnmr_promoted and not model.c.gnmr_promoted
    with pytest.raises(ValueError, match="unit_group"):
        gt.Monitor(model, target=gnmrd.target, job_id="group-bad", unit_group=lambda n: "",
                   start=False)
    mon.close()


def test_client_defaults_are_the_cpp_ones():
    """The Monitor's client defaults come from gnmr::ClientOptions, not a copy."""
    import inspect
    from gnmr import _gnmr
    cpp = _gnmr.ClientOptions(target="unix:/x", job_id="j")
    params = inspect.signature(gt.Monitor.__init__).parameters
    assert params["decision_wait_ms"].default == cpp.decision_wait_ms
    assert params["max_queued_reports"].default == cpp.max_queued_reports
    mon = gt.Monitor(torch.nn.Linear(2, 2), target="unix:/nonexistent-gnmr/d.sock",
                     job_id="defaults", start=False, high_precision=False)
    assert mon.options.decision_wait_ms == cpp.decision_wait_ms
    assert mon.options.max_queued_reports == cpp.max_queued_reports
    mon.close()
