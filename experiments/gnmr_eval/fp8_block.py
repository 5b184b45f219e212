"""The DeepSeek-V3-style FP8 recipe, emulated: every GEMM of a Linear in FP8.

Setting N2 of the natural-instability evaluation (docs/evaluation.md,
"Setting N2"). Unlike the per-tensor low-cost path (fp8.py: the input
activation only, straight-through gradient), all three GEMMs of the layer
take FP8 operands, as DeepSeek-V3 trains and Transformer Engine's
``Float8BlockScaling`` recipe does:

- forward  y  = x  @ W^T: x in 1x128 tiles along K, W in 128x128 blocks;
- dgrad    dx = dy @ W:   dy in 1x128 tiles along N, the same W blocks
  (a square block is its own transpose's block);
- wgrad    dW = dy^T @ x: dy and x in 128x1 tiles along the tokens M (the
  reduction dimension of this GEMM: the columnwise copies).

Elements are E4M3 everywhere (gradients too), each block with its own fp32
scale, computed as Transformer Engine computes it: scale = 448 / amax(block)
in fp32, 1 for an all-zero block, FLT_MAX where the division overflows (an
amax below 448 / FLT_MAX); codes = round_to_e4m3(x * scale), stored with
scale_inv = 1 / scale. (Dividing by amax / 448 instead would underflow to 0
for an amax that small, and 0 / 0 = NaN: the first version of this file
did, and a gradient tile of ~1e-43 turned a healthy step into NaN.) The
bias and its gradient stay fp32; the GEMMs accumulate in fp32 (as the
tensor cores' fp32 accumulation does, up to the order of the sums).

Faults act on the quantizers as in fp8.py, on every block of the tensor and
on both of its copies (the GEMMs that read it all see it):

- amp: the activation quantizer's scale_inv is k times the right one;
- att: each activation block's amax is k times too small (everything above
  amax / k saturates at 448);
- grad: the gradient quantizer's scale_inv is k times the right one (the
  unit's dgrad and wgrad, and so every unit upstream, see a k-fold
  gradient).

``unit.autoswitch`` (None, or the Autoswitch peer's judge: peers.py) sees
each GEMM's (source, dequantized) operands before it runs and may run it
on the fp32 operands instead.

With ``record`` the forward tensors and quantized gradients are handed over
as they are stored: uint8 E4M3 codes with their fp32 scales, described as
``fp8_block`` for gnmr (``gnmr.blocks.describe``), read in place.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .fp8 import E4M3_MAX, round_to_e4m3

BLOCK = 128
FLT_MAX = float(torch.finfo(torch.float32).max)


def _pad_to(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    extra = (-x.shape[dim]) % multiple
    if extra == 0:
        return x
    pad = [0, 0] * (x.dim() - 1 - dim) + [0, extra]
    return F.pad(x, pad)


def block_scale(amax: torch.Tensor):
    """(scale, scale_inv) per block from its amax, by TE's rule (module doc)."""
    # Tensor by tensor: torch computes a Python number divided by a tensor as
    # the number times the tensor's reciprocal, rounded twice (1 ulp off).
    one = torch.ones_like(amax)
    scale = torch.full_like(amax, E4M3_MAX) / amax
    scale = torch.where(amax == 0, one, scale)
    scale = torch.where(torch.isinf(scale), torch.full_like(scale, FLT_MAX), scale)
    return scale, one / scale


def quantize_tiles(x: torch.Tensor, fault: Optional[Tuple[str, float]] = None):
    """A [rows, cols] matrix in 1x128 tiles along its rows: (codes [rows,
    cols] as fp32 E4M3 values, scale_inv [rows, ceil(cols / 128)]). ``fault``:
    ("amp" | "att" | "grad", k) or None."""
    rows, cols = x.shape
    xp = _pad_to(x, 1, BLOCK).reshape(rows, -1, BLOCK)
    amax = xp.abs().amax(dim=2)
    if fault is not None and fault[0] == "att":
        amax = amax / fault[1]
    scale, scale_inv = block_scale(amax)
    codes = round_to_e4m3(xp * scale.unsqueeze(2)).reshape(rows, -1)[:, :cols]
    if fault is not None and fault[0] in ("amp", "grad"):
        scale_inv = scale_inv * fault[1]
    return codes.contiguous(), scale_inv.contiguous()


def dequantize_tiles(codes: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    rows, cols = codes.shape
    cp = _pad_to(codes, 1, BLOCK).reshape(rows, -1, BLOCK)
    return (cp * scale_inv.unsqueeze(2)).reshape(rows, -1)[:, :cols]


def quantize_square(w: torch.Tensor):
    """A [rows, cols] matrix in 128x128 blocks: (codes, scale_inv
    [ceil(rows / 128), ceil(cols / 128)])."""
    rows, cols = w.shape
    wp = _pad_to(_pad_to(w, 0, BLOCK), 1, BLOCK)
    br, bc = wp.shape[0] // BLOCK, wp.shape[1] // BLOCK
    blocks = wp.reshape(br, BLOCK, bc, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    scale, scale_inv = block_scale(amax)
    codes = round_to_e4m3(blocks * scale[:, None, :, None])
    return codes.reshape(br * BLOCK, bc * BLOCK)[:rows, :cols].contiguous(), scale_inv


def dequantize_square(codes: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    rows, cols = codes.shape
    cp = _pad_to(_pad_to(codes, 0, BLOCK), 1, BLOCK)
    br, bc = cp.shape[0] // BLOCK, cp.shape[1] // BLOCK
    return (cp.reshape(br, BLOCK, bc, BLOCK) * scale_inv[:, None, :, None]).reshape(
        br * BLOCK, bc * BLOCK)[:rows, :cols]


def e4m3_bytes(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values that are exactly E4M3 values -> their uint8 encodings
    (sign, 4 exponent bits with bias 7, 3 mantissa bits; subnormals below
    2^-6). For torches without a float8 dtype (1.13)."""
    bits = codes.contiguous().view(torch.int32)
    sign = (bits >> 31) & 1
    a = codes.abs()
    abits = a.view(torch.int32)
    exp = ((abits >> 23) & 0xFF) - 127 + 7
    mant = (abits >> 20) & 7
    sub = torch.round(a * 512.0).to(torch.int32)  # a / 2^-9, an integer 0..7 below 2^-6
    normal = a >= 2.0 ** -6
    body = torch.where(normal, (exp << 3) | mant, sub)
    return ((sign << 7) | body).to(torch.uint8)


def block_ref(codes: torch.Tensor, scale_inv: torch.Tensor, square: bool = False,
              source: Optional[torch.Tensor] = None):
    """The gnmr descriptor of stored codes (uint8) and scales, read in place."""
    from gnmr import blocks
    return blocks.describe(e4m3_bytes(codes), scale_inv.float().contiguous(),
                           format="fp8_block", layout="square" if square else "rowwise",
                           source=source)


class BlockFp8Linear(torch.autograd.Function):
    """y = x @ W^T + b with the three GEMMs on block-quantized operands (the
    module's doc). ``unit``: the LowPrecisionLinear, for its fault, its
    recording flags and its backward sink."""

    @staticmethod
    def forward(ctx, x2: torch.Tensor, weight: torch.Tensor, bias, unit, record: bool = False):
        fault = unit.fault
        act_fault = fault if fault is not None and fault[0] in ("amp", "att") else None
        xc, xs = quantize_tiles(x2, act_fault)
        wc, ws = quantize_square(weight)
        wq = dequantize_square(wc, ws)
        if record:  # decided outside: grad mode is off inside a Function's forward
            unit.gnmr_quantized = block_ref(xc, xs, source=x2)
        ctx.unit, ctx.act_fault, ctx.has_bias = unit, act_fault, bias is not None
        ctx.grad_fault = fault if fault is not None and fault[0] == "grad" else None
        xq = dequantize_tiles(xc, xs)
        judge = unit.autoswitch
        if judge is not None and judge((x2, xq), (weight, wq)):
            xq, wq_f = x2, weight  # this GEMM in high precision (the Autoswitch peer)
        else:
            wq_f = wq
        ctx.save_for_backward(x2, weight, wq)
        y = xq @ wq_f.t()
        return y + bias if bias is not None else y

    @staticmethod
    def backward(ctx, g2: torch.Tensor):
        x2, weight, wq = ctx.saved_tensors
        unit = ctx.unit
        judge = unit.autoswitch
        gc, gs = quantize_tiles(g2, ctx.grad_fault)  # 1x128 along N: dgrad's operand
        if unit.gnmr_backward_sink is not None:
            unit.gnmr_backward_sink(block_ref(gc, gs), 0.0)
        gq = dequantize_tiles(gc, gs)
        if judge is not None and judge((g2, gq), (weight, wq)):
            dx = g2 @ weight
        else:
            dx = gq @ wq
        gt, xt = g2.t().contiguous(), x2.t().contiguous()
        gtc, gts = quantize_tiles(gt, ctx.grad_fault)  # 128x1 along M: wgrad's operands
        xtc, xts = quantize_tiles(xt, ctx.act_fault)
        gtq, xtq = dequantize_tiles(gtc, gts), dequantize_tiles(xtc, xts)
        if judge is not None and judge((gt, gtq), (xt, xtq)):
            gtq, xtq = gt, xt
        dw = gtq @ xtq.t()
        db = g2.sum(0) if ctx.has_bias else None
        return dx, dw, db, None, None


def block_linear(unit, x: torch.Tensor) -> torch.Tensor:
    """The low-cost forward of ``unit`` (a LowPrecisionLinear) in this recipe."""
    shape = x.shape
    record = unit.record_quantized and torch.is_grad_enabled()
    y = BlockFp8Linear.apply(x.reshape(-1, shape[-1]), unit.weight, unit.bias, unit, record)
    return y.reshape(*shape[:-1], y.shape[-1])
