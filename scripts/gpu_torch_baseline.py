#!/usr/bin/env python3
"""torch baseline for bench/gpu_stats_bench: torch._foreach_norm + amax +
isfinite over the same gradients (1, 4, 16 GB in hundreds of tensors, mixed
bf16/fp32 or one dtype; fp8 has no _foreach_norm and is not offered).
The GPU is kept busy (torch.cuda._sleep) while the host enqueues the step,
so the events time GPU work, as for gpu_stats_bench. Prints a table; --csv
appends rows (header first when the file is new)."""
import argparse
import os

import torch

DTYPES = {"mixed": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-gb", default="1,4,16")
    p.add_argument("--dtype", default="mixed", choices=sorted(DTYPES))
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--cover-ms", type=float, default=30.0,
                   help="GPU busy time queued before the first event (host enqueue hidden)")
    p.add_argument("--csv", default="")
    a = p.parse_args()
    rows = []
    print(f"{'size GB':>8} {'dtype':<6} {'tensors':>8} {'torch ms':>10} {'torch GB/s':>12}")
    # torch.cuda._sleep counts GPU cycles: calibrate once.
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(10_000_000)
    e.record()
    e.synchronize()
    cycles_per_ms = 10_000_000 / max(s.elapsed_time(e), 1e-3)
    for gb in [float(x) for x in a.sizes_gb.split(",")]:
        total = int(gb * (1 << 30))
        share = [1 + (i * 7) % 3 for i in range(a.tensors)]
        shares = sum(share)
        ts = []
        nbytes = 0
        for i in range(a.tensors):
            dt = DTYPES[a.dtype] or (torch.float32 if i % 2 else torch.bfloat16)
            es = torch.tensor([], dtype=dt).element_size()
            n = total // shares * share[i] // es
            ts.append(torch.full((n,), 0.0115, dtype=dt, device="cuda"))
            nbytes += n * es

        def step():
            norms = torch._foreach_norm(ts, 2)
            amax = [t.abs().amax() for t in ts]
            fin = [torch.isfinite(t).all() for t in ts]
            return norms, amax, fin

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(a.iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int(a.cover_ms * cycles_per_ms))
            s.record()
            step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        ms = times[len(times) // 2]
        gbps = nbytes / (ms * 1e-3) / 1e9
        print(f"{gb:8.1f} {a.dtype:<6} {a.tensors:8d} {ms:10.3f} {gbps:12.1f}")
        rows.append((gb, a.dtype, a.tensors, ms, gbps))
        del ts
        torch.cuda.empty_cache()
    if a.csv:
        fresh = not os.path.exists(a.csv)
        with open(a.csv, "a") as f:
            if fresh:
                f.write("size_gb,dtype,tensors,torch_ms,torch_gbps\n")
            for r in rows:
                f.write("%g,%s,%d,%.4f,%.1f\n" % r)


if __name__ == "__main__":
    main()
