"""The block-scaled FP8 recipe of setting N2 (experiments/gnmr_eval/fp8_block.py):
its quantizers against a literal per-block reference, the stored bytes
against E4M3's encoding, gnmr's statistics of what it hands over, its
GEMMs' gradients and faults, and the Autoswitch peer's switch."""
from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "experiments"))

from gnmr_eval import fp8_block as B  # noqa: E402
from gnmr_eval import peers  # noqa: E402
from gnmr_eval.fp8 import LowPrecisionLinear, _round_to_e4m3_reference, quantizer_tensors  # noqa


def decode_e4m3(code: int) -> float:
    """The OCP E4M3 (fn) value of an 8-bit code, from the format's definition."""
    s, e, m = code >> 7, (code >> 3) & 0xF, code & 7
    v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    return -v if s else v


def reference_tiles(x: torch.Tensor):
    """1x128 tiles, one at a time: scale = 448 / amax in fp32 (1 for a zero
    tile, FLT_MAX where it overflows), codes = x * scale rounded,
    scale_inv = 1 / scale."""
    codes, scales = torch.zeros_like(x), []
    for r in range(x.shape[0]):
        row = []
        for c0 in range(0, x.shape[1], 128):
            tile = x[r, c0:c0 + 128]
            amax = tile.abs().max()
            scale = torch.tensor(1.0) if amax == 0 else torch.tensor(448.0) / amax
            if math.isinf(scale):
                scale = torch.tensor(torch.finfo(torch.float32).max)
            row.append(float(1.0 / scale))
            codes[r, c0:c0 + 128] = _round_to_e4m3_reference(tile * scale)
        scales.append(row)
    return codes, torch.tensor(scales, dtype=torch.float32)


def test_tiles_match_the_per_block_reference_with_tails_and_zero_blocks():
    torch.manual_seed(1)
    x = torch.randn(5, 300) * torch.logspace(-3, 3, 300)
    x[1, 128:256] = 0  # an all-zero tile: codes 0, scale 1
    x[2, :128] = 0
    x[2, 7] = 1e-43  # 448 / amax overflows fp32: scale FLT_MAX, not a NaN
    codes, scale_inv = B.quantize_tiles(x)
    ref_codes, ref_scales = reference_tiles(x)
    assert scale_inv.shape == (5, 3)
    assert torch.equal(codes, ref_codes)
    assert torch.equal(scale_inv, ref_scales)
    assert float(scale_inv[1, 1]) == 1.0 and not bool(codes[1, 128:256].any())
    assert bool(torch.isfinite(codes).all()) and float(codes[2, 7]) == 0.0  # underflows, as in TE
    assert float(codes[0].abs().max()) == 448.0  # a block's amax maps to E4M3's maximum


def test_square_blocks_take_each_128x128_blocks_amax():
    torch.manual_seed(2)
    w = torch.randn(200, 260)
    codes, scale_inv = B.quantize_square(w)
    assert scale_inv.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            scale = torch.tensor(448.0) / blk.abs().max()
            assert float(scale_inv[i, j]) == float(1.0 / scale)
            got = codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            assert torch.equal(got, _round_to_e4m3_reference(blk * scale))
    deq = B.dequantize_square(codes, scale_inv)
    assert float((deq - w).norm() / w.norm()) < 0.05


def test_stored_bytes_encode_every_e4m3_value():
    values = sorted({decode_e4m3(c) for c in range(256) if (c & 0x7F) != 0x7F})
    v = torch.tensor(values, dtype=torch.float32)
    got = B.e4m3_bytes(v).tolist()
    assert [decode_e4m3(c) for c in got] == values
    assert B.e4m3_bytes(torch.tensor([0.0]))[0] == 0


def test_gnmr_reads_the_stored_codes_and_scales():
    from gnmr import blocks
    torch.manual_seed(3)
    x = torch.randn(64, 256) * 3
    codes, scale_inv = B.quantize_tiles(x)
    st = blocks.block_stats(B.block_ref(codes, scale_inv, source=x))
    # Dequantized in fp64 (code x scale_inv is exact there), as gnmr sums.
    deq = B.dequantize_tiles(codes.double(), scale_inv.double())
    assert st["numel"] == x.numel() and st["blocks"] == 128
    assert math.isclose(st["sumsq"], float(deq.pow(2).sum()), rel_tol=1e-9)
    assert math.isclose(st["amax"], float(deq.abs().max()), rel_tol=1e-6)
    assert st["saturated"] == int((codes.abs() == 448).sum())
    assert st["has_source"]
    err = float(((x.double() - deq) ** 2).sum())
    assert math.isclose(st["error_sumsq"], err, rel_tol=1e-6)


class Unit:
    fault = None
    record_quantized = False
    gnmr_backward_sink = None
    autoswitch = None


def grads(unit, x, w, b):
    x, w, b = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y = B.BlockFp8Linear.apply(x, w, b, unit)
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), x.grad, w.grad


def test_all_three_gemms_are_quantized_and_close_to_fp32():
    torch.manual_seed(4)
    x, w, b = torch.randn(256, 128), torch.randn(256, 128) * 0.1, torch.randn(256)
    y, dx, dw = grads(Unit(), x, w, b)
    ref = Unit()
    ref.autoswitch = lambda *pairs: True  # every GEMM on its fp32 operands
    y32, dx32, dw32 = grads(ref, x, w, b)
    assert torch.allclose(y32, x @ w.t() + b, rtol=1e-5, atol=1e-5)
    for got, want in ((y, y32), (dx, dx32), (dw, dw32)):
        rel = float((got - want).norm() / want.norm())
        assert 1e-4 < rel < 0.08, rel  # quantized (not fp32), yet E4M3-close


def test_faults_act_on_the_quantizers():
    torch.manual_seed(5)
    x, w, b = torch.randn(128, 128), torch.randn(128, 128) * 0.1, torch.zeros(128)
    y, dx, dw = grads(Unit(), x, w, b)
    amp = Unit()
    amp.fault = ("amp", 16.0)
    ya, _, _ = grads(amp, x, w, b)
    assert torch.allclose(ya, 16 * y, rtol=1e-5, atol=1e-5)
    g = Unit()
    g.fault = ("grad", 16.0)
    yg, dxg, dwg = grads(g, x, w, b)
    assert torch.equal(yg, y)  # the forward pass is healthy
    assert torch.allclose(dxg, 16 * dx, rtol=1e-5, atol=1e-6)
    assert torch.allclose(dwg, 16 * dw, rtol=1e-5, atol=1e-6)
    att = Unit()
    att.fault = ("att", 16.0)
    codes, _ = B.quantize_tiles(x, att.fault)
    assert float((codes.abs() == 448).float().mean()) > 0.5  # most of each tile saturates


def test_backward_sink_gets_the_stored_gradient():
    from gnmr import blocks
    seen = []
    u = Unit()
    u.gnmr_backward_sink = lambda ref, sat: seen.append(blocks.block_stats(ref))
    x, w, b = torch.randn(128, 256), torch.randn(384, 256) * 0.1, torch.zeros(384)
    grads(u, x, w, b)
    assert len(seen) == 1 and seen[0]["numel"] == 128 * 384 and seen[0]["blocks"] == 128 * 3


def test_module_paths_and_the_forward_channel():
    torch.manual_seed(6)
    m = LowPrecisionLinear(128, 64)
    m.recipe, m.record_quantized = "block", True
    x = torch.randn(2, 8, 128)
    y = m(x)
    assert y.shape == (2, 8, 64)
    items = quantizer_tensors("u", m, (x,), y)
    assert len(items) == 1 and not isinstance(items[0], torch.Tensor)  # a block descriptor
    m.gnmr_promoted = True
    assert torch.equal(m(x), torch.nn.functional.linear(x, m.weight, m.bias))
    assert quantizer_tensors("u", m, (x,), y) is None


def test_autoswitch_switches_by_the_operands_error():
    torch.manual_seed(7)
    x, w, b = torch.randn(128, 128), torch.randn(128, 128) * 0.1, torch.zeros(128)
    for rel_error, switched in ((1e-4, True), (1e-2, False)):
        arm = peers.Autoswitch(rel_error=rel_error)
        u = Unit()
        u.autoswitch = arm._judge(3)
        y, _, _ = grads(u, x, w, b)
        assert (3 in arm.in_force) == switched
        assert torch.equal(y, x @ w.t() + b) == switched
    amp = Unit()
    amp.fault = ("amp", 16.0)
    arm = peers.Autoswitch(rel_error=1e-2)
    amp.autoswitch = arm._judge(0)
    ya, _, _ = grads(amp, x, w, b)
    assert 0 in arm.in_force and torch.equal(ya, x @ w.t() + b)  # the fault never ran
