"""Two data-parallel ranks (gloo, DDP) each with a Monitor on one job apply
identical plans step by step."""
from __future__ import annotations

import os

import torch
import torch.multiprocessing as mp

import gnmr.torch as gt
from gnmr_testlib import free_port, make, train, digests

SPIKES = {8: ("a", 50.0), 13: ("d", 50.0)}
CFG = {"warmup": 5, "lock_steps": 3, "max_o": 4, "lag": 1,
       "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.001}]}



def _rank(rank, world, port, target, out_dir):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=world)
    try:
        model, opt = make(seed=7)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        mon = gt.Monitor(model, target=target, job_id="dp", config=CFG, decision_wait_ms=5000,
                         strict=True)
        assert mon.wait_connected(10)
        torch.distributed.barrier()
        recs = train(model, opt, mon, range(20), spikes=SPIKES, ddp=ddp, rank=rank,
                     record=False)
        applied = [(r.applied.clipped, r.applied.promoted, r.applied.skipped) for r in recs]
        params = [p.detach().clone() for p in model.parameters()]
        torch.save({"digests": digests(recs), "applied": applied, "params": params,
                    "counters": mon.counters().as_dict()},
                   os.path.join(out_dir, f"rank{rank}.pt"))
        mon.close()
    finally:
        torch.distributed.destroy_process_group()


def test_two_ranks_apply_identical_plans(gnmrd, tmp_path):
    world = 2
    mp.spawn(_rank, args=(world, free_port(), gnmrd.target, str(tmp_path)), nprocs=world,
             join=True)
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    assert r0["digests"] == r1["digests"]
    assert r0["applied"] == r1["applied"]
    assert all(has for (step, has, *_rest) in r0["digests"] if step >= 1)
    # The spikes were acted on by both ranks.
    assert r0["applied"][9][0].get("a") is not None  # clip in force from 8 + lag
    assert "d" in r0["applied"][14][1]  # promoted from 13 + lag
    for p, q in zip(r0["params"], r1["params"]):
        assert torch.equal(p, q)
    assert r0["counters"]["registrations"] >= 1 and r1["counters"]["registrations"] >= 1
