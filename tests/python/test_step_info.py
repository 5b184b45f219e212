"""Monitor.last_step_info(), step callbacks and metrics_logger with the real
gnmrd: norms are the statistics the client reported (checked against the
gradients before apply), the units in recovery carry their action and clip
scale, skips and misses show, a failing callback never stops training."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import gnmr.torch as gt
from gnmr_testlib import UNITS, make, train

SPIKES = {8: ("a", 50.0), 14: ("d", 1000.0)}
CONFIG = {"warmup": 5, "lock_steps": 4, "max_o": 4, "lag": 0, "entry": "clip",
          "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.001}]}


def norm_of(grads):
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads if g is not None))


def test_step_info_matches_what_apply_did(gnmrd):
    model, opt = make(seed=3)
    mon = gt.Monitor(model, target=gnmrd.target, job_id="info", config=CONFIG,
                     decision_wait_ms=3000, strict=True)
    assert mon.last_step_info() is None
    infos = []
    mon.add_step_callback(infos.append)
    recs = train(model, opt, mon, range(20), spikes=SPIKES, nans={17: "c"})
    assert [i.step for i in infos] == list(range(20))
    assert mon.last_step_info() is infos[-1]  # built once per step, shared
    admitted = set()
    for r, info in zip(recs, infos):
        a = r.applied
        assert (info.has_decision, info.digest, info.miss_reason) == \
            (a.has_decision, a.digest, a.miss_reason)
        assert info.has_decision and info.miss_reason == "" and info.digest != 0
        assert (info.skip_step, info.nonfinite, info.optimizer_stepped) == \
            (a.skip_step, a.nonfinite, a.optimizer_stepped)
        assert info.clipped == a.clipped and info.promoted == a.promoted
        # Every unit's norm is what after_backward measured, before any clip.
        for name in UNITS:
            want = norm_of(r.grads_before[name])
            got = info.norms[name]
            if math.isfinite(want):
                assert got == pytest.approx(want, rel=1e-6), (r.step, name)
            else:
                assert not math.isfinite(got)
        names = {a.plan.entries[i].unit for i in range(len(a.plan.entries))}
        assert set(info.units) == {UNITS[u] for u in names}
        for name, u in info.units.items():
            assert u.since <= r.step < u.until
            # Why: the admitting sample's trigger and figures, kept while in force.
            assert u.trigger in ("gnmr", "delta", "nonfinite"), (r.step, name, u.trigger)
            assert u.gnmr is not None and u.delta is not None and u.fwd_ratio == 0.0
            assert flat_key_values(info, name) == {k: getattr(u, k) for k in REASON}
            assert u.norm == pytest.approx(info.norms[name], rel=1e-12, nan_ok=True)
            if name in a.clipped:
                assert u.scale == a.clipped[name]
            if u.first_step:
                admitted.add((r.step, name, u.action))
        flat = info.flat()
        assert flat["gnmr/skip_step"] == float(a.skip_step)
        assert flat["gnmr/in_recovery"] == float(len(info.units))
        assert all(isinstance(v, float) for v in flat.values())
        for name in UNITS:
            if math.isfinite(info.norms[name]):
                assert flat[f"gnmr/norm/{name}"] == info.norms[name]
    # The spikes were admitted at their step (lag 0), with their actions.
    assert (8, "a", "clip") in admitted and (14, "d", "promote") in admitted
    # ... and say why: a x50 gradient is ~50 times its mean, and the reason
    # stays the admitting sample's for the whole lock.
    why_a = infos[8].units["a"]
    assert why_a.trigger == "gnmr" and why_a.gnmr > 20.0
    assert all(infos[s].units["a"].gnmr == why_a.gnmr for s in range(8, 12))
    assert infos[14].units["d"].gnmr > 100.0
    assert infos[8].clipped["a"] < 0.1 and infos[8].flat()["gnmr/scale/a"] < 0.1
    # The NaN at 17: skipped by the guard, NaN norm left out of flat().
    assert infos[17].skip_step and infos[17].nonfinite and not infos[17].optimizer_stepped
    assert "gnmr/norm/c" not in infos[17].flat() and infos[17].flat()["gnmr/nonfinite"] == 1.0
    mon.close()


REASON = ("gnmr", "delta", "fwd_ratio", "saturation_ratio", "underflow_ratio")


def flat_key_values(info, name):
    flat = info.flat()
    return {k: flat[f"gnmr/{k}/{name}"] for k in REASON}


def test_local_mode_says_why_too():
    model, opt = make(seed=3)
    mon = gt.Monitor(model, target="local", job_id="info-local", config=CONFIG, strict=True)
    infos = []
    mon.add_step_callback(infos.append)
    train(model, opt, mon, range(16), spikes=SPIKES, record=False)
    a, d = infos[8].units["a"], infos[14].units["d"]
    assert (a.trigger, d.trigger) == ("gnmr", "gnmr") and a.gnmr > 20.0 and d.gnmr > 100.0
    assert infos[8].flat()["gnmr/gnmr/a"] == a.gnmr
    mon.close()


def test_metrics_logger_every_and_interesting_steps(gnmrd):
    model, opt = make(seed=3)
    mon = gt.Monitor(model, target=gnmrd.target, job_id="logger", config=CONFIG,
                     decision_wait_ms=3000, strict=True)
    logged = {}
    mon.add_step_callback(gt.metrics_logger(lambda d, step: logged.setdefault(step, d),
                                            prefix="train/gnmr/", every=5))
    train(model, opt, mon, range(20), spikes={8: ("a", 50.0)}, record=False)
    # Every 5th step, and each step a unit is in recovery (a: 8..8+lock).
    assert {0, 5, 10, 15} <= set(logged) and 8 in logged
    assert all(s % 5 == 0 or logged[s]["train/gnmr/in_recovery"] >= 1 for s in logged)
    assert set(logged) != set(range(20))
    assert {f"train/gnmr/norm/{u}" for u in UNITS} <= set(logged[0])
    with pytest.raises(ValueError):
        gt.metrics_logger(print, every=0)
    mon.close()


def test_failing_callback_is_warned_not_raised(gnmrd):
    model, opt = make(seed=3)
    mon = gt.Monitor(model, target=gnmrd.target, job_id="badcb", config=CONFIG)

    def broken(info):
        raise KeyError("tracker down")

    seen = []
    mon.add_step_callback(broken)
    mon.add_step_callback(seen.append)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        recs = train(model, opt, mon, range(6), record=False)
    assert all(r.applied.optimizer_stepped for r in recs)  # training went on
    assert len(seen) == 6 and mon.errors == 6
    assert any("step callback broken" in str(x.message) for x in w)
    mon.remove_step_callback(broken)
    train(model, opt, mon, range(6, 8), record=False)
    assert mon.errors == 6 and len(seen) == 8
    mon.close()

    strict = gt.Monitor(model, target=gnmrd.target, job_id="badcb-strict", config=CONFIG,
                        strict=True)
    strict.add_step_callback(broken)
    with pytest.raises(KeyError):
        train(model, opt, strict, range(1), record=False)
    strict.close()


def test_step_info_without_daemon_says_why():
    model, opt = make(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mon = gt.Monitor(model, target="unix:/nonexistent/gnmrd.sock", job_id="nodaemon",
                         config=CONFIG, connect_timeout_s=1)
        train(model, opt, mon, range(3), record=False)
    info = mon.last_step_info()
    assert info.step == 2 and not info.has_decision and info.optimizer_stepped
    assert info.miss_reason == "disconnected" and info.flat()["gnmr/missed_decision"] == 1.0
    assert all(math.isfinite(v) and v > 0 for v in info.norms.values())  # measured locally
    mon.close()


def test_norms_of_an_older_step_read_nan(gnmrd):
    """After the next after_backward, the previous step's norms are gone:
    NaN, never another step's values."""
    model, opt = make(seed=3)
    mon = gt.Monitor(model, target=gnmrd.target, job_id="stale", config=CONFIG, strict=True)
    train(model, opt, mon, range(2), record=False)
    assert all(math.isfinite(v) for v in mon.client.unit_norms(1))
    assert all(math.isnan(v) for v in mon.client.unit_norms(0))
    mon.close()


@pytest.mark.parametrize("bad_step", [-1, 10**12])
def test_unit_norms_unknown_step(gnmrd, bad_step):
    model, _ = make(seed=3)
    mon = gt.Monitor(model, target=gnmrd.target, job_id="unknown", config=CONFIG, strict=True)
    assert [math.isnan(v) for v in mon.client.unit_norms(bad_step)] == [True] * len(UNITS)
    mon.close()


def test_flat_without_norms():
    info = gt.StepInfo(step=3, has_decision=False, miss_reason="timeout", digest=0,
                       generation=0, global_skip=False, nonfinite=False, skip_step=False,
                       optimizer_stepped=True, norms={"a": 1.5}, units={}, promoted=[],
                       clipped={}, skipped=[], reset=[])
    assert "gnmr/norm/a" not in info.flat(norms=False)
    assert info.flat()["gnmr/norm/a"] == 1.5 and info.flat()["gnmr/missed_decision"] == 1.0
    assert torch.isfinite(torch.tensor(list(info.flat().values()))).all()
