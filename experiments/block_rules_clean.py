"""The block rules and the relative-error rule against thresholds: how many
admissions each threshold makes on a clean run, and which of a few
block-local quantizer faults it sees (docs/controller.md, "Block rules" and
"Relative error"; issue 35's note).

Trains the evaluation's byte-level transformer (experiments/gnmr_eval) in
fp32 with no injected fault and, at every step, quantizes each unit's input
activation two ways and reads it with gnmr.block_stats, the fp32 input as
the source:
- MXFP8 e4m3 1x32 with the OCP floor rule for the E8M0 scales (our own
  emulation, so a fault can be planted in it; torchao's MXTensor.to_mx
  applies the same rule), with FAULTS planted at fixed steps in one unit
  each, in a tenth of its rows: `desync` (block scales 8x too small, so
  their codes clamp at 448, the overflow of a stale scale) or `flush`
  (block scales 2^20 too large, so their codes flush to zero);
- NVFP4 (torchao's NVFP4Tensor.to_nvfp4, per-tensor scale from the amax),
  clean.
It writes one replay trace per format with the columns gnmrd records
(docs/replay.md), then replays each through `gnmrctl replay`, every
gradient and element rule out of the way and one block or source rule on
at a time, over a grid of thresholds, with a budget no admission can meet
(max_o 64): admissions outside the planted faults (false), faults admitted
at their step (seen), and unit-steps in recovery.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python $(scripts/python_env.sh) \\
        experiments/block_rules_clean.py [--steps 300] [--out DIR]

Needs PyTorch 2.x with torchao (the project venv), the Debian package
`fortunes` and a built gnmrctl (build/bin/gnmrctl, or --gnmrctl).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gnmr_eval.data import Batches, load_corpus  # noqa: E402
from gnmr_eval.model import ByteTransformer, ModelConfig  # noqa: E402
from gnmr_eval.replay import replay  # noqa: E402

import gnmr  # noqa: E402
from gnmr import blocks  # noqa: E402

# (step, unit index, kind): one planted fault each, past every warmup.
FAULTS = [(120, 3, "desync"), (150, 10, "flush"), (180, 17, "desync"), (210, 6, "flush"),
          (240, 21, "desync"), (270, 14, "flush")]
FAULT_ROWS = 0.1  # the share of the unit's rows whose blocks the fault hits
# Every rule but the one under test out of the way (never fires).
QUIET = dict(tau=1e9, tau_delta=1e9, tau_forward=1e9, tau_saturation=1e9,
             underflow_fraction=0.999, max_o=64, lock_steps=1, lag=1, warmup=50)
GRID = {
    "tau_block_saturation": [1.5, 2, 3, 4],
    "dead_block_fraction": [0.01, 0.05, 0.1, 0.25],
    "scale_clamp_fraction": [0.01, 0.05, 0.1, 0.25],
    "tau_relative_error": [2, 4, 8, 16],
}
COLUMNS = ["step", "unit", "sumsq", "numel", "fwd_sumsq", "fwd_amax", "fwd_saturated",
           "fwd_zeros", "fwd_numel", "fwd_blocks", "fwd_saturated_blocks", "fwd_dead_blocks",
           "fwd_scale_clamps", "fwd_source_numel", "fwd_underflow", "fwd_error_sumsq",
           "fwd_source_sumsq"]


def mxfp8(x: torch.Tensor, fault: str = ""):
    """E4M3 codes and E8M0 scales of x [rows, cols] per 32 elements, the OCP
    floor rule (scale 2^(floor(log2 amax) - 8)); a fault moves the scales
    of the first FAULT_ROWS of the rows as the module doc says."""
    b = x.reshape(x.shape[0], -1, 32)
    amax = b.abs().amax(dim=-1, keepdim=True).clamp_min(2.0 ** -120)
    exp = torch.floor(torch.log2(amax)) - 8
    if fault:
        hit = max(1, int(FAULT_ROWS * x.shape[0]))
        exp[:hit] += -3 if fault == "desync" else 20
    exp = exp.clamp(-127, 127)
    codes = (b / torch.pow(2.0, exp)).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(x.shape)
    scales = (exp + 127).to(torch.uint8).reshape(x.shape[0], -1)
    return blocks.describe(codes, scales, format="mxfp8_e4m3", source=x)


def nvfp4(x: torch.Tensor):
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale
    q = NVFP4Tensor.to_nvfp4(x, per_tensor_scale=per_tensor_amax_to_scale(x.abs().max()))
    return blocks.describe(q, source=x)


def row(step, name, grad_sumsq, grad_numel, s):
    return {"step": step, "unit": name, "sumsq": repr(grad_sumsq), "numel": grad_numel,
            "fwd_sumsq": repr(s["sumsq"]), "fwd_amax": repr(s["amax"]),
            "fwd_saturated": s["saturated"], "fwd_zeros": s["zero_codes"],
            "fwd_numel": s["numel"], "fwd_blocks": s["blocks"],
            "fwd_saturated_blocks": s["saturated_blocks"], "fwd_dead_blocks": s["dead_blocks"],
            "fwd_scale_clamps": s["scale_clamps"], "fwd_source_numel": s["numel"],
            "fwd_underflow": s["underflow"], "fwd_error_sumsq": repr(s["error_sumsq"]),
            "fwd_source_sumsq": repr(s["source_sumsq"])}


def record(a) -> dict:
    """Trains and writes the traces; returns {format: path}."""
    torch.manual_seed(a.seed)
    corpus = load_corpus()
    cfg = ModelConfig(layers=a.layers, width=a.width, ctx=128)
    model = ByteTransformer(cfg)
    model.set_low_cost(False)  # fp32: the statistics are the quantizers', not the model's
    units = list(zip(model.unit_names(), model.units()))
    inputs = {}
    for name, m in units:
        m.register_forward_hook(lambda mod, i, o, name=name: inputs.__setitem__(name, i[0]))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    batches = Batches(corpus.train, a.batch, cfg.ctx, a.seed)
    faults = {(step, units[u][0]): kind for step, u, kind in FAULTS}
    paths = {f: os.path.join(a.out, f"{f}.csv") for f in ("mxfp8_e4m3", "nvfp4")}
    files = {f: open(p, "w", newline="") for f, p in paths.items()}
    writers = {f: csv.DictWriter(fh, fieldnames=COLUMNS) for f, fh in files.items()}
    for w in writers.values():
        w.writeheader()
    print(f"block_rules_clean: {a.layers} layers x {a.width}, {len(units)} units, {a.steps} "
          f"steps; {corpus.describe()}", flush=True)
    t0 = time.time()
    for step in range(a.steps):
        x, y = batches.next()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for name, m in units:
            g = torch.cat([p.grad.reshape(-1) for p in m.parameters()]).double()
            src = inputs[name].detach().reshape(-1, inputs[name].shape[-1]).float().contiguous()
            for fmt, q in (("mxfp8_e4m3", lambda t: mxfp8(t, faults.get((step, name), ""))),
                           ("nvfp4", nvfp4)):
                s = gnmr.block_stats(q(src))
                writers[fmt].writerow(row(step, name, float((g * g).sum()), g.numel(), s))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 50 == 0:
            print(f"step {step + 1}: loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    for fh in files.values():
        fh.close()
    return paths


def judge(gnmrctl: str, paths: dict, names) -> list:
    """One row per (format, key, threshold)."""
    planted = {(step, names[u]) for step, u, _ in FAULTS}
    out = []
    for fmt, path in paths.items():
        for key, values in GRID.items():
            for v in values:
                r = replay(gnmrctl, path, dict(QUIET, **{key: v}))
                admitted = {(step, unit) for unit, step, _ in r.admitted()}
                seen = [kind for step, u, kind in FAULTS
                        if fmt == "mxfp8_e4m3" and (step, names[u]) in admitted]
                out.append({"format": fmt, "key": key, "value": v,
                            "false": len(admitted - planted),
                            "seen": seen, "in_force": r.in_force, "unit_steps": r.unit_steps})
    return out


def report(rows) -> str:
    lines = ["| format | rule key = threshold | false admissions | unit-steps in recovery "
             "| planted faults seen (desync / flush, of 3 each) |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        seen = (f"{r['seen'].count('desync')} / {r['seen'].count('flush')}"
                if r["format"] == "mxfp8_e4m3" else "(none planted)")
        lines.append(f"| {r['format']} | `{r['key']}` = {r['value']} | {r['false']} | "
                     f"{100 * r['in_force'] / max(r['unit_steps'], 1):.2f}% | {seen} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="/tmp/gnmr-block-rules", help="traces and the table")
    p.add_argument("--gnmrctl", default=os.path.join(os.path.dirname(HERE), "build/bin/gnmrctl"))
    a = p.parse_args(argv)
    if a.steps <= max(step for step, _, _ in FAULTS):
        p.error(f"--steps must pass the last planted fault (step {FAULTS[-1][0]})")
    if not os.access(a.gnmrctl, os.X_OK):
        p.error(f"no gnmrctl at {a.gnmrctl} (build it, or pass --gnmrctl)")
    try:
        import torchao  # noqa: F401
    except ImportError as e:
        print(f"block_rules_clean: needs torchao (the project venv): {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    paths = record(a)
    names = ByteTransformer(ModelConfig(layers=a.layers, width=a.width, ctx=128)).unit_names()
    table = report(judge(a.gnmrctl, paths, names))
    print("\n" + table)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
