"""gnmr.block_stats against torchao's own quantizers and dequantization.

GNMR's statistics (C++, read in place) are compared with figures computed
here in float64 torch from torchao's dequantize and its code and scale
decoding: an independent second reference to the C++ tests. Transformer
Engine is not installable on this machine (no CUDA toolchain for its
build), so its tensors are FAKES: objects carrying TE's field names,
shapes and padding (transformer_engine/pytorch/tensor/*.py), filled from
torchao's quantizers. The refusals and the hand-checked plain-tensor cases
need only torch (they run on Debian's PyTorch 1.13 in the ASan suite).
"""
from __future__ import annotations

import types
import zlib

import pytest
import torch

import gnmr
from gnmr import _gnmr, blocks

try:
    from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import MXTensor, get_fp_scale
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale
    from torchao.prototype.mx_formats.utils import from_blocked, to_blocked
    _NO_TORCHAO = ""
except Exception as e:  # noqa: BLE001  (ImportError, or torchao refusing this torch)
    _NO_TORCHAO = f"torchao's mx_formats cannot be imported ({type(e).__name__}: {e})"
if not _NO_TORCHAO and not hasattr(torch, "float4_e2m1fn_x2"):
    _NO_TORCHAO = f"torch {torch.__version__} lacks the float8/float4 dtypes (torch 2.x needed)"
needs_torchao = pytest.mark.skipif(bool(_NO_TORCHAO), reason=_NO_TORCHAO or "-")

MX_ELEMS = {"mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2",
            "mxfp4": "float4_e2m1fn_x2"}
MAX_CODE = {"mxfp8_e4m3": 448.0, "mxfp8_e5m2": 57344.0, "mxfp4": 6.0, "nvfp4": 6.0,
            "fp8_block": 448.0}


def _source(rows: int, cols: int, seed: int, dtype=torch.float32, span=(-140, 20),
            outlier: float = 1e6) -> torch.Tensor:
    """Random values whose 32-element blocks span 2^span[0] (fp32
    subnormals: underflow, E8M0 scale 0x00) to 2^span[1], with outliers
    that saturate and starve their blocks, and all-zero blocks."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols // 32, 32, generator=g, dtype=torch.float64)
    x *= torch.pow(2.0, torch.randint(span[0], span[1] + 1, (rows, cols // 32, 1), generator=g)
                   .to(torch.float64))
    flat = x.reshape(-1)
    hot = torch.randint(0, flat.numel(), (max(1, flat.numel() // 500),), generator=g)
    flat[hot] *= outlier
    zero = torch.rand(rows, cols // 32, generator=g) < 0.05
    x[zero] = 0.0
    x = x.reshape(rows, cols).clamp(-1e37, 1e37)
    return x.to(dtype)


def _figures(dq, codes, scales, block_size, clamp, x=None) -> dict:
    """The BlockStats figures of float64 values `dq` [rows, cols], their
    codes' values `codes` (same shape) and block scales `scales`
    [rows, cols // block_size] (1 x block_size blocks), from torch."""
    rows, cols = dq.shape
    finite = torch.isfinite(dq)
    mag = codes.abs().reshape(rows, cols // block_size, block_size)
    s = scales.abs()
    ok = torch.isfinite(s) & (s != 0)
    log2 = torch.frexp(s[ok])[1].to(torch.int64) - 1  # floor(log2 s), exactly
    f = dict(numel=dq.numel(), sumsq=float((dq[finite] ** 2).sum()),
             amax=float(dq[finite].abs().max()) if finite.any() else 0.0,
             nonfinite=int((~finite).sum()), zero_codes=int((codes == 0).sum()),
             saturated=int((mag == MAX_CODE[clamp[0]]).sum()),
             blocks=rows * (cols // block_size),
             saturated_blocks=int((mag == MAX_CODE[clamp[0]]).any(-1).sum()),
             scale_clamps=int(clamp[1].sum()), scaled_blocks=int(ok.sum()),
             scale_log2_min=int(log2.min()), scale_log2_max=int(log2.max()),
             scale_log2_sum=int(log2.sum()))
    if x is not None:
        xs = x.to(torch.float64)
        both = finite & torch.isfinite(xs)
        f.update(underflow=int(((xs != 0) & (dq == 0) & both).sum()),
                 error_sumsq=float(((xs - dq)[both] ** 2).sum()),
                 source_sumsq=float((xs[both] ** 2).sum()),
                 dead_blocks=int(((mag == 0).all(-1) & (xs.reshape(mag.shape) != 0).any(-1))
                                 .sum()))
    else:
        f["dead_blocks"] = int((mag == 0).all(-1).sum())
    return f


def _compare(got: dict, want: dict) -> None:
    for k, v in want.items():
        if k in ("sumsq", "source_sumsq"):
            assert got[k] == pytest.approx(v, rel=1e-12, abs=0), k
        elif k == "error_sumsq":
            assert got[k] == pytest.approx(v, rel=1e-9, abs=0), k
        else:
            assert got[k] == v, k  # counts and amax: exact
    assert got["has_source"] == ("underflow" in want)


def _seed(*key) -> int:
    return zlib.crc32(repr(key).encode())


def _mx_reference(m, fmt, x, with_source: bool = True):
    """Figures from torchao's float64 dequantization of MXTensor `m`."""
    dq = m.dequantize(torch.float64).reshape(-1, x.shape[-1])
    rows, cols = dq.shape
    scale = m.scale
    if m.is_swizzled_scales:
        scale = from_blocked(scale, rows, cols // 32)
    scale = scale.reshape(rows, cols // 32)
    if fmt == "mxfp4":
        codes = f4_unpacked_to_f32(unpack_uint4(m.qdata)).to(torch.float64)
    else:
        codes = m.qdata.to(torch.float64)
    codes = codes.reshape(rows, cols)
    s = get_fp_scale(scale).to(torch.float64)
    # torchao's dequantization is the decoded codes times the decoded scales.
    torch.testing.assert_close(dq, (codes.reshape(rows, -1, 32) * s[..., None]).reshape(rows, cols),
                               rtol=0, atol=0, equal_nan=True)
    bits = scale.view(torch.uint8)
    return _figures(dq, codes, s, 32, (fmt, (bits == 0) | (bits >= 254)),
                    x.reshape(rows, cols) if with_source else None)


@needs_torchao
@pytest.mark.parametrize("fmt", list(MX_ELEMS))
@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("shape", [(200, 256), (37, 96), (1, 32)])
def test_mx_matches_torchao(fmt, swizzled, shape):
    x = _source(*shape, seed=_seed(fmt, swizzled, shape))
    m = MXTensor.to_mx(x, getattr(torch, MX_ELEMS[fmt]), 32, is_swizzled_scales=swizzled)
    want = _mx_reference(m, fmt, x)
    if shape != (1, 32):  # the cases exercise what they claim
        assert want["saturated"] > 0 and want["underflow"] > 0 and want["scale_clamps"] > 0
    _compare(gnmr.block_stats(m, source=x), want)
    _compare(gnmr.block_stats(m), _mx_reference(m, fmt, x, with_source=False))
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
    x = _source(130, 128, seed=_seed(mode, fmt))
    m = MXTensor.to_mx(x, getattr(torch, MX_ELEMS[fmt]), 32,
                       scaling_mode=getattr(ScaleCalculationMode, mode))
    _compare(gnmr.block_stats(m, source=x), _mx_reference(m, fmt, x))


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
    x = _source(96, 64, seed=5).to(torch.bfloat16).reshape(2, 48, 64)
    m = MXTensor.to_mx(x, torch.float8_e4m3fn, 32)
    _compare(gnmr.block_stats(m, source=x), _mx_reference(m, "mxfp8_e4m3", x))
    y = _source(4, 64, seed=6)
    y[1, 3] = float("nan")  # its block's scale is 0xFF: every element NaN
    m = MXTensor.to_mx(y, torch.float8_e5m2, 32)
    got, want = gnmr.block_stats(m, source=y), _mx_reference(m, "mxfp8_e5m2", y)
    assert got["nonfinite"] == want["nonfinite"] == 32
    assert got["sumsq"] != got["sumsq"]  # NaN
    assert got["amax"] == want["amax"] and got["scale_clamps"] == want["scale_clamps"]


def _nv_reference(n, x):
    """Figures from torchao's dequantization of NVFP4Tensor `n` without
    its per_tensor_scale (fp32 products of 4-bit codes and e4m3 scales:
    exact), times that scale in float64 (torchao multiplies it in fp32)."""
    bare = NVFP4Tensor(n.qdata, n.scale, 16, n.orig_dtype, None, None, n.is_swizzled_scales)
    rows, cols = x.shape
    pts = 1.0 if n.per_tensor_scale is None else float(n.per_tensor_scale)
    dq = bare.dequantize(torch.float32).to(torch.float64) * pts
    if n.per_tensor_scale is not None:  # torchao's own fp32 result: two roundings
        assert torch.allclose(n.dequantize(torch.float32).double(), dq, rtol=2**-22, atol=0)
    scale = from_blocked(n.scale, rows, cols // 16) if n.is_swizzled_scales else n.scale
    s = scale.to(torch.float64)
    codes = f4_unpacked_to_f32(unpack_uint4(n.qdata)).to(torch.float64)
    clamp = (s.abs() <= 2.0**-6) | (s.abs() >= 448) | torch.isnan(s)
    return _figures(dq, codes, s, 16, ("nvfp4", clamp), x)


@needs_torchao
@pytest.mark.parametrize("per_tensor", [False, True])
@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("shape", [(200, 256), (37, 96)])
def test_nvfp4_matches_torchao(per_tensor, swizzled, shape):
    # e4m3 block scales span 2^-6..448 (normal), fixed or relative to the
    # tensor's amax: a narrower spread than for MX keeps most blocks in
    # range, the smallest clamp.
    x = _source(*shape, seed=_seed(per_tensor, swizzled, shape), span=(-4, 8), outlier=20.0)
    pts = per_tensor_amax_to_scale(x.abs().max()) if per_tensor else None
    n = NVFP4Tensor.to_nvfp4(x, 16, per_tensor_scale=pts, is_swizzled_scales=swizzled)
    want = _nv_reference(n, x)
    assert want["underflow"] > 0 and want["scale_clamps"] > 0 and want["saturated"] > 0
    assert want["scale_clamps"] < want["blocks"] // 2
    got = gnmr.block_stats(n, source=x)
    _compare(got, want)
    g = 1.0 if pts is None else float(pts)
    assert got == gnmr.block_stats(n.qdata, n.scale, format="nvfp4", global_scale=g, source=x,
                                   scale_layout="swizzled" if swizzled else "compact")


def _padded(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """`t` in the top-left of a [rows, cols] uint8 tensor whose padding is
    0xFF (a NaN scale: read, it would show)."""
    out = torch.full((rows, cols), 0xFF, dtype=torch.uint8)
    out[:t.shape[0], :t.shape[1]] = t.view(torch.uint8)
    return out


def _up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


@needs_torchao
@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("fp8", ["kFloat8E4M3", "kFloat8E5M2"])
def test_te_mxfp8_fake(swizzled, fp8):
    fmt = "mxfp8_e4m3" if fp8 == "kFloat8E4M3" else "mxfp8_e5m2"
    elem = getattr(torch, MX_ELEMS[fmt])
    M, K = 96, 160  # TE needs multiples of 32; 96 rows pad to 128
    x = _source(M, K, seed=11)
    row = MXTensor.to_mx(x, elem, 32, is_swizzled_scales=swizzled)
    col = MXTensor.to_mx(x.t().contiguous(), elem, 32)  # 32x1 blocks of x
    if swizzled:  # cuBLAS tiles of the K-major grids, TE's scale shapes
        rs = row.scale.view(torch.uint8).reshape(_up(M, 128), _up(K // 32, 4))
        cs = to_blocked(col.scale.view(torch.uint8)).reshape(_up(M // 32, 4), _up(K, 128))
    else:
        rs = _padded(row.scale, _up(M, 128), _up(K // 32, 4))
        cs = _padded(col.scale.t(), _up(M // 32, 4), _up(K, 128))
    te = types.SimpleNamespace(  # a FAKE TE MXFP8Tensor (TE is not installable here)
        _rowwise_data=row.qdata.view(torch.uint8), _rowwise_scale_inv=rs,
        _columnwise_data=col.qdata.view(torch.uint8).t().contiguous(),
        _columnwise_scale_inv=cs, _fp8_dtype=types.SimpleNamespace(name=fp8),
        _with_gemm_swizzled_scales=swizzled)
    _compare(gnmr.block_stats(te, source=x), _mx_reference(row, fmt, x))
    got = gnmr.block_stats(te, source=x, usage="columnwise")
    _compare(got, _mx_reference(col, fmt, x.t().contiguous()))


@needs_torchao
@pytest.mark.parametrize("swizzled", [False, True])
def test_te_nvfp4_fake(swizzled):
    M, K = 200, 96
    x = _source(M, K, seed=12)
    amax = x.abs().max().reshape(1)
    n = NVFP4Tensor.to_nvfp4(x, 16, per_tensor_scale=per_tensor_amax_to_scale(amax[0]),
                             is_swizzled_scales=swizzled)
    rs = n.scale.view(torch.uint8)
    rs = rs.reshape(_up(M, 128), -1) if swizzled else _padded(rs, _up(M, 128), _up(K // 16, 4))
    te = types.SimpleNamespace(  # a FAKE TE NVFP4Tensor: rowwise only
        _rowwise_data=n.qdata, _rowwise_scale_inv=rs, _columnwise_data=None,
        _columnwise_scale_inv=None, _amax_rowwise=amax, _amax_columnwise=None,
        _with_gemm_swizzled_scales=swizzled)
    _compare(gnmr.block_stats(te, source=x), _nv_reference(n, x))
    te._amax_rowwise = torch.ones(M)  # row-scaled NVFP4: one amax per row
    with pytest.raises(ValueError, match="not one per-tensor value"):
        gnmr.block_stats(te)


@needs_torchao
def test_te_nvfp4_columnwise_3d_fake():
    # TE's columnwise copy of [B, S, H] is [H, B, S] (packed: [H, B, S/2]),
    # 1x16 blocks along B*S: the matrix [H, B*S], not [H*B, S].
    B, S, H = 2, 64, 48
    xt = _source(H, B * S, seed=15, span=(-4, 8), outlier=20.0)  # the source, transposed
    amax = xt.abs().max().reshape(1)
    n = NVFP4Tensor.to_nvfp4(xt, 16, per_tensor_scale=per_tensor_amax_to_scale(amax[0]))
    te = types.SimpleNamespace(  # a FAKE TE NVFP4Tensor: columnwise only
        _rowwise_data=None, _rowwise_scale_inv=None, _amax_rowwise=None,
        _columnwise_data=n.qdata.reshape(H, B, S // 2), _amax_columnwise=amax,
        _columnwise_scale_inv=_padded(n.scale, _up(H, 128), _up(B * S // 16, 4)),
        _with_gemm_swizzled_scales=False)
    _compare(gnmr.block_stats(te, source=xt.reshape(H, B, S)), _nv_reference(n, xt))


@needs_torchao
def test_te_float8_blockwise_fake():
    M, K = 200, 300  # partial 128x128 blocks at both ends
    x = _source(M, 320, seed=13)[:, :K].contiguous()
    gm, gk = -(-M // 128), -(-K // 128)
    tiles = torch.nn.functional.pad(x, (0, gk * 128 - K, 0, gm * 128 - M))
    tiles = tiles.reshape(gm, 128, gk, 128)
    s = (tiles.abs().amax((1, 3)) / 448).clamp(min=2.0**-120)  # fp32, not powers of two
    codes = (tiles / s[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    codes = codes.reshape(gm * 128, gk * 128)[:M, :K].contiguous()
    scale_inv = torch.full((gm, _up(gk, 4)), float("nan"))
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
    te._is_2D_scaled = False
    with pytest.raises(ValueError, match="1x128 blocks .* transposed"):
        gnmr.block_stats(te)


@needs_torchao
def test_torchao_layouts_refused():
    x = _source(64, 64, seed=14)
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
