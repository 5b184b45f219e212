"""gnmr.block_stats against torchao's own quantizers and dequantization.

GNMR's statistics (C++, read in place) are compared with figures computed
in float64 torch from torchao's dequantize and its code and scale decoding
(block_testlib.py): an independent second reference to the C++ tests.
Transformer Engine's tensors: test_block_stats_te.py. The refusals and the
hand-checked plain-tensor cases need only torch (they run on Debian's
PyTorch 1.13 in the ASan suite, where the torchao tests skip).
"""
from __future__ import annotations

import types

import pytest
import torch

import gnmr
from gnmr import _gnmr, blocks
from block_testlib import (MX_ELEMS, NO_TORCHAO, compare, mx_reference, needs_torchao,
                           nv_reference, random_source, seed_of)

if not NO_TORCHAO:
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale


@needs_torchao
@pytest.mark.parametrize("fmt", list(MX_ELEMS))
@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("shape", [(200, 256), (37, 96), (1, 32)])
def test_mx_matches_torchao(fmt, swizzled, shape):
    x = random_source(*shape, seed=seed_of(fmt, swizzled, shape))
    m = MXTensor.to_mx(x, getattr(torch, MX_ELEMS[fmt]), 32, is_swizzled_scales=swizzled)
    want = mx_reference(m, fmt, x)
    if shape != (1, 32):  # the cases exercise what they claim
        assert want["saturated"] > 0 and want["underflow"] > 0 and want["scale_clamps"] > 0
    compare(gnmr.block_stats(m, source=x), want)
    compare(gnmr.block_stats(m), mx_reference(m, fmt, x, with_source=False))
    # The same memory as plain codes (fp4 also as torch's float4_e2m1fn_x2).
    codes = m.qdata.view(torch.float4_e2m1fn_x2) if fmt == "mxfp4" else m.qdata
    plain = gnmr.block_stats(codes, m.scale, format=fmt, source=x,
                             scale_layout="swizzled" if swizzled else "compact")
    assert plain == gnmr.block_stats(m, source=x)


@needs_torchao
@pytest.mark.parametrize("mode", ["CEIL", "EVEN", "RCEIL"])
@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4"])
def test_mx_scaling_modes(mode, fmt):
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    x = random_source(130, 128, seed=seed_of(mode, fmt))
    m = MXTensor.to_mx(x, getattr(torch, MX_ELEMS[fmt]), 32,
                       scaling_mode=getattr(ScaleCalculationMode, mode))
    compare(gnmr.block_stats(m, source=x), mx_reference(m, fmt, x))


@needs_torchao
def test_mx_e8m0_zero_scale_is_2_to_the_minus_127():
    # torchao's FLOOR quantizer divides a block whose scale byte is 0x00 by
    # 2^-126 (its F32_MIN_NORMAL clamp) but its dequantize, the OCP spec and
    # gnmr read 0x00 as 2^-127: such a block comes back at half its value,
    # and gnmr's error says so.
    x = torch.full((1, 32), 2.0**-130)
    m = MXTensor.to_mx(x, torch.float8_e4m3fn, 32)
    assert m.scale.view(torch.uint8).item() == 0
    got = gnmr.block_stats(m, source=x)
    assert got["scale_log2_min"] == -127 and got["scale_clamps"] == 1
    assert got["error_sumsq"] == 32 * 2.0**-262 == got["source_sumsq"] / 4


@needs_torchao
def test_mx_bf16_source_3d_and_nan_block():
    x = random_source(96, 64, seed=5).to(torch.bfloat16).reshape(2, 48, 64)
    m = MXTensor.to_mx(x, torch.float8_e4m3fn, 32)
    compare(gnmr.block_stats(m, source=x), mx_reference(m, "mxfp8_e4m3", x))
    y = random_source(4, 64, seed=6)
    y[1, 3] = float("nan")  # its block's scale is 0xFF: every element NaN
    m = MXTensor.to_mx(y, torch.float8_e5m2, 32)
    got, want = gnmr.block_stats(m, source=y), mx_reference(m, "mxfp8_e5m2", y)
    assert got["nonfinite"] == want["nonfinite"] == 32
    assert got["sumsq"] != got["sumsq"]  # NaN
    del want["sumsq"]  # NaN on both sides
    compare(got, want)


@needs_torchao
@pytest.mark.parametrize("per_tensor", [False, True])
@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("shape", [(200, 256), (37, 96)])
def test_nvfp4_matches_torchao(per_tensor, swizzled, shape):
    # e4m3 block scales span 2^-6..448 (normal), fixed or relative to the
    # tensor's amax: a narrower spread than for MX keeps most blocks in
    # range, the smallest clamp.
    x = random_source(*shape, seed=seed_of(per_tensor, swizzled, shape), span=(-4, 8), outlier=20.0)
    pts = per_tensor_amax_to_scale(x.abs().max()) if per_tensor else None
    n = NVFP4Tensor.to_nvfp4(x, 16, per_tensor_scale=pts, is_swizzled_scales=swizzled)
    want = nv_reference(n, x)
    assert want["underflow"] > 0 and want["scale_clamps"] > 0 and want["saturated"] > 0
    assert want["scale_clamps"] < want["blocks"] // 2
    got = gnmr.block_stats(n, source=x)
    compare(got, want)
    g = 1.0 if pts is None else float(pts)
    assert got == gnmr.block_stats(n.qdata, n.scale, format="nvfp4", global_scale=g, source=x,
                                   scale_layout="swizzled" if swizzled else "compact")


@needs_torchao
def test_torchao_layouts_refused():
    x = random_source(64, 64, seed=14)
    m = MXTensor.to_mx(x, torch.float8_e4m3fn, 32)
    bad = types.SimpleNamespace(qdata=m.qdata.t(), scale=m.scale, elem_dtype=m.elem_dtype,
                                block_size=32, is_swizzled_scales=False)
    with pytest.raises(ValueError, match="not contiguous.*transposed"):
        gnmr.block_stats(bad)
    with pytest.raises(ValueError, match="block_size 16 is not supported"):
        gnmr.block_stats(MXTensor.to_mx(x, torch.float8_e4m3fn, 16))
    with pytest.raises(ValueError, match="element dtype fp6_e2m3 is not supported"):
        gnmr.block_stats(types.SimpleNamespace(qdata=m.qdata, scale=m.scale,
                                               elem_dtype="fp6_e2m3", block_size=32))
    with pytest.raises(ValueError, match="source shape"):
        gnmr.block_stats(m, source=x.reshape(32, 128))
    with pytest.raises(ValueError, match="a quantized tensor carries its own"):
        gnmr.block_stats(m, layout="columnwise")
    with pytest.raises(ValueError, match="usage applies to TE tensors only"):
        gnmr.block_stats(m, usage="columnwise")
    sw = MXTensor.to_mx(x, torch.float8_e4m3fn, 32, is_swizzled_scales=True)
    sw.scale = sw.scale[:16]  # no longer the padded grid
    with pytest.raises(ValueError, match="swizzled scales hold 256 entries"):
        gnmr.block_stats(sw)


# --- plain tensors and the binding: torch only (1.13 too) -------------------

def test_plain_codes_by_hand():
    # mxfp8_e4m3, 2 x 64, 1x32 blocks: 0x7E is 448 (saturated), 0x38 is 1.0;
    # scales 127 (2^0), 130 (2^3), 0 (2^-127, a clamp), 127.
    codes = torch.zeros(2, 64, dtype=torch.uint8)
    codes[0, 0], codes[0, 40], codes[1, 1] = 0x7E, 0x38, 0xB8  # 448, 1.0, -1.0
    scales = torch.tensor([[127, 130], [0, 127]], dtype=torch.uint8)
    got = gnmr.block_stats(codes, scales, format="mxfp8_e4m3")
    assert got["numel"] == 128 and got["blocks"] == 4
    assert got["sumsq"] == 448.0 ** 2 + 8.0 ** 2 + 2.0 ** -254
    assert got["amax"] == 448.0 and got["saturated"] == got["saturated_blocks"] == 1
    assert got["zero_codes"] == 125 and got["dead_blocks"] == 1  # block (1, 1)
    assert got["scale_clamps"] == 1 and got["scaled_blocks"] == 4
    assert (got["scale_log2_min"], got["scale_log2_max"], got["scale_log2_sum"]) == (-127, 3, -124)
    assert gnmr.blocks.stats is gnmr.block_stats
    both = gnmr.block_stats([blocks.describe(codes, scales, format="mxfp8_e4m3")] * 2)
    assert both["numel"] == 256 and both["sumsq"] == 2 * got["sumsq"]


def test_binding_refusals():
    with pytest.raises(ValueError, match="unknown block format 'mxfp6'"):
        _gnmr.BlockTensor(format="mxfp6", data_ptr=0, rows=0, cols=0, scales_ptr=0,
                          scale_rows=0, scale_cols=0)
    with pytest.raises(ValueError, match="unknown scale layout"):
        _gnmr.BlockTensor(format="nvfp4", scale_layout="tiled", data_ptr=0, rows=0, cols=0,
                          scales_ptr=0, scale_rows=0, scale_cols=0)
    with pytest.raises(NotImplementedError, match="CUDA .* not wired to Python yet"):
        _gnmr.BlockTensor(format="nvfp4", data_ptr=1, rows=1, cols=16, scales_ptr=1,
                          scale_rows=1, scale_cols=1, device=0)
    null = _gnmr.BlockTensor(format="mxfp4", data_ptr=0, rows=4, cols=64, scales_ptr=0,
                             scale_rows=4, scale_cols=2)
    with pytest.raises(ValueError, match="tensor 0: mxfp4 rowwise 1x32: data is null"):
        _gnmr.block_stats([null])
    codes, scales = torch.zeros(4, 64, dtype=torch.uint8), torch.zeros(4, 1, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"does not cover the block grid \[4, 2\]"):
        gnmr.block_stats(codes, scales, format="mxfp8_e5m2")
    with pytest.raises(ValueError, match="global_scale must be 1"):
        gnmr.block_stats(codes, scales.repeat(1, 2), format="mxfp8_e5m2", global_scale=2.0)
    with pytest.raises(ValueError, match="square blocks need compact scales"):
        _gnmr.block_stats([_gnmr.BlockTensor(
            format="fp8_block", layout="square", scale_layout="swizzled", data_ptr=8, rows=4,
            cols=4, scales_ptr=8, scale_rows=128, scale_cols=4)])


def test_plain_refusals():
    codes = torch.zeros(4, 64, dtype=torch.uint8)
    scales = torch.zeros(4, 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match="code dtype torch.float32 is not supported"):
        gnmr.block_stats(codes.float(), scales, format="mxfp8_e4m3")
    with pytest.raises(ValueError, match="scale dtype torch.uint8 is not supported"):
        gnmr.block_stats(codes, scales, format="fp8_block")
    with pytest.raises(ValueError, match="not contiguous"):
        gnmr.block_stats(codes.t(), scales, format="mxfp8_e4m3")
    with pytest.raises(ValueError, match="unknown block format 'mxfp8'"):
        gnmr.block_stats(codes, scales, format="mxfp8")
    with pytest.raises(ValueError, match="cannot read a Tensor"):
        gnmr.block_stats(codes)
    with pytest.raises(ValueError, match="host memory only"):
        gnmr.block_stats(codes.to("meta"), scales, format="mxfp8_e4m3")
    with pytest.raises(ValueError, match="takes no other arguments"):
        gnmr.block_stats([codes], format="mxfp8_e4m3")
    if torch.cuda.is_available():
        with pytest.raises(NotImplementedError, match="not wired to Python yet"):
            gnmr.block_stats(codes.cuda(), scales.cuda(), format="mxfp8_e4m3")
