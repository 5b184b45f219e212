#!/usr/bin/env python3
"""Setting N1 of the natural-instability evaluation (docs/evaluation.md,
"Setting N1"): the MX proxy and the recorded sweep for a cell where
MX-format training diverges on its own.

The proxy, in the spirit of arXiv 2506.20752's: a student of `depth` pre-LN
residual blocks (h += W2 gelu(W1 LN(h)), hidden 4x, no input or output
projection) learns a fixed teacher, a plain deep GELU MLP without LayerNorm
drawn as torch.nn.Linear initialises weights (its output is tiny: the
student must learn to cancel its own residual stream and soon trains at
the noise floor, y = teacher(x) + 0.005 N(0, 1)), with Adam (0.9, 0.999)
at a constant learning rate, x ~ N(0, I), MSE. Low precision is emulated in
fp32 with the OCP MX rule: blocks of 32 along each GEMM's reduction
dimension share an E8M0 scale 2^(floor(log2 amax) - emax), elements rounded
to E4M3 (MXFP8) or E2M1 (MXFP4) and saturated; nvfp4 is NVFP4 without
the Hadamard transform or stochastic rounding (blocks of 16, E4M3 scales
under an fp32 tensor scale, E2M1 elements). All three GEMMs of a linear
layer run on MX operands (forward: x and W; dgrad: dY and W; wgrad: dY and
x, each blocked along its own reduction dimension; gradients E4M3, also
under MXFP4 weights), and the LayerNorm affine parameters are quantized
(straight-through; the paper's culprit). fp32 is the high-precision arm.

Divergence rule, fixed before any GNMR arm ran: the loss is non-finite, or
a 25-step mean of the training loss exceeds 2x its best 25-step mean
(counted from step 100).

    /usr/bin/python3 experiments/mx_proxy.py --formats fp32,mxfp8,mxfp4 \\
        --lrs 3e-3,1e-2,3e-2 --seeds 1,2,3 --out experiments/results-n1/sweep.jsonl

One JSON line per run (cell, seed, diverged and where, final / best /
validation loss, the 25-step loss means, wall time; a run already in --out
is not repeated), then a table: diverged seeds per cell and format
(--tables-only: the table of --out). Runs are independent: --jobs N runs N
at once. n1_eval.py runs the arms on the chosen cell.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gnmr_eval.metrics import LossSpikes  # noqa: E402  (n1_arms' skip-batch uses it too)

BLOCK = 32
ELEMENTS = {  # element format: (max, smallest normal exponent, mantissa bits, emax)
    "mxfp8": (448.0, -6, 3, 8),   # E4M3
    "mxfp4": (6.0, 0, 1, 2),      # E2M1
}


def mx_quantize(x, fmt):
    """x rounded as a block-scaled tensor of `fmt` stores it, blocks along
    the last dimension (zero-padded): MX formats in blocks of 32 with the OCP
    floor rule for the E8M0 scale; nvfp4 in blocks of 16 with an E4M3 scale
    (amax / 6, rounded to nearest) under one fp32 tensor scale (amax / (6 *
    448)), round to nearest (no Hadamard transform, no stochastic rounding)."""
    import torch
    from gnmr_eval.fp8 import _round_to_fp8
    nv = fmt == "nvfp4"
    block = 16 if nv else BLOCK
    vmax, min_exp, mant, emax = ELEMENTS["mxfp4" if nv else fmt]
    n = x.shape[-1]
    pad = (-n) % block
    v = torch.nn.functional.pad(x, (0, pad)) if pad else x
    blocks = v.reshape(*v.shape[:-1], -1, block)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    if nv:
        tensor_amax = float(amax.max())
        g = tensor_amax / (6.0 * 448.0) if tensor_amax > 0 else 1.0
        scale = _round_to_fp8((amax / (6.0 * g)).contiguous(), 448.0, -6, 3) * g
        amax = torch.where(scale > 0, amax, torch.zeros_like(amax))  # a scale flushed to 0
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    else:
        exp = torch.floor(torch.log2(amax.clamp_min(2.0 ** -127))) - emax
        scale = torch.pow(2.0, exp.clamp(-127, 127))
    q = _round_to_fp8((blocks / scale).contiguous(), vmax, min_exp, mant) * scale
    q = torch.where(amax > 0, q, torch.zeros_like(q))
    q = q.reshape(*v.shape)
    return q[..., :n] if pad else q


def mx_along(x, fmt, dim):
    """x quantized in MX blocks along `dim` (a GEMM's reduction dimension)."""
    if dim in (-1, x.dim() - 1):
        return mx_quantize(x, fmt)
    return mx_quantize(x.transpose(dim, -1).contiguous(), fmt).transpose(dim, -1)


class MXLinearFn:
    """A linear layer whose three GEMMs run on MX operands, as a block-scaled
    GEMM sees them: the forward GEMM on x and W blocked along in_features,
    dgrad (dY W) on dY and W blocked along out_features, wgrad (dY^T x) on dY
    and x blocked along the batch. Built lazily (torch imported in workers)."""
    fn = None

    @classmethod
    def get(cls):
        if cls.fn is None:
            import torch

            class Fn(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, w, b, fmt, bwd_fmt):
                    ctx.save_for_backward(x, w)
                    ctx.fmts = (fmt, bwd_fmt)
                    y = mx_quantize(x, fmt) @ mx_quantize(w, fmt).t()
                    return y + b if b is not None else y

                @staticmethod
                def backward(ctx, dy):
                    x, w = ctx.saved_tensors
                    fmt, bwd_fmt = ctx.fmts
                    if bwd_fmt == "fp32":
                        dx, dw = dy @ w, dy.t() @ x
                    else:
                        dx = mx_quantize(dy, bwd_fmt) @ mx_along(w, fmt, 0)
                        dw = mx_along(dy, bwd_fmt, 0).t() @ mx_along(x, fmt, 0)
                    return dx, dw, dy.sum(0), None, None

            cls.fn = Fn
        return cls.fn


def ste(x, fmt):
    """Quantized in the forward pass, identity in the backward pass (the
    LayerNorm affine parameters: elementwise, no GEMM of their own)."""
    if fmt == "fp32":
        return x
    return x + (mx_quantize(x.detach(), fmt) - x.detach())


def _classes():
    """The proxy's two kinds of unit, built on first use (torch is imported
    in the worker processes only). Each runs its low-precision path unless
    ``gnmr_promoted`` (set by gnmr.torch's default promote callback, or by an
    arm) or ``high_precision`` (a static rule) is set: then it runs in fp32,
    forward and backward."""
    global QLinear, QLayerNorm
    if "QLinear" in globals():
        return QLinear, QLayerNorm
    import torch
    import torch.nn.functional as F

    class QLinear(torch.nn.Linear):
        fmt, bwd_fmt, high_precision = "fp32", "fp32", False
        force_hp = False  # this step only (the AutoswitchGemm peer)

        observer = None  # called with (self, x) before the GEMM; may set force_hp

        def forward(self, x):
            low = self.fmt != "fp32" and not (self.high_precision
                                              or getattr(self, "gnmr_promoted", False))
            if low and self.observer is not None:
                self.observer(self, x)
            if not low or self.force_hp:
                return F.linear(x, self.weight, self.bias)
            return MXLinearFn.get().apply(x, self.weight, self.bias, self.fmt, self.bwd_fmt)

    class QLayerNorm(torch.nn.LayerNorm):
        fmt, quantize_affine, high_precision = "fp32", True, False

        def forward(self, x):
            hp = (self.fmt == "fp32" or not self.quantize_affine or self.high_precision
                  or getattr(self, "gnmr_promoted", False))
            w, b = (self.weight, self.bias) if hp else (ste(self.weight, self.fmt),
                                                        ste(self.bias, self.fmt))
            return F.layer_norm(x, self.normalized_shape, w, b, self.eps)

    globals().update(QLinear=QLinear, QLayerNorm=QLayerNorm)
    return QLinear, QLayerNorm


def build(width, depth, fmt, bwd_fmt, quantize_ln):
    """The student: `depth` pre-LN residual blocks h += W2 gelu(W1 LN(h)),
    hidden 4x, no input or output projection (the paper proxy's shape).
    Units, in forward order: blocks.<i>.ln, blocks.<i>.fc1, blocks.<i>.fc2."""
    import torch
    import torch.nn.functional as F
    QLin, QLN = _classes()

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = QLN(width)
            self.fc1 = QLin(width, 4 * width)
            self.fc2 = QLin(4 * width, width)

        def forward(self, h):
            return h + self.fc2(F.gelu(self.fc1(self.ln(h))))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(depth))

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

        def unit_items(self):
            return [(n, m) for n, m in self.named_modules() if isinstance(m, (QLin, QLN))]

    net = Net()
    for _, m in net.unit_items():
        m.fmt = fmt
        if isinstance(m, QLin):
            m.bwd_fmt = bwd_fmt
        else:
            m.quantize_affine = quantize_ln
    return net


def teacher_fn(width, depth, g, gain):
    """A fixed deep GELU MLP without LayerNorm (a plain stack: the student
    cannot represent it exactly). gain "unit" keeps the target at about unit
    variance (E[gelu(z)^2] ~ 0.425); "default" draws the weights as
    torch.nn.Linear initialises them (U(+-1/sqrt(fan_in)), the paper proxy's
    teacher), which shrinks the target with depth: the student soon reaches
    the noise floor, where gradients are small against quantization error."""
    import torch
    import torch.nn.functional as F
    if gain == "unit":
        ws = [(torch.randn(width, width, generator=g) / math.sqrt(width),
               torch.randn(width, width, generator=g) / math.sqrt(0.425 * width))
              for _ in range(depth)]
    else:
        u = lambda: (torch.rand(width, width, generator=g) * 2 - 1) / math.sqrt(width)
        ws = [(u(), u()) for _ in range(depth)]

    def f(x):
        for w1, w2 in ws:
            x = F.gelu(x @ w1) @ w2
        return x
    return f


class Arm:
    """What an arm does around a step (n1_arms.py has the others): the
    plain loop, no control. ``before_forward`` may switch units to high
    precision; ``after_backward`` may treat gradients and returns whether the
    optimizer steps; ``hp_unit_steps`` counts the units that ran in high
    precision, summed over steps."""
    name = "none"

    def setup(self, model, opt, cell):
        self.model, self.opt, self.cell = model, opt, cell
        self.hp_unit_steps = 0

    def before_forward(self, step):
        pass

    def after_backward(self, step, loss):
        return True

    def close(self):
        return {}


def bwd_format(cell):
    """The format of the gradients in the dgrad / wgrad GEMMs."""
    fmt, backprop = cell["format"], cell.get("backprop", "mx")
    if fmt == "fp32" or backprop == "fp32":
        return "fp32"
    if backprop == "same":
        return fmt  # all-FP4 training: E2M1 gradients under MXFP4 / NVFP4
    return "mxfp8" if fmt in ("mxfp4", "nvfp4") else fmt  # E4M3 gradients under FP4, as the paper


def run(cell, arm=None):
    """One training run of `cell` (width, depth, lr, batch, steps, format,
    seed; backprop, ln, teacher, noise optional) under `arm`; returns the
    cell with the outcome: diverged (the rule of the module notes) and where,
    the 25-step training-loss means, the final validation loss (a fixed
    held-out batch of 2048, teacher without noise, every unit in fp32), wall
    time, and what the arm reports."""
    import torch
    torch.set_num_threads(1)
    t0 = time.time()
    arm = arm or Arm()
    width, depth, lr, batch, steps, fmt, seed = (cell[k] for k in (
        "width", "depth", "lr", "batch", "steps", "format", "seed"))
    g = torch.Generator().manual_seed(1000 + seed)
    teacher = teacher_fn(width, depth, g, cell.get("teacher", "default"))
    # the validation batch from its own stream: the training stream is the sweep's
    xv = torch.randn(2048, width, generator=torch.Generator().manual_seed(5000 + seed))
    yv = teacher(xv)
    torch.manual_seed(seed)
    model = build(width, depth, fmt, bwd_format(cell), cell.get("ln", "mx") == "mx")
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999))
    arm.setup(model, opt, cell)
    window, means, best, diverged_at, loss_value = [], [], math.inf, None, math.nan
    skipped, spikes, spike_watch, norms = 0, 0, LossSpikes(), []
    for step in range(steps):
        x = torch.randn(batch, width, generator=g)
        with torch.no_grad():
            y = teacher(x) + cell.get("noise", 0.005) * torch.randn(batch, width, generator=g)
        arm.before_forward(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss_value = float(loss)
        if not math.isfinite(loss_value):
            diverged_at = step
            break
        spikes += spike_watch.is_spike(step, loss_value)
        opt.zero_grad()
        loss.backward()
        if step >= 50:
            norms.append(math.sqrt(sum(float(p.grad.double().pow(2).sum())
                                       for p in model.parameters())))
        if arm.after_backward(step, loss_value):
            opt.step()
        else:
            skipped += 1
        window.append(loss_value)
        if len(window) == 25:
            m = sum(window) / 25
            means.append(m)
            window = []
            if step >= 100:
                best = min(best, m)
                if m > 2 * best:
                    diverged_at = step
                    break
    with torch.no_grad():  # the learned weights, every unit in fp32 (one ruler for all arms)
        for _, m in model.unit_items():
            m.high_precision = True
        val = float(torch.nn.functional.mse_loss(model(xv), yv))
    extra = arm.close()
    units = len(model.unit_items())
    return dict(cell, arm=arm.name, diverged=diverged_at is not None, diverged_at=diverged_at,
                final_loss=loss_value if math.isfinite(loss_value) else None,
                best_loss=best if math.isfinite(best) else None,
                val_loss=val if math.isfinite(val) else None, skipped_steps=skipped, spikes=spikes,
                grad_norm_median=sorted(norms)[len(norms) // 2] if norms else None,
                hp_unit_steps=arm.hp_unit_steps, units=units, steps_run=step + 1,
                curve=[round(m, 6) for m in means], seconds=round(time.time() - t0, 1),
                **extra)


def sweep_table(runs):
    """One row per cell, one column per format: diverged seeds of all, and
    the steps where they diverged."""
    key = lambda r: (r["width"], r["depth"], r["lr"], r["batch"], r["steps"],
                     r.get("ln", "mx"), r.get("backprop", "mx"), r.get("teacher", "default"))
    formats = [f for f in ("fp32", "mxfp8", "mxfp4", "nvfp4")
               if any(r["format"] == f for r in runs)]
    lines = ["| width | depth | lr | batch | steps | LN affine | backprop | teacher | "
             + " | ".join(formats) + " |",
             "| " + " | ".join("---" for _ in range(8 + len(formats))) + " |"]
    for k in sorted({key(r) for r in runs}):
        cols = []
        for f in formats:
            rs = sorted((r for r in runs if key(r) == k and r["format"] == f),
                        key=lambda r: r["seed"])
            at = [str(r["diverged_at"]) for r in rs if r["diverged"]]
            cols.append("-" if not rs else f"{len(at)}/{len(rs)}"
                        + (f" (at {', '.join(at)})" if at else ""))
        lines.append("| " + " | ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in k)
                     + " | " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--formats", default="fp32,mxfp8,mxfp4")
    p.add_argument("--widths", default="128")
    p.add_argument("--depths", default="4")
    p.add_argument("--lrs", default="3e-3,1e-2,3e-2")
    p.add_argument("--batches", default="128")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--backprop", default="mx", choices=["mx", "same", "fp32"],
                   help="mx: dgrad and wgrad GEMMs on MX operands, gradients E4M3; same: "
                   "gradients in the format itself (E2M1 under mxfp4); fp32: backward unquantized")
    p.add_argument("--ln", default="mx", choices=["mx", "fp32"],
                   help="mx: LayerNorm affine parameters quantized (the paper's culprit)")
    p.add_argument("--teacher", default="default", choices=["default", "unit"],
                   help="teacher weights: torch.nn.Linear's init (default) or unit output variance")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", required=True,
                   help="JSON Lines, appended (one line per run; a run already there is not repeated)")
    p.add_argument("--tables-only", action="store_true", help="print the table of --out and stop")
    a = p.parse_args(argv)
    done = [json.loads(l) for l in open(a.out)] if os.path.exists(a.out) else []
    if a.tables_only:
        print(sweep_table(done), end="")
        return 0
    ints = lambda s: [int(v) for v in s.split(",")]
    cells = [dict(format=f, width=w, depth=d, lr=float(lr), batch=b, steps=a.steps, seed=s,
                  backprop=a.backprop, ln=a.ln, teacher=a.teacher)
             for f, w, d, lr, b, s in itertools.product(
                 a.formats.split(","), ints(a.widths), ints(a.depths), a.lrs.split(","),
                 ints(a.batches), ints(a.seeds))]
    fields = ("format", "width", "depth", "lr", "batch", "steps", "seed", "backprop", "ln",
              "teacher")
    have = {tuple(r.get(k) for k in fields) for r in done}
    cells = [c for c in cells if tuple(c[k] for k in fields) not in have]
    print(f"mx_proxy: {len(cells)} runs to do", flush=True)
    t0 = time.time()
    with mp.get_context("spawn").Pool(a.jobs) as pool, open(a.out, "a") as out:
        for i, r in enumerate(pool.imap_unordered(run, cells), 1):
            out.write(json.dumps(r) + "\n")
            out.flush()
            done.append(r)
            print(f"[{time.time() - t0:6.0f} s] {i}/{len(cells)} {r['format']} w{r['width']} "
                  f"d{r['depth']} lr{r['lr']:g} b{r['batch']} s{r['seed']}: "
                  f"{'DIVERGED at ' + str(r['diverged_at']) if r['diverged'] else 'ok'} "
                  f"final {r['final_loss']} ({r['seconds']} s)", flush=True)
    print("\n" + sweep_table(done), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
