"""FSDP2 (``torch.distributed.fsdp.fully_shard``) ranks, gloo on CPU, each with a
Monitor on one job through the real gnmrd: every unit's shard comes from its
DTensor placements (no unit_shard), gnmrd's combined norm is the full
gradient's, plans agree, a NaN in one rank's shard skips the step on every
rank, a clip scales every shard by the full norm's factor, and with nothing
triggered the parameters are those of a run without GNMR, bit for bit
(docs/integrations.md, "FSDP2")."""
from __future__ import annotations

import json
import math
import os
import subprocess

import pytest
import torch
import torch.multiprocessing as mp

try:
    from torch.distributed.fsdp import fully_shard
except Exception:  # noqa: BLE001  PyTorch 1.13 (the ASan suite): no FSDP2, and on
    # Python 3.11 its torch.distributed.fsdp raises ValueError at import.
    pytest.skip("torch.distributed.fsdp.fully_shard (FSDP2) needs PyTorch >= 2.6; this is "
                f"{torch.__version__}", allow_module_level=True)

import gnmr
import gnmr.torch as gt
from gnmr_testlib import free_port

UNITS = ["a", "b", "c", "d"]
STEPS = 8
CLIP = {"warmup": 3, "lock_steps": 2, "max_o": 4, "lag": 0,
        "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.001}]}
QUIET = {"warmup": 3, "lag": 1, "tau": 1e6, "tau_delta": 1e6, "gnmr_floor": 1e6}


class Net(torch.nn.Module):
    """Rows 6, 6, 3, 2: over 4 ranks c and d (and a, b over 4) shard unevenly
    and some ranks hold empty shards."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 6)
        self.b = torch.nn.Linear(6, 6)
        self.c = torch.nn.Linear(6, 3)
        self.d = torch.nn.Linear(3, 2)

    def forward(self, x):
        for m in (self.a, self.b, self.c):
            x = torch.tanh(m(x))
        return self.d(x)


def _net() -> Net:
    torch.manual_seed(3)
    return Net()


def _batch(step: int, rank: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 8, generator=g), torch.randn(8, 2, generator=g)


def _sharded() -> Net:
    net = _net()
    for name in UNITS:
        fully_shard(getattr(net, name))
    fully_shard(net)
    return net


def _daemon_norms(target: str, job: str, step: int):
    """gnmrd's combined norm of every unit at `step` (gnmrctl units; at lag 0
    the plan of `step` came after gnmrd closed it), or None without
    $GNMRCTL or a job to ask about."""
    if not job or not os.environ.get("GNMRCTL"):
        return None
    out = subprocess.run([os.environ["GNMRCTL"], "units", "--job", job, "--target", target,
                          "--json"], check=True, capture_output=True, text=True).stdout
    units = json.loads(out)["units"]
    assert all(int(u.get("last_step", 0)) == step for u in units), (step, units)
    return {u["name"]: float(u.get("norm", 0.0)) for u in units}


def _train(net, opt, mon, rank, *, spikes=(), nan_step=-1, target="", job=""):
    recs = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        x, y = _batch(step, rank)
        torch.nn.functional.mse_loss(net(x), y).backward()
        with torch.no_grad():
            for unit, factor in [s[1:] for s in spikes if s[0] == step]:
                for p in getattr(net, unit).parameters():  # the full gradient spikes
                    p.grad.to_local().mul_(factor)
            if step == nan_step and rank == 1:  # only rank 1's shard goes bad
                net.b.weight.grad.to_local()[0, 0] = float("nan")
        # The full gradient's norms, for the test only (an all-gather).
        full = {u: math.sqrt(sum(float(p.grad.full_tensor().double().pow(2).sum())
                                 for p in getattr(net, u).parameters())) for u in UNITS}
        if mon is None:
            opt.step()
            recs.append({"step": step, "full": full})
            continue
        mon.after_backward(step)
        applied = mon.apply(step, opt)
        info = mon.last_step_info()
        recs.append({"step": step, "full": full, "has": applied.has_decision,
                     "digest": applied.digest, "skip_step": applied.skip_step,
                     "clipped": dict(applied.clipped), "skipped": list(applied.skipped),
                     "ref_norm": {n: u.ref_norm for n, u in info.units.items()},
                     "daemon": _daemon_norms(target, job, step) if rank == 0 else None})
    return recs


def _init(rank, world, port):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=world)


def _spiky_rank(rank, world, port, target, out_dir, job, spikes, nan_step):
    _init(rank, world, port)
    try:
        net = _sharded()
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        mon = gt.Monitor(net, target=target, job_id=job, config=CLIP, decision_wait_ms=5000,
                         strict=True)
        shards = {n: mon._units[i].shard for i, n in enumerate(mon.unit_names)}
        torch.distributed.barrier()
        recs = _train(net, opt, mon, rank, spikes=spikes, nan_step=nan_step, target=target,
                      job=job)
        full = {n: p.full_tensor() for n, p in net.named_parameters()}
        torch.save({"recs": recs, "params": full, "shards": shards,
                    "counters": mon.counters().as_dict()},
                   os.path.join(out_dir, f"rank{rank}.pt"))
        mon.close()
    finally:
        torch.distributed.destroy_process_group()


def _reference(world, recs, spikes):
    """One process, the ranks' batches together, doing what the Monitor did
    (its clip factors and skipped steps): the unsharded run."""
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for r in recs:
        opt.zero_grad(set_to_none=True)
        xs, ys = zip(*[_batch(r["step"], k) for k in range(world)])
        torch.nn.functional.mse_loss(net(torch.cat(xs)), torch.cat(ys)).backward()
        if r["skip_step"]:
            continue
        with torch.no_grad():
            for unit, factor in [s[1:] for s in spikes if s[0] == r["step"]]:
                for p in getattr(net, unit).parameters():
                    p.grad.mul_(factor)
            for unit, scale in r["clipped"].items():
                for p in getattr(net, unit).parameters():
                    p.grad.mul_(scale)
        for unit in r["skipped"]:
            for p in getattr(net, unit).parameters():
                p.grad = None
        opt.step()
    return dict(net.named_parameters())


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_shards_combine_to_the_full_norm_and_act_alike(gnmrd, tmp_path, world):
    spike, nan_step = 6, 4
    job = f"fsdp2-{world}"
    spikes = [(spike, "a", 50.0)]
    mp.spawn(_spiky_rank, args=(world, free_port(), gnmrd.target, str(tmp_path), job, spikes,
                                nan_step), nprocs=world, join=True)
    rs = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    # Shards from the placements: rank r holds shard r of `world`.
    for r, res in enumerate(rs):
        assert res["shards"] == {u: (r, world) for u in UNITS}, res["shards"]
        assert res["counters"]["decisions_rejected"] == 0, res["counters"]
    recs = [res["recs"] for res in rs]
    # Every rank applies the same plan at every step.
    plans = [[(s["step"], s["has"], s["digest"]) for s in rr] for rr in recs]
    assert all(p == plans[0] for p in plans)
    assert all(has for step, has, _ in plans[0] if step >= 1), plans[0]
    # gnmrd's combined norm is the full gradient's (uneven and empty shards too).
    for s in recs[0]:
        if s["daemon"] is None or s["step"] == nan_step:
            continue
        for u in UNITS:
            assert s["daemon"][u] == pytest.approx(s["full"][u], rel=1e-5), (s["step"], u)
    # The NaN in rank 1's shard skips the optimizer step on every rank, only then.
    for rr in recs:
        assert [s["skip_step"] for s in rr] == [s == nan_step for s in range(STEPS)]
    # The spike is clipped at its own step (lag 0), by the full norm's factor, alike.
    for rr in recs:
        at = rr[spike]
        assert "a" in at["clipped"], at
        want = gnmr.clip_scale(at["ref_norm"]["a"], at["full"]["a"], 0.001)
        assert at["clipped"]["a"] == pytest.approx(want, rel=1e-5)
        assert at["clipped"]["a"] < 0.2
        assert [s["clipped"] for s in rr] == [s["clipped"] for s in recs[0]]
    # The sharded parameters end as the unsharded run's with the same actions.
    ref = _reference(world, recs[0], spikes)
    for name, p in rs[0]["params"].items():
        assert torch.allclose(p, ref[name].detach(), rtol=1e-5, atol=1e-6), name
        assert all(torch.equal(p, res["params"][name]) for res in rs)


def _quiet_rank(rank, world, port, target, out_dir):
    _init(rank, world, port)
    try:
        out = {}
        net = _sharded()
        # A unit whose parameters are sharded differently is refused by name.
        plain = torch.nn.Linear(2, 2)
        net.add_module("plain", plain)
        try:
            gt.Monitor(net, target=target, job_id="refused", start=False,
                       unit_group=lambda n: "ad" if n in ("a", "plain") else n)
        except ValueError as e:
            out["mixed"] = str(e)
        del net.plain
        try:
            gt.Monitor(net, target="local", job_id="local")
        except ValueError as e:
            out["local"] = str(e)
        explicit = gt.Monitor(net, target=target, job_id="explicit", start=False,
                              unit_shard=lambda n: (0, 1))
        out["explicit"] = [u.shard for u in explicit._units]
        explicit.close()

        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        mon = gt.Monitor(net, target=target, job_id="quiet", config=QUIET, strict=True)
        recs = _train(net, opt, mon, rank)
        mon.close()
        bare = _sharded()
        _train(bare, torch.optim.SGD(bare.parameters(), lr=0.05), None, rank)
        out["recs"] = recs
        out["same"] = {n: torch.equal(p.to_local(), q.to_local())
                       for (n, p), (_, q) in zip(net.named_parameters(), bare.named_parameters())}
        torch.save(out, os.path.join(out_dir, f"quiet{rank}.pt"))
    finally:
        torch.distributed.destroy_process_group()


def test_fsdp2_untriggered_run_is_bit_identical_and_set_up_errors_name_the_unit(
        gnmrd, tmp_path):
    mp.spawn(_quiet_rank, args=(2, free_port(), gnmrd.target, str(tmp_path)), nprocs=2,
             join=True)
    for rank in (0, 1):
        r = torch.load(tmp_path / f"quiet{rank}.pt")
        assert "unit 'ad'" in r["mixed"] and "unit_shard" in r["mixed"], r["mixed"]
        assert f"shard {rank} of 2" in r["mixed"] and "shard 0 of 1" in r["mixed"], r["mixed"]
        assert "DTensor" in r["local"] and "run gnmrd" in r["local"], r["local"]
        assert r["explicit"] == [(0, 1)] * 4
        assert not any(s["clipped"] or s["skipped"] or s["skip_step"] for s in r["recs"])
        assert all(s["has"] for s in r["recs"][1:])
        assert all(r["same"].values()), r["same"]
