"""target="local" (docs/local_mode.md): the controller inside the Monitor.
The same training run through gnmrd and through local mode applies the same
plans step by step (digests, entries) and ends with bit-identical
parameters; two data-parallel gloo ranks each running their own controller
apply identical plans; sharded units are refused pointing to gnmrd; the
events file holds the daemon's event lines; state_dict()/load_state_dict()
resume bit-identically."""
from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp

import gnmr.torch as gt
from gnmr_testlib import digests, free_port, make, train
from test_plans_dp import CFG, SPIKES, ShardedNet, _check_identical, _dp_rank

STEPS = 120
SPIKES_120 = {s: v for s, v in SPIKES.items() if s < STEPS}
NANS = {75: "c"}


def _run(target, job, events=""):
    model, opt = make(seed=3)
    mon = gt.Monitor(model, target=target, job_id=job, config=CFG, strict=True,
                     local_events_path=events)
    recs = train(model, opt, mon, range(STEPS), spikes=SPIKES_120, nans=NANS, record=False)
    counters = mon.counters().as_dict()
    mon.close()
    return digests(recs), [p.detach().clone() for p in model.parameters()], counters


def test_local_mode_applies_the_daemons_plans(gnmrd, tmp_path):
    events = tmp_path / "events.jsonl"
    d_dig, d_params, _ = _run(gnmrd.target, "py-cmp")
    l_dig, l_params, counters = _run("local", "py-cmp", str(events))
    assert l_dig == d_dig
    for p, q in zip(d_params, l_params):
        assert torch.equal(p, q)
    assert any(entries for (_s, _h, _d, entries, _g) in l_dig)  # it acted
    assert all(has for (step, has, *_r) in l_dig if step >= CFG["lag"])
    assert counters["missed_decisions"] == 0 and counters["connected"]
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    kinds = {e["kind"] for e in lines}
    assert "admission" in kinds and "release" in kinds, kinds
    assert all(e["job_id"] == "py-cmp" for e in lines)
    assert any(e["kind"] == "admission" and e["trigger"] == "nonfinite" for e in lines)


def test_two_gloo_ranks_with_their_own_controllers_decide_identically(tmp_path):
    mp.spawn(_dp_rank, args=(2, free_port(), "local", str(tmp_path), "dp-local", 0.0),
             nprocs=2, join=True)
    _check_identical(torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt"))


def test_sharded_units_are_refused_pointing_to_gnmrd():
    with pytest.raises(ValueError, match=r"shard 0 of 2.*gnmrd"):
        gt.Monitor(ShardedNet(0), target="local", job_id="sharded",
                   unit_shard=lambda name: (0, 2) if name == "w" else (0, 1))


def test_bad_config_is_loud():
    model, _ = make()
    with pytest.raises(ValueError, match="max_o"):
        gt.Monitor(model, target="local", job_id="bad", config={"max_o": -1})


def test_state_dict_resumes_bit_identically(tmp_path):
    cut = 60
    model, opt = make(seed=5)
    mon = gt.Monitor(model, target="local", job_id="resume", config=CFG, strict=True)
    recs = train(model, opt, mon, range(cut), spikes=SPIKES_120, record=False)
    ckpt = {"model": {k: v.clone() for k, v in model.state_dict().items()},
            "opt": opt.state_dict(), "gnmr": mon.state_dict()}
    assert ckpt["gnmr"]["controller_state"] is not None
    recs += train(model, opt, mon, range(cut, STEPS), spikes=SPIKES_120, record=False)
    mon.close()

    model2, opt2 = make(seed=99)
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    mon2 = gt.Monitor(model2, target="local", job_id="resume", config=CFG, strict=True)
    assert mon2.load_state_dict(ckpt["gnmr"])
    assert mon2.counters().generation == 2
    recs2 = train(model2, opt2, mon2, range(cut, STEPS), spikes=SPIKES_120, record=False)
    mon2.close()
    # The import starts generation 2: everything but the generation is equal.
    assert digests(recs2) == digests(recs)[cut:]
    assert any(entries for (_s, _h, _d, entries, _g) in digests(recs2))
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)
