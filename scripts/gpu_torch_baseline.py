#!/usr/bin/env python3
"""torch baseline for bench/gpu_stats_bench: torch._foreach_norm + amax +
isfinite over the same mixed bf16/fp32 gradients (1, 4, 16 GB in
hundreds of tensors). Prints a table; --csv writes one too."""
import argparse
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-gb", default="1,4,16")
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--csv", default="")
    a = p.parse_args()
    rows = []
    print(f"{'size GB':>8} {'tensors':>8} {'torch ms':>10} {'torch GB/s':>12}")
    for gb in [float(x) for x in a.sizes_gb.split(",")]:
        total = int(gb * (1 << 30))
        share = [1 + (i * 7) % 3 for i in range(a.tensors)]
        shares = sum(share)
        ts = []
        nbytes = 0
        for i in range(a.tensors):
            dt = torch.float32 if i % 2 else torch.bfloat16
            es = 4 if i % 2 else 2
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
            s.record()
            step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        ms = times[len(times) // 2]
        gbps = nbytes / (ms * 1e-3) / 1e9
        print(f"{gb:8.1f} {a.tensors:8d} {ms:10.3f} {gbps:12.1f}")
        rows.append((gb, a.tensors, ms, gbps))
        del ts
        torch.cuda.empty_cache()
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("size_gb,tensors,torch_ms,torch_gbps\n")
            for r in rows:
                f.write("%g,%d,%.4f,%.1f\n" % r)


if __name__ == "__main__":
    main()
