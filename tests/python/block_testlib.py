"""Shared by the block-scaled statistics tests (test_block_stats*.py):
random sources, and the BlockStats figures computed in float64 torch from
torchao's own dequantization and its code and scale decoding, the
independent reference gnmr.block_stats is compared with."""
from __future__ import annotations

import zlib

import pytest
import torch

try:
    from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import get_fp_scale
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor
    from torchao.prototype.mx_formats.utils import from_blocked
    NO_TORCHAO = ""
except Exception as e:  # noqa: BLE001  (ImportError, or torchao refusing this torch)
    NO_TORCHAO = f"torchao's mx_formats cannot be imported ({type(e).__name__}: {e})"
if not NO_TORCHAO and not hasattr(torch, "float4_e2m1fn_x2"):
    NO_TORCHAO = f"torch {torch.__version__} lacks the float8/float4 dtypes (torch 2.x needed)"
needs_torchao = pytest.mark.skipif(bool(NO_TORCHAO), reason=NO_TORCHAO or "-")

MX_ELEMS = {"mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2",
            "mxfp4": "float4_e2m1fn_x2"}
MAX_CODE = {"mxfp8_e4m3": 448.0, "mxfp8_e5m2": 57344.0, "mxfp4": 6.0, "nvfp4": 6.0,
            "fp8_block": 448.0}


def random_source(rows: int, cols: int, seed: int, dtype=torch.float32, span=(-140, 20),
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


def figures(dq, codes, scales, block_size, clamp, x=None) -> dict:
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
        live = (xs != 0) & ~torch.isnan(xs)  # a NaN source is no lost value
        f.update(underflow=int(((xs != 0) & (dq == 0) & both).sum()),
                 error_sumsq=float(((xs - dq)[both] ** 2).sum()),
                 source_sumsq=float((xs[both] ** 2).sum()),
                 dead_blocks=int(((mag == 0).all(-1) & live.reshape(mag.shape).any(-1))
                                 .sum()))
    else:
        f["dead_blocks"] = int((mag == 0).all(-1).sum())
    return f


def compare(got: dict, want: dict) -> None:
    for k, v in want.items():
        if k in ("sumsq", "source_sumsq"):
            assert got[k] == pytest.approx(v, rel=1e-12, abs=0), k
        elif k == "error_sumsq":
            assert got[k] == pytest.approx(v, rel=1e-9, abs=0), k
        else:
            assert got[k] == v, k  # counts and amax: exact
    assert got["has_source"] == ("underflow" in want)


def seed_of(*key) -> int:
    return zlib.crc32(repr(key).encode())


def mx_reference(m, fmt, x, with_source: bool = True):
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
    return figures(dq, codes, s, 32, (fmt, (bits == 0) | (bits >= 254)),
                    x.reshape(rows, cols) if with_source else None)


def nv_reference(n, x):
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
    return figures(dq, codes, s, 16, ("nvfp4", clamp), x)


def padded(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """`t` in the top-left of a [rows, cols] uint8 tensor whose padding is
    0xFF (a NaN scale: read, it would show)."""
    out = torch.full((rows, cols), 0xFF, dtype=torch.uint8)
    out[:t.shape[0], :t.shape[1]] = t.view(torch.uint8)
    return out


def up(v: int, m: int) -> int:
    return (v + m - 1) // m * m
