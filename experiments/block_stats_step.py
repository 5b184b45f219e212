"""What the block-scaled statistics see on real training steps, and what
they cost (issue 35's note; docs/statistics.md, "Block-scaled formats").

Trains the evaluation's byte-level transformer (experiments/gnmr_eval,
high-fidelity fp32, AdamW) on the fortunes corpus and, at chosen steps,
quantizes every Linear's input activation, weight and output gradient with
torchao's own quantizers (MXTensor.to_mx: MXFP8 e4m3 with the OCP floor
rule and e5m2 for gradients, MXFP4; NVFP4Tensor.to_nvfp4 with a per-tensor
scale) and reads them with gnmr.block_stats (source = the fp32 tensor). It
prints, per step, tensor kind and format, the figures across the Linears
(median and worst): saturated and dead blocks, scale clamps, the spread of
the block scale exponents, underflow and the relative error, and the time
gnmr.block_stats took against torchao's quantization of the same tensor.

    PYTHONPATH=build/python $(scripts/python_env.sh) experiments/block_stats_step.py \\
        [--steps 300] [--at 1,100,300] [--layers 4] [--width 256] [--out DIR]

Needs PyTorch 2.x with torchao (the project venv) and the Debian package
`fortunes` (scripts/install_deps.sh installs both).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gnmr_eval.data import Batches, load_corpus  # noqa: E402
from gnmr_eval.model import ByteTransformer, ModelConfig  # noqa: E402

import gnmr  # noqa: E402


def quantizers():
    """(format label, function fp32 tensor -> quantized tensor) per format."""
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    def nvfp4(x):
        return NVFP4Tensor.to_nvfp4(x, per_tensor_scale=per_tensor_amax_to_scale(x.abs().max()))

    return {
        "mxfp8_e4m3": lambda x: MXTensor.to_mx(x, torch.float8_e4m3fn, 32),
        "mxfp8_e5m2": lambda x: MXTensor.to_mx(x, torch.float8_e5m2, 32),
        "mxfp4": lambda x: MXTensor.to_mx(x, torch.float4_e2m1fn_x2, 32),
        "nvfp4": nvfp4,
    }


def capture(model):
    """Forward/backward hooks on every Linear: its input and output grad."""
    seen = {}
    handles = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            def fwd(mod, inputs, output, name=name):
                seen.setdefault(name, {})["activation"] = inputs[0].detach()

            def bwd(mod, grad_input, grad_output, name=name):
                seen.setdefault(name, {})["gradient"] = grad_output[0].detach()

            handles.append(m.register_forward_hook(fwd))
            handles.append(m.register_full_backward_hook(bwd))
            seen.setdefault(name, {})["module"] = m
    return seen, handles


def measure(seen, quant):
    """Rows: one per (Linear, tensor kind, format)."""
    rows = []
    for name, d in seen.items():
        tensors = {"weight": d["module"].weight.detach(), "activation": d.get("activation"),
                   "gradient": d.get("gradient")}
        for kind, x in tensors.items():
            if x is None:
                continue
            x = x.reshape(-1, x.shape[-1]).float().contiguous()
            if x.shape[-1] % 32 != 0:
                continue
            for fmt, q in quant.items():
                if fmt == "mxfp8_e5m2" and kind != "gradient":
                    continue  # e5m2 is the gradients' format
                t0 = time.perf_counter()
                qx = q(x)
                t1 = time.perf_counter()
                s = gnmr.block_stats(qx, source=x)
                t2 = time.perf_counter()
                blocks = max(s["blocks"], 1)
                rows.append({
                    "unit": name, "kind": kind, "format": fmt, "numel": x.numel(),
                    "saturated_blocks": s["saturated_blocks"] / blocks,
                    "dead_blocks": s["dead_blocks"] / blocks,
                    "scale_clamps": s["scale_clamps"] / blocks,
                    "log2_spread": s["scale_log2_max"] - s["scale_log2_min"],
                    "underflow": s["underflow"] / max(s["numel"], 1),
                    "relative_error": s["error_sumsq"] / s["source_sumsq"]
                    if s["source_sumsq"] > 0 else 0.0,
                    "stats_ms": (t2 - t1) * 1e3, "quantize_ms": (t1 - t0) * 1e3,
                })
    return rows


def summarize(step, rows):
    print(f"\nstep {step}: median / worst over the Linears")
    print("| kind | format | saturated blocks | dead blocks | scale clamps | exponent spread "
          "| underflow | relative error | gnmr ms / torchao ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    keys = sorted({(r["kind"], r["format"]) for r in rows})
    for kind, fmt in keys:
        rs = [r for r in rows if r["kind"] == kind and r["format"] == fmt]

        def cell(field, pct=True):
            v = [r[field] for r in rs]
            med, worst = statistics.median(v), max(v)
            return (f"{100 * med:.2f}% / {100 * worst:.2f}%" if pct
                    else f"{med:.3g} / {worst:.3g}")

        ms = sum(r["stats_ms"] for r in rs) / max(sum(r["quantize_ms"] for r in rs), 1e-9)
        print(f"| {kind} | {fmt} | {cell('saturated_blocks')} | {cell('dead_blocks')} | "
              f"{cell('scale_clamps')} | {cell('log2_spread', False)} | {cell('underflow')} | "
              f"{cell('relative_error', False)} | {ms:.2f}x |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--at", default="1,100,300", help="steps to measure (default 1,100,300)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="", help="write every row as JSON lines here (a directory)")
    a = p.parse_args(argv)
    at = {int(s) for s in a.at.split(",") if s}
    try:
        quant = quantizers()
    except ImportError as e:
        print(f"block_stats_step: needs torchao (the project venv): {e}", file=sys.stderr)
        return 2
    torch.manual_seed(a.seed)
    corpus = load_corpus()
    cfg = ModelConfig(layers=a.layers, width=a.width, ctx=128)
    model = ByteTransformer(cfg)
    for m in model.units():
        m.low_cost = False  # the fp32 model: natural statistics, no injected faults
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    batches = Batches(corpus.train, a.batch, cfg.ctx, a.seed)
    seen, _ = capture(model)
    out = None
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        out = open(os.path.join(a.out, "rows.jsonl"), "w")
    print(f"block_stats_step: {a.layers} layers x {a.width}, {a.steps} steps, measuring {sorted(at)}"
          f"; {corpus.describe()}", flush=True)
    t0 = time.time()
    for step in range(1, a.steps + 1):
        x, y = batches.next()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step in at:
            rows = measure(seen, quant)
            summarize(step, rows)
            for r in rows:
                if out:
                    out.write(json.dumps({"step": step, **r}) + "\n")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
