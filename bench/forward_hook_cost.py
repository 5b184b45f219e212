#!/usr/bin/python3
"""What observing forward tensors costs a training step (the forward
channel, docs/controller.md): on the evaluation model (experiments/gnmr_eval,
13 low-cost Linears, batch 8 x 64), the host time of the forward hooks of
``Monitor(..., forward_tensors=quantizer_tensors)`` (the callable, the
tensor checks and ``Client.observe_forward``'s statistics of every unit's
quantized input) against the time of the whole training step, two ways:

- in situ: each hook timed where it runs, inside real training steps
  (forward, backward, optimizer), in the caches the module's own work left
  behind: what a trainer pays;
- hot: the same hooks called back to back on the same tensors, in blocks
  alternating with training steps: the cost with the interpreter and the
  tensors in cache, a lower bound.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/forward_hook_cost.py

Prints the medians (milliseconds) and the ratios. No daemon (target
"local"): the network is not what is measured here.

``--device cuda`` runs the model on the GPU: the hooks then enqueue the
statistics on the current stream (client/src/forward_device.h) and their
host time is what the training thread pays; every step also calls
``after_backward`` (the step's gradient statistics, on the GPU) so that
each step's forward calls are closed into its report, and ends with a
``torch.cuda.synchronize()`` so that step times are wall times.
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
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("--device cuda: no CUDA device", file=sys.stderr)
        return 2
    model = ByteTransformer(ModelConfig(ctx=64)).to(args.device)
    for m in model.modules():
        if isinstance(m, LowPrecisionLinear):
            m.record_quantized = True
    mon = gt.Monitor(model, target="local", job_id="forward-hook-cost",
                     unit_filter=lambda n, m: isinstance(m, LowPrecisionLinear),
                     forward_tensors=quantizer_tensors)
    x = torch.randint(0, 256, (8, 64), device=args.device)
    y = torch.randint(0, 256, (8, 64), device=args.device)
    model(x, y).backward()  # warm up
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    observed = [0]

    def end_step():
        """CUDA: closes the step's forward calls into a report, and waits."""
        if cuda:
            mon.after_backward(observed[0])
            observed[0] += 1
            torch.cuda.synchronize()
    hooks = mon._forward
    calls = [(u.handle, u.name, name, m) for u in mon._units for name, m in u.modules]
    observe = hooks._observe
    in_step = [0.0]

    def timed_observe(*a):
        t0 = time.perf_counter()
        observe(*a)
        in_step[0] += time.perf_counter() - t0

    hook_ms, step_ms, situ_ms, situ_step_ms = [], [], [], []
    for block in range(args.blocks):
        # In situ: every hook of a real training step timed where it runs.
        hooks._observe = timed_observe
        for _ in range(args.steps):
            in_step[0] = 0.0
            t0 = time.perf_counter()
            model(x, y).backward()
            end_step()
            opt.step()
            opt.zero_grad(set_to_none=True)
            situ_step_ms.append((time.perf_counter() - t0) * 1e3)
            situ_ms.append(in_step[0] * 1e3)
        hooks._observe = observe
        # Hot: the hooks back to back, then steps without them.
        hot = 0.0
        for _ in range(args.steps):
            t0 = time.perf_counter()
            for handle, unit, name, m in calls:
                hooks._observe(handle, unit, name, m, None, None)
            hot += time.perf_counter() - t0
            end_step()  # CUDA: not timed; drains what the round enqueued
        hook_ms.append(hot / args.steps * 1e3)
        mon.forward_enabled = False
        t0 = time.perf_counter()
        for _ in range(args.steps):
            model(x, y).backward()
            end_step()
            opt.step()
            opt.zero_grad(set_to_none=True)
        step_ms.append((time.perf_counter() - t0) / args.steps * 1e3)
        mon.forward_enabled = True
    mon.close()
    h, s = statistics.median(hook_ms), statistics.median(step_ms)
    hs, ss = statistics.median(situ_ms), statistics.median(situ_step_ms)
    print("| what | median ms/step | share of the step |")
    print("| --- | --- | --- |")
    print(f"| training step (forward, backward, AdamW; no forward hooks) | {s:.2f} | |")
    print(f"| forward hooks of {len(calls)} units, in situ (statistics included) | {hs:.3f} "
          f"| **{100 * hs / ss:.2f}%** (of {ss:.2f} ms with them) |")
    print(f"| the same hooks back to back, hot | {h:.3f} | {100 * h / s:.2f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
