"""FP8 E4M3 fake quantization and the low-cost / high-fidelity Linear unit.

The low-cost path quantizes a Linear's input activations to FP8 E4M3
(per-tensor current scaling: scale = 448 / amax(x)), dequantizes them with
scale_inv = 1 / scale and multiplies by the fp32 weight; gradients pass the
quantizer straight through (STE). The high-fidelity path is plain fp32.

Faults live in the quantizer, so promotion to the high-fidelity path really
removes them (docs/evaluation.md, "Setup"):

- amplifying: scale and scale_inv out of step, scale_inv = k / scale, so the
  dequantized input is k times too large (k = 16);
- attenuating: a stale amax k times too small, so every value above
  amax / k saturates at the format's maximum (the input shrinks);
- grad: the backward quantizer (E5M2 grad_output, present in runs with
  these faults only) has scale_inv = k / scale: the unit's gradients and
  the gradient it passes upstream are k times too large. Its forward pass
  is healthy, so the forward channel cannot see it; gradient norms can.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0
E4M3_MIN_EXP = -6   # smallest normal exponent; below it, subnormals of step 2^-9
E4M3_MANT_BITS = 3
E5M2_MAX = 57344.0
E5M2_MIN_EXP = -14
E5M2_MANT_BITS = 2


def _round_to_fp8(v: torch.Tensor, vmax: float, min_exp: int, mant_bits: int) -> torch.Tensor:
    """Rounds fp32 values to the nearest value of an FP8 format (ties to
    even), saturating at +-vmax.

    Normal range: round the fp32 significand to `mant_bits` bits on the bit
    pattern (add half an ulp minus one plus the kept lsb, then truncate).
    Below 2^min_exp (subnormals, a fixed step of 2^(min_exp - mant_bits)):
    round(v / step) * step, both exact scalings by powers of two.
    """
    v = v.clamp(-vmax, vmax)
    bits = v.view(torch.int32)
    drop = 23 - mant_bits
    lsb = (bits >> drop) & 1
    normal = ((bits + ((1 << (drop - 1)) - 1) + lsb) & ~((1 << drop) - 1)).view(torch.float32)
    step = 2.0 ** (min_exp - mant_bits)
    sub = torch.round(v * (1.0 / step)) * step
    return torch.where(v.abs() < 2.0 ** min_exp, sub, normal)


def round_to_e4m3(v: torch.Tensor) -> torch.Tensor:
    """Rounds fp32 values to the nearest E4M3 value, saturating at +-448."""
    return _round_to_fp8(v, E4M3_MAX, E4M3_MIN_EXP, E4M3_MANT_BITS)


def round_to_e5m2(v: torch.Tensor) -> torch.Tensor:
    """Rounds fp32 values to the nearest E5M2 value, saturating at +-57344."""
    return _round_to_fp8(v, E5M2_MAX, E5M2_MIN_EXP, E5M2_MANT_BITS)


def _round_to_fp8_reference(v: torch.Tensor, vmax: float, min_exp: int,
                            mant_bits: int) -> torch.Tensor:
    """The same rounding through frexp (slower; the tests compare the two)."""
    v = v.clamp(-vmax, vmax)
    _, e = torch.frexp(v)  # v = m * 2^e, 0.5 <= |m| < 1: the exponent of v is e - 1
    exp = torch.clamp(e - 1, min=min_exp) - mant_bits
    quantum = torch.ldexp(torch.ones_like(v), exp)
    return torch.round(v / quantum) * quantum  # v / quantum is exact (power of two)


def _round_to_e4m3_reference(v: torch.Tensor) -> torch.Tensor:
    return _round_to_fp8_reference(v, E4M3_MAX, E4M3_MIN_EXP, E4M3_MANT_BITS)


def _round_to_e5m2_reference(v: torch.Tensor) -> torch.Tensor:
    return _round_to_fp8_reference(v, E5M2_MAX, E5M2_MIN_EXP, E5M2_MANT_BITS)


class _QuantizeGradE5M2(torch.autograd.Function):
    """Identity forward; backward fake-quantizes the incoming gradient to
    E5M2 (per-tensor current scaling), as FP8 training does for the
    backward GEMMs' grad_output, with its scale_inv multiplied by `factor`
    (1: healthy; 16: the "grad" fault, scale and scale_inv out of step).
    `sink` (or None): called with the quantized gradient as the GEMMs get it
    (dequantized) and the magnitude a saturated code dequantizes to, for the
    backward channel."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, factor: float, sink=None) -> torch.Tensor:
        ctx.factor, ctx.sink = factor, sink
        return y.view_as(y)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        amax = g.abs().max().clamp(min=1e-30)
        scale = E5M2_MAX / amax
        scale_inv = amax / E5M2_MAX * ctx.factor
        q = round_to_e5m2(g * scale) * scale_inv
        if ctx.sink is not None:
            ctx.sink(q, float(scale_inv * E5M2_MAX))
        return q, None, None


def fake_quant_e4m3_parts(x: torch.Tensor, fault: Optional[Tuple[str, float]] = None):
    """(codes, scale_inv): the E4M3 values the quantizer stores (as fp32)
    and the factor that dequantizes them, with an optional fault."""
    amax = x.abs().max().clamp(min=1e-30)
    if fault is not None and fault[0] == "att":
        amax = amax / fault[1]  # stale, too small: saturates
    scale = E4M3_MAX / amax
    scale_inv = amax / E4M3_MAX
    if fault is not None and fault[0] == "amp":
        scale_inv = scale_inv * fault[1]
    return round_to_e4m3(x * scale), scale_inv


def fake_quant_e4m3(x: torch.Tensor, fault: Optional[Tuple[str, float]] = None) -> torch.Tensor:
    """The dequantized FP8 image of ``x`` (no gradient), with an optional fault."""
    codes, scale_inv = fake_quant_e4m3_parts(x, fault)
    return codes * scale_inv


class LowPrecisionLinear(torch.nn.Linear):
    """A Linear with a low-cost (FP8 input) and a high-fidelity (fp32) path.

    ``gnmr_promoted`` (set by gnmr.torch.Monitor's default promote callback,
    or by the oracle / random arms) selects the high-fidelity path;
    ``low_cost`` False makes the whole model high-fidelity (the HF arm and
    validation); ``fault`` is set by the fault schedule for the current step.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gnmr_promoted = False
        self.low_cost = True
        self.fault: Optional[Tuple[str, float]] = None
        # The forward pass's quantized input for the forward channel:
        # (dequantized codes, the magnitude a saturated code dequantizes
        # to), or None on the high-fidelity path (quantizer_tensors).
        self.gnmr_quantized: Optional[Tuple[torch.Tensor, float]] = None
        self.record_quantized = False  # set by an arm that observes forward tensors
        # The backward quantizer (E5M2 grad_output) of runs with "grad"
        # faults; off elsewhere, so the other runs are unchanged.
        self.grad_quant = False
        # (quantized gradient, saturation magnitude) -> None: the backward
        # channel's sink, set by an arm that observes quantized gradients.
        self.gnmr_backward_sink = None
        # "tensor": the per-tensor recipe above; "block": every GEMM in FP8
        # with 1x128 / 128x128 scales (fp8_block.py, setting N2).
        self.recipe = "tensor"
        self.autoswitch = None  # the block recipe's per-GEMM judge (peers.Autoswitch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.gnmr_quantized = None
        if self.low_cost and not self.gnmr_promoted and self.recipe == "block":
            from .fp8_block import block_linear
            return block_linear(self, x)
        if self.low_cost and not self.gnmr_promoted:
            with torch.no_grad():
                codes, scale_inv = fake_quant_e4m3_parts(x.detach(), self.fault)
                q = codes * scale_inv
                delta = q - x.detach()
            if self.record_quantized and torch.is_grad_enabled():
                # In fp32, as the codes were dequantized: a code of 448 gives exactly this.
                self.gnmr_quantized = (q, float(scale_inv * E4M3_MAX))
            x = x + delta  # value of the quantized input, gradient of the identity
            if self.grad_quant:
                grad_fault = self.fault is not None and self.fault[0] == "grad"
                return _QuantizeGradE5M2.apply(F.linear(x, self.weight, self.bias),
                                               self.fault[1] if grad_fault else 1.0,
                                               self.gnmr_backward_sink)
        return F.linear(x, self.weight, self.bias)


def quantizer_tensors(name, module, inputs, output):
    """``forward_tensors`` for gnmr.torch.Monitor: a low-cost unit's
    quantized input as the quantizer stored it, dequantized, with saturation
    counted at the dequantized image of E4M3's maximum (fake-quantized codes
    in fp32: code * scale_inv >= 448 * scale_inv exactly when the code is
    448). Nothing on the high-fidelity path. The block recipe's quantized
    input is a block descriptor (fp8_block.block_ref): read as stored."""
    quantized = getattr(module, "gnmr_quantized", None)
    if quantized is None:
        return None
    if not isinstance(quantized, tuple):
        return [quantized]
    return [_forward_tensor_type()(quantized[0], saturation_magnitude=quantized[1])]


_FORWARD_TENSOR = None


def _forward_tensor_type():
    """gnmr.torch.ForwardTensor, imported on first use (the arms without a
    monitor never import gnmr) and then looked up once, not per call."""
    global _FORWARD_TENSOR
    if _FORWARD_TENSOR is None:
        from gnmr.torch import ForwardTensor
        _FORWARD_TENSOR = ForwardTensor
    return _FORWARD_TENSOR
