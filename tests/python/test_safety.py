"""Never worse than no GNMR (docs/safety.md), single rank: a NaN never reaches
the optimizer at lag 0, lag 1 or without a daemon; a killed daemon gives
plans that say they have no decision, and the count matches; every way of
setting a client up wrong is loud, with the text the user needs."""
from __future__ import annotations

import logging
import os
import warnings

import pytest
import torch

import gnmr
import gnmr.torch as gt
from gnmr_testlib import UNITS, make, train

NAN_STEP = 12
CFG = {"warmup": 5, "lock_steps": 4, "max_o": 2}


def _params_equal(a, b):
    return all(torch.equal(x, y) for name in UNITS for x, y in zip(a[name], b[name]))


def _check_nan_step_skipped(records):
    r = records[NAN_STEP]
    assert r.applied.nonfinite and r.applied.skip_step, r.applied
    assert not r.applied.optimizer_stepped
    # Parameters after the NaN step are those after the step before, bit for bit.
    assert _params_equal(r.params_before, r.params_after)
    assert _params_equal(records[NAN_STEP - 1].params_after, r.params_after)
    # ... and training goes on finite.
    last = records[-1].params_after
    assert all(torch.isfinite(p).all() for name in UNITS for p in last[name])
    assert sum(1 for x in records if x.applied.skip_step) == 1


@pytest.mark.parametrize("lag", [0, 1])
def test_nan_never_reaches_the_optimizer(gnmrd, lag):
    model, opt = make(seed=3, opt="adam")
    mon = gt.Monitor(model, target=gnmrd.target, job_id=f"nan-lag{lag}",
                     config=dict(CFG, lag=lag), strict=True)
    records = train(model, opt, mon, range(20), nans={NAN_STEP: "b"})
    mon.close()
    _check_nan_step_skipped(records)
    if lag == 0:  # the decision of that very step says so too
        assert records[NAN_STEP].applied.global_skip
    else:  # at lag 1 the decision's global_skip only records it
        assert not any(r.applied.global_skip for r in records)


def test_nan_never_reaches_the_optimizer_without_a_daemon(tmp_path):
    model, opt = make(seed=3, opt="adam")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        mon = gt.Monitor(model, target=f"unix:{tmp_path}/none.sock", job_id="nan-nodaemon",
                         config=CFG)
    records = train(model, opt, mon, range(20), nans={NAN_STEP: "b"})
    mon.close()
    _check_nan_step_skipped(records)
    assert not any(r.applied.has_decision for r in records)


@pytest.mark.parametrize("lag", [0, 1])
def test_killed_daemon_gives_plans_without_decision_and_counts_them(gnmrd, lag):
    model, opt = make(seed=4)
    mon = gt.Monitor(model, target=gnmrd.target, job_id=f"killed-lag{lag}",
                     config=dict(CFG, lag=lag), strict=True)
    before = train(model, opt, mon, range(15), spikes={8: ("a", 50.0)}, record=False)
    assert all(r.applied.has_decision for r in before[lag:])
    gnmrd.kill()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stream breaks: reported, expected here
        after = train(model, opt, mon, range(15, 40), record=False)
    k = mon.counters()
    mon.close()
    fresh = 0
    for r in after:
        p = r.applied.plan
        if r.applied.has_decision:
            # Only a decision made for this very step may be applied.
            assert p.observed_step == r.step - lag, (r.step, p)
            fresh += 1
        else:
            assert r.applied.miss_reason in ("disconnected", "timeout"), r.applied
            assert p.entries == []
    assert fresh <= 1  # at most the decision sent just before the kill
    missed = sum(1 for r in after if not r.applied.has_decision)
    assert missed >= len(after) - 1
    assert k.missed_decisions == missed


# ------------------------------------------------------------ set up wrong


def _warned(rec, *fragments):
    texts = [str(w.message) for w in rec]
    assert any(all(f in t for f in fragments) for t in texts), texts


def test_wrong_token_is_loud_and_strict_raises(gnmrd_factory):
    d = gnmrd_factory("job_tokens:\n  tok-job: right-token\nallow_unregistered_jobs: false\n")
    model, _ = make()
    with pytest.raises(gnmr.Error, match="unauthenticated.*token"):
        gt.Monitor(model, target=d.target, job_id="tok-job", token="wrong", strict=True)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        mon = gt.Monitor(model, target=d.target, job_id="tok-job", token="wrong")
    _warned(rec, "unauthenticated", "token")
    assert "UNAUTHENTICATED" in mon.last_connect_error
    mon.close()


def test_missing_socket_names_enoent_and_a_path_without_unix_gets_a_hint(gnmrd, tmp_path):
    model, _ = make()
    missing = f"{tmp_path}/nope.sock"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        mon = gt.Monitor(model, target=f"unix:{missing}", job_id="enoent")
    _warned(rec, "unreachable", "ENOENT", missing)
    assert "ENOENT" in mon.last_connect_error
    assert not mon.wait_connected(0.2)
    mon.close()
    with pytest.raises(gnmr.Error, match="ENOENT"):
        gt.Monitor(model, target=f"unix:{missing}", job_id="enoent", strict=True)
    path = gnmrd.target[len("unix:"):]
    with pytest.raises(gnmr.Error, match=f"did you mean unix:{path}"):
        gt.Monitor(model, target=path, job_id="nounix", strict=True, connect_timeout_s=3)


def test_same_job_id_with_another_config_warns_naming_the_keys(gnmrd):
    model, _ = make()
    first = gt.Monitor(model, target=gnmrd.target, job_id="cfg", config={"tau": 5.0})
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        second = gt.Monitor(model, target=gnmrd.target, job_id="cfg", rank=0,
                            config={"tau": 3.0, "max_o": 2})
    _warned(rec, "config_differs", "tau (3 vs 5)", "max_o", "daemon's stands")
    second.close()
    with pytest.raises(gnmr.Error, match="config_differs"):
        gt.Monitor(model, target=gnmrd.target, job_id="cfg", config={"tau": 3.0}, strict=True)
    first.close()


def test_same_job_id_with_another_model_is_refused(gnmrd):
    model, _ = make()
    first = gt.Monitor(model, target=gnmrd.target, job_id="model", strict=True)
    first.close()
    other = torch.nn.Sequential(torch.nn.Linear(8, 3), torch.nn.Linear(3, 2))
    with pytest.raises(gnmr.Error, match="refused.*model"):
        gt.Monitor(other, target=gnmrd.target, job_id="model", strict=True)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        mon = gt.Monitor(other, target=gnmrd.target, job_id="model")
    _warned(rec, "refused", "registered 4 units before", "needs a new job id")
    mon.close()


def test_problems_also_go_to_the_gnmr_logger(tmp_path, caplog):
    model, _ = make()
    with caplog.at_level(logging.WARNING, logger="gnmr"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mon = gt.Monitor(model, target=f"unix:{tmp_path}/x.sock", job_id="log")
    mon.close()
    assert any("ENOENT" in r.getMessage() for r in caplog.records if r.name == "gnmr")


def test_a_model_without_linear_names_unit_filter():
    conv = torch.nn.Sequential(torch.nn.Conv1d(2, 3, 3), torch.nn.ReLU())
    with pytest.raises(ValueError, match="unit_filter.*Conv1d"):
        gt.Monitor(conv, target="unix:/nonexistent.sock", job_id="conv")


def test_apply_before_after_backward_warns_and_strict_raises(tmp_path):
    model, opt = make()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        mon = gt.Monitor(model, target=f"unix:{tmp_path}/x.sock", job_id="order")
        mon.apply(0, opt)
    _warned(rec, "apply(0) before after_backward(0)")
    mon.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strict = gt.Monitor(model, target=f"unix:{tmp_path}/x.sock", job_id="order",
                            start=False, strict=True)
    with pytest.raises(RuntimeError, match="before after_backward"):
        strict.apply(0, opt)
    strict.close()
