"""Every rank applies the same plan at the same step (docs/safety.md): two
data-parallel gloo ranks with default options, 300 steps with spikes, give
identical (step, digest) lists and bit-identical parameters, also when one
rank starts 2 s after the other; a NaN in one rank's shard of a sharded unit
makes both ranks skip the step, and so does a NaN in one pipeline stage (the
stages hold different units) with ``guard_group``."""
from __future__ import annotations

import os
import time

import torch
import torch.multiprocessing as mp

import gnmr.torch as gt
from gnmr_testlib import free_port, digests, make, train

# Spikes on every unit, some overlapping: admissions, denials, releases.
SPIKES = {s: (u, 40.0) for s, u in [(30, "a"), (31, "b"), (60, "c"), (61, "d"), (62, "a"),
                                     (100, "b"), (140, "c"), (141, "d"), (180, "a"),
                                     (220, "b"), (221, "c"), (260, "d")]}
CFG = {"warmup": 10, "lock_steps": 6, "max_o": 2, "lag": 1,
       "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.01},
                   {"pattern": "b", "action": "skip"}]}
STEPS = 300



def _init(rank, world, port):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=world)


def _dp_rank(rank, world, port, target, out_dir, job, delay_rank1):
    _init(rank, world, port)
    try:
        model, opt = make(seed=7)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        if rank == 1 and delay_rank1:
            time.sleep(delay_rank1)  # rank 0 connects and waits at the first all-reduce
        # Default options: decision_wait, no strict, no wait for the peer.
        mon = gt.Monitor(model, target=target, job_id=job, config=CFG)
        recs = train(model, opt, mon, range(STEPS), spikes=SPIKES, ddp=ddp, rank=rank,
                     record=False)
        torch.save({"digests": digests(recs),
                    "applied": [(r.applied.clipped, r.applied.promoted, r.applied.skipped)
                                for r in recs],
                    "params": [p.detach().clone() for p in model.parameters()],
                    "counters": mon.counters().as_dict()},
                   os.path.join(out_dir, f"rank{rank}.pt"))
        mon.close()
    finally:
        torch.distributed.destroy_process_group()


def _run_dp(gnmrd, tmp_path, job, delay_rank1=0.0):
    mp.spawn(_dp_rank, args=(2, free_port(), gnmrd.target, str(tmp_path), job, delay_rank1),
             nprocs=2, join=True)
    return torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")


def _check_identical(r0, r1):
    assert r0["digests"] == r1["digests"]
    assert r0["applied"] == r1["applied"]
    for p, q in zip(r0["params"], r1["params"]):
        assert torch.equal(p, q)
    # Every step from the lag on had its decision, on both ranks.
    for r in (r0, r1):
        assert all(has for (step, has, *_rest) in r["digests"] if step >= 1), r["digests"][:5]
        assert r["counters"]["missed_decisions"] == 0
    assert any(entries for (_s, _h, _d, entries, _g) in r0["digests"])  # it acted


def test_two_ranks_default_options_identical_plans_and_parameters(gnmrd, tmp_path):
    _check_identical(*_run_dp(gnmrd, tmp_path, "dp300"))


def test_two_ranks_started_two_seconds_apart(gnmrd, tmp_path):
    _check_identical(*_run_dp(gnmrd, tmp_path, "dp-apart", delay_rank1=2.0))


# ------------------------------------------------- the guard with shards

class ShardedNet(torch.nn.Module):
    """`w` is one unit sharded over the ranks (each holds its half);
    `head` is replicated (gradient all-reduced by hand)."""

    def __init__(self, rank):
        super().__init__()
        torch.manual_seed(11)
        full = torch.nn.Linear(8, 8)
        rows = slice(4 * rank, 4 * rank + 4)
        self.w = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.w.weight.copy_(full.weight[rows])
            self.w.bias.copy_(full.bias[rows])
        self.head = torch.nn.Linear(4, 2)


def _sharded_rank(rank, world, port, target, out_dir, nan_step):
    _init(rank, world, port)
    try:
        model = ShardedNet(rank)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        mon = gt.Monitor(model, target=target, job_id="sharded", config={"warmup": 3, "lag": 1},
                         unit_shard=lambda name: (rank, 2) if name == "w" else (0, 1),
                         strict=True)
        skipped, params = [], []
        for step in range(8):
            opt.zero_grad(set_to_none=True)
            g = torch.Generator().manual_seed(step)
            x = torch.randn(16, 8, generator=g)
            loss = model.head(torch.tanh(model.w(x))).pow(2).mean()
            loss.backward()
            for p in model.head.parameters():
                torch.distributed.all_reduce(p.grad)
            if step == nan_step and rank == 1:  # only rank 1's shard goes bad
                model.w.weight.grad[0, 0] = float("nan")
            before = [p.detach().clone() for p in model.parameters()]
            mon.after_backward(step)
            applied = mon.apply(step, opt)
            skipped.append(applied.skip_step)
            params.append((before, [p.detach().clone() for p in model.parameters()]))
        torch.save({"skipped": skipped, "params": params},
                   os.path.join(out_dir, f"shard{rank}.pt"))
        mon.close()
    finally:
        torch.distributed.destroy_process_group()


def test_a_nan_in_one_shard_makes_every_rank_skip(gnmrd, tmp_path):
    nan_step = 5
    mp.spawn(_sharded_rank, args=(2, free_port(), gnmrd.target, str(tmp_path), nan_step),
             nprocs=2, join=True)
    for rank in (0, 1):
        r = torch.load(tmp_path / f"shard{rank}.pt")
        assert r["skipped"] == [s == nan_step for s in range(8)], (rank, r["skipped"])
        before, after = r["params"][nan_step]
        assert all(torch.equal(p, q) for p, q in zip(before, after))
        before, after = r["params"][nan_step + 1]  # and training goes on
        assert not all(torch.equal(p, q) for p, q in zip(before, after))


def _stage_rank(rank, world, port, target, out_dir, nan_step, guard):
    """Two pipeline stages, one Linear each (stage 1 runs on stage 0's
    output, here recomputed locally: the guard and the plans are what is
    tested, not the pipeline schedule)."""
    _init(rank, world, port)
    try:
        torch.manual_seed(11)
        stages = [torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)]
        model = torch.nn.Sequential()
        model.add_module(f"stage{rank}", stages[rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        group = torch.distributed.group.WORLD if guard else None
        mon = gt.Monitor(model, target=target, job_id=f"pipeline-{guard}",
                         config={"warmup": 3, "lag": 1}, pipeline_stage=rank,
                         guard_group=group, strict=True)
        skipped, plans = [], []
        for step in range(8):
            opt.zero_grad(set_to_none=True)
            g = torch.Generator().manual_seed(step)
            x = torch.randn(16, 8, generator=g)
            loss = stages[1](torch.tanh(stages[0](x))).pow(2).mean()
            loss.backward()
            if step == nan_step and rank == 0:  # only stage 0's gradient goes bad
                stages[0].weight.grad[0, 0] = float("nan")
            mon.after_backward(step)
            applied = mon.apply(step, opt)
            skipped.append(applied.skip_step)
            plans.append((applied.has_decision, applied.digest))
        torch.save({"skipped": skipped, "plans": plans,
                    "counters": mon.counters().as_dict()},
                   os.path.join(out_dir, f"stage{rank}-{guard}.pt"))
        mon.close()
    finally:
        torch.distributed.destroy_process_group()


def test_pipeline_stages_plan_alike_and_a_nan_in_one_skips_both_with_guard_group(
        gnmrd, tmp_path):
    nan_step = 5
    for guard in (False, True):
        mp.spawn(_stage_rank,
                 args=(2, free_port(), gnmrd.target, str(tmp_path), nan_step, guard),
                 nprocs=2, join=True)
        r0 = torch.load(tmp_path / f"stage0-{guard}.pt")
        r1 = torch.load(tmp_path / f"stage1-{guard}.pt")
        # Disjoint units: each decision names the other stage's unit, and
        # both ranks take it (docs/safety.md, section 2).
        assert r0["plans"] == r1["plans"]
        assert sum(h for h, _ in r0["plans"]) >= 6, r0["plans"]
        for r in (r0, r1):
            assert r["counters"]["decisions_rejected"] == 0, r["counters"]
        assert r0["skipped"] == [s == nan_step for s in range(8)]
        # Without guard_group stage 1 does not hear of stage 0's NaN.
        want1 = [s == nan_step for s in range(8)] if guard else [False] * 8
        assert r1["skipped"] == want1, (guard, r1["skipped"])
