"""Recipe: DDP with gradient accumulation and ``no_sync`` (docs/recipes.md).

Every micro-batch but the last runs under ``ddp.no_sync()`` (no all-reduce);
the last one's backward all-reduces the accumulated gradient. GNMR observes
after that, at the boundary: every rank then holds the same gradient, so
every rank reports the same statistics and applies the same plan (compare
``applied.digest``). Observing inside ``no_sync`` would measure each rank's
own partial gradient. Each rank builds its Monitor on the inner module
(unit names without ``module.``).

    python3 examples/recipes/ddp_no_sync.py --target unix:/run/gnmr/gnmrd.sock
    (starts 2 gloo ranks on this CPU)
"""
from __future__ import annotations

import argparse
import contextlib
import os
import socket
import tempfile

import torch
import torch.multiprocessing as mp

import gnmr.torch as gt
from _toy import CONFIG, Net, batch, target_arg

ACCUMULATE = 2


def train_step(step, ddp, optimizer, monitor, rank, accumulate=ACCUMULATE, hook=None):
    optimizer.zero_grad(set_to_none=True)
    for micro in range(accumulate):
        last = micro == accumulate - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            x, y = batch(step, micro, rank)    # each rank its own data
            loss = torch.nn.functional.mse_loss(ddp(x), y) / accumulate
            loss.backward()                    # the last one all-reduces
    if hook is not None:
        hook(step, ddp.module)                 # (tests inject faults here)
    monitor.after_backward(step)               # identical gradients on every rank
    return monitor.apply(step, optimizer)


def run_rank(rank, world, port, target, steps, out_dir, job_id="recipe-ddp", hook=None):
    """One rank; writes what it applied to out_dir/rank<N>.pt."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=world)
    try:
        torch.manual_seed(0)                   # the same initial weights on every rank
        model = Net()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        mon = gt.Monitor(model, target=target, job_id=job_id, config=CONFIG,
                         decision_wait_ms=5000)
        record = []
        for step in range(steps):
            applied = train_step(step, ddp, opt, mon, rank, hook=hook)
            info = mon.last_step_info()
            record.append({"step": step, "digest": applied.digest,
                           "has_decision": applied.has_decision,
                           "clipped": applied.clipped, "promoted": applied.promoted,
                           "skip_step": applied.skip_step, "norms": info.norms})
        torch.save({"record": record, "params": [p.detach() for p in model.parameters()],
                    "counters": mon.counters().as_dict()},
                   os.path.join(out_dir, f"rank{rank}.pt"))
        mon.close()
    finally:
        torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(target, steps, out_dir, world=2, job_id="recipe-ddp", hook=None):
    mp.spawn(run_rank, args=(world, free_port(), target, steps, out_dir, job_id, hook),
             nprocs=world, join=True)
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target_arg(p)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ranks = launch(args.target, args.steps, d)
    same = [a["digest"] == b["digest"] for a, b in zip(ranks[0]["record"], ranks[1]["record"])]
    print(f"{sum(same)}/{len(same)} steps with the same plan digest on both ranks")


if __name__ == "__main__":
    main()
