"""Crash-restart under the same job id (docs/safety.md, "Generations"): a run
checkpointed at step 100 and killed with SIGKILL at step 111, then resumed
from the checkpoint with the same job id, applies exactly the plans of an
uninterrupted run from the first resumed step, and ends with bit-identical
parameters; for one rank and for two data-parallel ranks."""
from __future__ import annotations

import os
import signal

import pytest
import torch
import torch.multiprocessing as mp

import gnmr.torch as gt
from gnmr_testlib import free_port, digests, make, train

SPIKES = {s: (u, 40.0) for s, u in [(20, "a"), (45, "b"), (98, "c"), (99, "a"),
                                     (104, "d"), (109, "b"), (115, "c"), (130, "a")]}
CFG = {"warmup": 8, "lock_steps": 7, "max_o": 2, "lag": 1,
       "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.01}]}
CKPT, KILL, END = 100, 111, 140



def _monitor(model, target, job):
    mon = gt.Monitor(model, target=target, job_id=job, config=CFG, strict=True)
    assert mon.wait_connected(10)
    return mon


def _rank(rank, world, port, target, out_dir, job, phase):
    """phase "full": 0..END; "killed": 0..KILL with a checkpoint after CKPT,
    then SIGKILL; "resumed": from the checkpoint to END."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist = world > 1
    if dist:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                             rank=rank, world_size=world)
    try:
        model, opt = make(seed=21)
        ddp = torch.nn.parallel.DistributedDataParallel(model) if dist else None
        ckpt = os.path.join(out_dir, f"ckpt{rank}.pt")
        if phase == "resumed":
            saved = torch.load(ckpt)
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
        mon = _monitor(model, target, job)
        if phase == "resumed":
            assert mon.load_state_dict(saved["gnmr"]) == (rank == 0)
            steps = range(CKPT + 1, END)
        elif phase == "killed":
            steps = range(0, CKPT + 1)
        else:
            steps = range(0, END)
        recs = train(model, opt, mon, steps, spikes=SPIKES, ddp=ddp, record=False)
        if phase == "killed":
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "gnmr": mon.state_dict()}, ckpt)
            train(model, opt, mon, range(CKPT + 1, KILL), spikes=SPIKES, ddp=ddp,
                  record=False)
            os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush, no goodbye
        torch.save({"digests": digests(recs),
                    "params": [p.detach().clone() for p in model.parameters()],
                    "counters": mon.counters().as_dict()},
                   os.path.join(out_dir, f"{phase}{rank}.pt"))
        mon.close()
    finally:
        if dist:
            torch.distributed.destroy_process_group()


def _spawn(world, target, out_dir, job, phase):
    args = (world, free_port(), target, str(out_dir), job, phase)
    if phase == "killed":
        with pytest.raises(mp.ProcessExitedException):
            mp.spawn(_rank, args=args, nprocs=world, join=True)
    else:
        mp.spawn(_rank, args=args, nprocs=world, join=True)


@pytest.mark.parametrize("world", [1, 2])
def test_same_id_resume_after_kill_matches_an_uninterrupted_run(gnmrd, tmp_path, world):
    _spawn(world, gnmrd.target, tmp_path, f"ref{world}", "full")
    _spawn(world, gnmrd.target, tmp_path, f"same{world}", "killed")
    _spawn(world, gnmrd.target, tmp_path, f"same{world}", "resumed")
    for rank in range(world):
        ref = torch.load(tmp_path / f"full{rank}.pt")
        res = torch.load(tmp_path / f"resumed{rank}.pt")
        expected = ref["digests"][CKPT + 1:]
        assert any(entries for (_s, _h, _d, entries, _g) in expected)  # plans to compare
        assert res["digests"] == expected
        for p, q in zip(ref["params"], res["params"]):
            assert torch.equal(p, q)
        assert res["counters"]["missed_decisions"] == 0
