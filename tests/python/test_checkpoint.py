"""state_dict()/load_state_dict(): a run checkpointed at step 14 and resumed
against a fresh gnmrd continues with the same decisions as an uninterrupted
run, from the first resumed step on."""
from __future__ import annotations

import io

import torch

import gnmr.torch as gt
from gnmr_testlib import make, train, digests

SPIKES = {6: ("b", 40.0), 12: ("a", 40.0), 17: ("c", 40.0), 24: ("d", 40.0)}
CFG = {"warmup": 4, "lock_steps": 6, "max_o": 2, "lag": 1}
STEPS = 30
CUT = 15  # steps 0..14 before the checkpoint


def monitor(model, target):
    mon = gt.Monitor(model, target=target, job_id="ckpt", config=CFG, decision_wait_ms=3000,
                     strict=True)
    assert mon.wait_connected(10)
    return mon


def test_checkpoint_round_trip(gnmrd_factory):
    # Uninterrupted reference run.
    d1 = gnmrd_factory()
    model, opt = make(seed=5)
    mon = monitor(model, d1.target)
    ref = digests(train(model, opt, mon, range(STEPS), spikes=SPIKES, record=False))
    mon.close()
    assert any(entries for (_, _, _, entries, _) in ref[CUT:]), ref  # decisions after the cut

    # First half, then a checkpoint (model, optimizer and controller).
    d2 = gnmrd_factory()
    model, opt = make(seed=5)
    mon = monitor(model, d2.target)
    first = digests(train(model, opt, mon, range(CUT), spikes=SPIKES, record=False))
    assert first == ref[:CUT]
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gnmr": mon.state_dict()},
               buf)
    mon.close()
    d2.stop()

    # Resume in a "new job": fresh model objects, a fresh daemon with no state.
    d3 = gnmrd_factory()
    buf.seek(0)
    ck = torch.load(buf)
    assert isinstance(ck["gnmr"]["controller_state"], bytes)
    model, opt = make(seed=99)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    mon = monitor(model, d3.target)
    assert mon.load_state_dict(ck["gnmr"]) is True
    second = digests(train(model, opt, mon, range(CUT, STEPS), spikes=SPIKES, record=False))
    mon.close()
    # The decision of step 14 (in force at 15) was made by the old daemon; the
    # new one rebuilds it from the imported state, so step 15 already has it.
    assert second[0][1], "no decision at the first resumed step"
    assert second == ref[CUT:]
