"""gnmr.block_stats of Transformer Engine's quantized tensors.

TE is not installable on this machine (no CUDA toolchain for its build), so
these are FAKES: objects carrying the field names, shapes and padding of
TE's MXFP8Tensor, NVFP4Tensor and Float8BlockwiseQTensor
(transformer_engine/pytorch/tensor/*.py and tensor/storage/*.py), filled
from torchao's quantizers, and compared with torchao's dequantization
(block_testlib.py).
"""
from __future__ import annotations

import types

import pytest
import torch

import gnmr
from block_testlib import (MX_ELEMS, NO_TORCHAO, compare, mx_reference, needs_torchao,
                           nv_reference, padded, random_source, up)

if not NO_TORCHAO:
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale
    from torchao.prototype.mx_formats.utils import to_blocked


@needs_torchao
@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("fp8", ["kFloat8E4M3", "kFloat8E5M2"])
def test_te_mxfp8_fake(swizzled, fp8):
    fmt = "mxfp8_e4m3" if fp8 == "kFloat8E4M3" else "mxfp8_e5m2"
    elem = getattr(torch, MX_ELEMS[fmt])
    M, K = 96, 160  # TE needs multiples of 32; 96 rows pad to 128
    x = random_source(M, K, seed=11)
    row = MXTensor.to_mx(x, elem, 32, is_swizzled_scales=swizzled)
    col = MXTensor.to_mx(x.t().contiguous(), elem, 32)  # 32x1 blocks of x
    if swizzled:  # cuBLAS tiles of the K-major grids, TE's scale shapes
        rs = row.scale.view(torch.uint8).reshape(up(M, 128), up(K // 32, 4))
        cs = to_blocked(col.scale.view(torch.uint8)).reshape(up(M // 32, 4), up(K, 128))
    else:
        rs = padded(row.scale, up(M, 128), up(K // 32, 4))
        cs = padded(col.scale.t(), up(M // 32, 4), up(K, 128))
    te = types.SimpleNamespace(  # a FAKE TE MXFP8Tensor (TE is not installable here)
        _rowwise_data=row.qdata.view(torch.uint8), _rowwise_scale_inv=rs,
        _columnwise_data=col.qdata.view(torch.uint8).t().contiguous(),
        _columnwise_scale_inv=cs, _fp8_dtype=types.SimpleNamespace(name=fp8),
        _with_gemm_swizzled_scales=swizzled)
    compare(gnmr.block_stats(te, source=x), mx_reference(row, fmt, x))
    got = gnmr.block_stats(te, source=x, usage="columnwise")
    compare(got, mx_reference(col, fmt, x.t().contiguous()))


@needs_torchao
@pytest.mark.parametrize("swizzled", [False, True])
def test_te_nvfp4_fake(swizzled):
    M, K = 200, 96
    x = random_source(M, K, seed=12)
    amax = x.abs().max().reshape(1)
    n = NVFP4Tensor.to_nvfp4(x, 16, per_tensor_scale=per_tensor_amax_to_scale(amax[0]),
                             is_swizzled_scales=swizzled)
    rs = n.scale.view(torch.uint8)
    rs = rs.reshape(up(M, 128), -1) if swizzled else padded(rs, up(M, 128), up(K // 16, 4))
    te = types.SimpleNamespace(  # a FAKE TE NVFP4Tensor: rowwise only
        _rowwise_data=n.qdata, _rowwise_scale_inv=rs, _columnwise_data=None,
        _columnwise_scale_inv=None, _amax_rowwise=amax, _amax_columnwise=None,
        _with_gemm_swizzled_scales=swizzled)
    compare(gnmr.block_stats(te, source=x), nv_reference(n, x))
    te._amax_rowwise = torch.ones(M)  # row-scaled NVFP4: one amax per row
    with pytest.raises(ValueError, match="not one per-tensor value"):
        gnmr.block_stats(te)


@needs_torchao
def test_te_nvfp4_columnwise_3d_fake():
    # TE's columnwise copy of [B, S, H] is [H, B, S] (packed: [H, B, S/2]),
    # 1x16 blocks along B*S: the matrix [H, B*S], not [H*B, S].
    B, S, H = 2, 64, 48
    xt = random_source(H, B * S, seed=15, span=(-4, 8), outlier=20.0)  # the source, transposed
    amax = xt.abs().max().reshape(1)
    n = NVFP4Tensor.to_nvfp4(xt, 16, per_tensor_scale=per_tensor_amax_to_scale(amax[0]))
    te = types.SimpleNamespace(  # a FAKE TE NVFP4Tensor: columnwise only
        _rowwise_data=None, _rowwise_scale_inv=None, _amax_rowwise=None,
        _columnwise_data=n.qdata.reshape(H, B, S // 2), _amax_columnwise=amax,
        _columnwise_scale_inv=padded(n.scale, up(H, 128), up(B * S // 16, 4)),
        _with_gemm_swizzled_scales=False)
    compare(gnmr.block_stats(te, source=xt.reshape(H, B, S)), nv_reference(n, xt))


@needs_torchao
def test_te_float8_blockwise_fake():
    M, K = 200, 300  # partial 128x128 blocks at both ends
    x = random_source(M, 320, seed=13)[:, :K].contiguous()
    gm, gk = -(-M // 128), -(-K // 128)
    tiles = torch.nn.functional.pad(x, (0, gk * 128 - K, 0, gm * 128 - M))
    tiles = tiles.reshape(gm, 128, gk, 128)
    s = (tiles.abs().amax((1, 3)) / 448).clamp(min=2.0**-120)  # fp32, not powers of two
    codes = (tiles / s[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    codes = codes.reshape(gm * 128, gk * 128)[:M, :K].contiguous()
    scale_inv = torch.full((gm, up(gk, 4)), float("nan"))
    scale_inv[:, :gk] = s
    te = types.SimpleNamespace(  # a FAKE TE Float8BlockwiseQTensor, 128x128 scales
        _rowwise_data=codes.view(torch.uint8), _rowwise_scale_inv=scale_inv,
        _columnwise_data=None, _columnwise_scale_inv=None,
        _fp8_dtype=types.SimpleNamespace(name="kFloat8E4M3"), _is_2D_scaled=True)
    got = gnmr.block_stats(te, source=x)
    sfull = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:M, :K].to(torch.float64)
    c = codes.to(torch.float64)
    dq = c * sfull
    assert got["blocks"] == gm * gk
    assert got["sumsq"] == pytest.approx(float((dq ** 2).sum()), rel=1e-12, abs=0)
    assert got["amax"] == float(dq.abs().max())
    assert got["saturated"] == int((c.abs() == 448).sum())
    assert got["underflow"] == int(((x != 0) & (dq == 0)).sum())
    assert got["error_sumsq"] == pytest.approx(float(((x.double() - dq) ** 2).sum()), rel=1e-9)
    log2 = torch.frexp(s.double())[1] - 1
    assert (got["scale_log2_min"], got["scale_log2_max"]) == (int(log2.min()), int(log2.max()))



@needs_torchao
def test_te_float8_blockwise_1x128_fake():
    """1x128 blocks: TE keeps the scales M-major, [ceil(K/128), roundup(M, 4)]."""
    M, K = 150, 300  # a partial block at each row's end; M pads to 152
    x = random_source(M, 384, seed=14)[:, :K].contiguous()
    gk = -(-K // 128)
    rows = torch.nn.functional.pad(x, (0, gk * 128 - K)).reshape(M, gk, 128)
    s = (rows.abs().amax(-1) / 448).clamp(min=2.0**-120)  # [M, gk] fp32, not powers of two
    codes = (rows / s[:, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    codes = codes.reshape(M, gk * 128)[:, :K].contiguous()
    scale_inv = torch.full((gk, up(M, 4)), float("nan"))  # M-major, padding never read
    scale_inv[:, :M] = s.t()
    te = types.SimpleNamespace(  # a FAKE TE Float8BlockwiseQTensor, 1x128 scales
        _rowwise_data=codes.view(torch.uint8), _rowwise_scale_inv=scale_inv,
        _columnwise_data=None, _columnwise_scale_inv=None,
        _fp8_dtype=types.SimpleNamespace(name="kFloat8E4M3"), _is_2D_scaled=False)
    got = gnmr.block_stats(te, source=x)
    c = codes.to(torch.float64)
    dq = c * s.repeat_interleave(128, 1)[:, :K].to(torch.float64)
    assert got["blocks"] == M * gk
    assert got["sumsq"] == pytest.approx(float((dq ** 2).sum()), rel=1e-12, abs=0)
    assert got["amax"] == float(dq.abs().max())
    assert got["saturated"] == int((c.abs() == 448).sum())
    sat = torch.nn.functional.pad((c.abs() == 448).to(torch.int32), (0, gk * 128 - K))
    assert got["saturated_blocks"] == int(sat.reshape(M, gk, 128).any(-1).sum())
    assert got["error_sumsq"] == pytest.approx(float(((x.double() - dq) ** 2).sum()), rel=1e-9)
    log2 = torch.frexp(s.double())[1] - 1
    assert (got["scale_log2_min"], got["scale_log2_max"]) == (int(log2.min()), int(log2.max()))
    # The same memory as plain codes with the compact [M, gk] grid gives the same figures.
    plain = gnmr.block_stats(codes.view(torch.uint8), s.contiguous(), format="fp8_block",
                             source=x)
    assert plain == got
