#!/usr/bin/python3
"""What the same-step non-finite guard costs a training step (docs/safety.md),
on CPU PyTorch: the time of ``Monitor.after_backward + apply`` per step, and
of a whole training step, with the guard's all-reduce (sharded units, two
gloo ranks) and without it (whole units), against the same step with no
Monitor, in alternating blocks so machine drift hits every arm alike.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/guard_cost.py

Prints a table of medians (microseconds) and ratios. No daemon: the guard
works without one, and the network is not what is measured here.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import gnmr.torch as gt  # noqa: E402


def make_model(width: int):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(8)])


def step_time(model, opt, mon, x, step, world):
    if world > 1:
        # Ranks in step, as DDP's gradient all-reduce keeps them: what is
        # timed is the work, not one rank waiting for the other.
        torch.distributed.barrier()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    model(x).pow(2).mean().backward()
    t1 = time.perf_counter()
    if mon is None:
        opt.step()
    else:
        mon.after_backward(step)
        mon.apply(step, opt)
    t2 = time.perf_counter()
    return t2 - t0, t2 - t1


def run(rank, world, port, args, out):
    torch.set_num_threads(1)
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                             rank=rank, world_size=world)
    model = make_model(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width)
    target = f"unix:/tmp/gnmr-guard-cost-none-{os.getpid()}.sock"  # no daemon
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = gt.Monitor(model, target=target, job_id="guard", connect_timeout_s=0.5)
        sharded = gt.Monitor(model, target=target, job_id="guard", connect_timeout_s=0.5,
                             unit_shard=lambda n: (rank, world))
    arms = {"no monitor": None, "monitor, whole units": whole,
            "monitor, sharded (guard all-reduce)": sharded}
    times = {k: ([], []) for k in arms}
    step = 0
    for _ in range(args.blocks):
        for name, mon in arms.items():
            for _ in range(args.steps):
                total, tail = step_time(model, opt, mon, x, step, world)
                step += 1
                times[name][0].append(total)
                times[name][1].append(tail)
    whole.close()
    sharded.close()
    if rank == 0:
        out.put({k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in times.items()})
    if world > 1:
        torch.distributed.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=50, help="steps per block")
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--world", type=int, default=2)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(run, args=(args.world, port, args, out), nprocs=args.world, join=True)
    res = out.get()
    base_total, base_tail = res["no monitor"]
    print(f"model: 8 x Linear({args.width}, {args.width}), batch {args.batch}, SGD; "
          f"{args.world} gloo ranks; {args.blocks} blocks x {args.steps} steps per arm")
    print("| arm | step (us) | after backward: observe + apply + optimizer (us) | step vs no monitor |")
    print("| --- | --- | --- | --- |")
    for name, (total, tail) in res.items():
        print(f"| {name} | {total * 1e6:.0f} | {tail * 1e6:.0f} | {total / base_total:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
