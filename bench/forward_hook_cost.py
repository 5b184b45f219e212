#!/usr/bin/python3
"""What observing forward tensors costs a training step (the forward
channel, docs/controller.md): on the evaluation model (experiments/gnmr_eval,
13 low-cost Linears, batch 8 x 64), the host time of the forward hooks of
``Monitor(..., forward_tensors=quantizer_tensors)`` per step (the callable,
the TensorRefs and ``Client.observe_forward``'s statistics of every unit's
quantized input), against the time of the whole training step (forward and
backward) measured in the same run, in alternating blocks.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/forward_hook_cost.py

Prints the medians (milliseconds) and the ratio. No daemon (target
"local"): the network is not what is measured here.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments"))

import torch  # noqa: E402

import gnmr.torch as gt  # noqa: E402
from gnmr_eval.fp8 import LowPrecisionLinear, quantizer_tensors  # noqa: E402
from gnmr_eval.model import ByteTransformer, ModelConfig  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=9, help="alternating blocks (default 9)")
    p.add_argument("--steps", type=int, default=20, help="steps per block (default 20)")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ByteTransformer(ModelConfig(ctx=64))
    for m in model.modules():
        if isinstance(m, LowPrecisionLinear):
            m.record_quantized = True
    mon = gt.Monitor(model, target="local", job_id="forward-hook-cost",
                     unit_filter=lambda n, m: isinstance(m, LowPrecisionLinear),
                     forward_tensors=quantizer_tensors)
    x = torch.randint(0, 256, (8, 64))
    y = torch.randint(0, 256, (8, 64))
    model(x, y).backward()  # warm up
    hooks = mon._forward  # the hooks' own work, called as a forward pass calls it
    calls = [(u.handle, u.name, name, m) for u in mon._units for name, m in u.modules]
    hook_ms, step_ms = [], []
    for block in range(args.blocks):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            for handle, unit, name, m in calls:
                hooks._observe(handle, unit, name, m, None, None)
        hook_ms.append((time.perf_counter() - t0) / args.steps * 1e3)
        mon.forward_enabled = False
        t0 = time.perf_counter()
        for _ in range(args.steps):
            model(x, y).backward()
        step_ms.append((time.perf_counter() - t0) / args.steps * 1e3)
        mon.forward_enabled = True
    mon.close()
    h, s = statistics.median(hook_ms), statistics.median(step_ms)
    print("| what | median ms/step |")
    print("| --- | --- |")
    print(f"| training step (forward + backward, no monitor work) | {s:.2f} |")
    print(f"| forward hooks of {len(calls)} units (statistics included) | {h:.3f} |")
    print(f"| ratio | **{100 * h / s:.2f}%** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
