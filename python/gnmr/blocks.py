"""Statistics of block-scaled tensors (MXFP8, MXFP4, NVFP4, FP8 with
128x128 scales) read in place: ``gnmr.block_stats(x)``.

``x`` is a quantized tensor as a library stores it, recognised by its
fields (no import of the library):

- torchao ``MXTensor`` (``qdata``, ``scale``, ``elem_dtype``,
  ``block_size`` 32, ``is_swizzled_scales``): e4m3, e5m2 and fp4;
- torchao ``NVFP4Tensor`` (``qdata``, ``scale``, ``per_tensor_scale``,
  ``block_size`` 16, ``is_swizzled_scales``);
- Transformer Engine's ``MXFP8Tensor``, ``Float8BlockwiseQTensor`` (1x128
  and 128x128) and ``NVFP4Tensor`` and their ``*Storage`` classes (``_rowwise_data``,
  ``_rowwise_scale_inv``, ``_columnwise_*``, ...; ``usage`` picks the copy);
- or plain tensors: ``gnmr.block_stats(codes, scales, format=...)``;
- or a list of these (one unit: the sums in the canonical order across
  them), or descriptors from ``describe``.

Nothing is copied or dequantized in Python: the C++ statistics
(``gnmr::cpu::ComputeBlockStats``) read the tensors' memory, which must be
host memory (CUDA tensors raise NotImplementedError: that path is not wired
to Python yet). A layout it cannot read raises ValueError naming it and
what is supported. The result is a dict of every ``BlockStats`` field
(docs/statistics.md, "Block-scaled formats").

``source``: the high-precision tensor the codes were quantized from, in
the same element order as the stored codes (for TE's transposed columnwise
copies: the transpose, made contiguous); adds ``underflow``,
``error_sumsq`` and ``source_sumsq``.
"""
from __future__ import annotations

import dataclasses
import math
import struct
from typing import Any, Optional, Tuple

from gnmr import _gnmr

FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp4", "nvfp4", "fp8_block")
_BLOCK = {"mxfp8_e4m3": 32, "mxfp8_e5m2": 32, "mxfp4": 32, "nvfp4": 16, "fp8_block": 128}
_FP4 = ("mxfp4", "nvfp4")
# Code and scale dtypes by format, as str(torch.dtype): names, not the
# dtype objects, so that this module imports on a torch without them (1.13).
_CODE_DTYPES = {
    "mxfp8_e4m3": ("torch.float8_e4m3fn", "torch.uint8"),
    "mxfp8_e5m2": ("torch.float8_e5m2", "torch.uint8"),
    "mxfp4": ("torch.float4_e2m1fn_x2", "torch.uint8"),
    "nvfp4": ("torch.float4_e2m1fn_x2", "torch.uint8"),
    "fp8_block": ("torch.float8_e4m3fn", "torch.uint8"),
}
_SCALE_DTYPES = {
    "mxfp8_e4m3": ("torch.float8_e8m0fnu", "torch.uint8"),
    "mxfp8_e5m2": ("torch.float8_e8m0fnu", "torch.uint8"),
    "mxfp4": ("torch.float8_e8m0fnu", "torch.uint8"),
    "nvfp4": ("torch.float8_e4m3fn", "torch.uint8"),
    "fp8_block": ("torch.float32",),
}
_SOURCE_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}
_MX_ELEM = {"torch.float8_e4m3fn": "mxfp8_e4m3", "torch.float8_e5m2": "mxfp8_e5m2",
            "torch.float4_e2m1fn_x2": "mxfp4"}
_TE_FP8 = {"kFloat8E4M3": "mxfp8_e4m3", "kFloat8E5M2": "mxfp8_e5m2"}


@dataclasses.dataclass
class BlockRef:
    """A descriptor (``_gnmr.BlockTensor``) with the tensors whose memory
    it views, kept alive as long as it is."""

    tensor: Any
    keep: Tuple[Any, ...]


def _round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


def _rows_cols(t, what: str, first_down: bool = False) -> Tuple[int, int]:
    """A tensor as the [rows, cols] row-major matrix gnmr reads: its last
    dimension across, every other one down; with `first_down`, its first
    dimension down and the rest across (TE's transposed columnwise copies
    of [d1, ..., dn] are [dn, d1, ..., dn-1], blocked along d1 ... dn-1)."""
    if t.dim() == 0:
        raise ValueError(f"{what}: a 0-d tensor has no rows and columns")
    if first_down:
        return t.shape[0], math.prod(t.shape[1:])
    return math.prod(t.shape[:-1]), t.shape[-1]


def _host_contiguous(t, what: str, layout: str) -> None:
    if t.device.type == "cuda":
        raise NotImplementedError(f"{what}: block statistics of CUDA tensors are not wired to "
                                  "Python yet: pass host (CPU) tensors")
    if t.device.type != "cpu":
        raise ValueError(f"{what}: tensors on {t.device} cannot be read (host memory only)")
    if not t.is_contiguous():
        raise ValueError(
            f"{what}: {layout} is not contiguous (a transposed or strided view, strides "
            f"{tuple(t.stride())}); supported: contiguous row-major tensors, as quantized")


def _check_dtype(t, allowed, what: str, role: str) -> None:
    if str(t.dtype) not in allowed:
        raise ValueError(f"{what}: {role} dtype {t.dtype} is not supported (supported: "
                         f"{', '.join(a.replace('torch.', '') for a in allowed)})")


def _build(fmt: str, layout: str, scale_layout: str, data, scales, what: str, *,
           global_scale: float = 1.0, source=None, keep=(),
           first_down: bool = False) -> BlockRef:
    """The descriptor of codes `data` and `scales` (torch tensors), checking
    in Python only what the C++ check cannot see: devices, strides, dtypes
    and the scale tensor's extent."""
    desc = f"{what} ({fmt} {layout}, {scale_layout} scales)"
    _host_contiguous(data, desc, "the data")
    _host_contiguous(scales, desc, "the scale tensor")
    _check_dtype(data, _CODE_DTYPES[fmt], desc, "code")
    _check_dtype(scales, _SCALE_DTYPES[fmt], desc, "scale")
    rows, cols = _rows_cols(data, desc, first_down)
    if fmt in _FP4:
        cols *= 2  # two codes per byte, element 2k in the low nibble
    if scale_layout == "swizzled":
        # Stored as 32x16 tiles by torchao, [Rpad, Cpad] by TE: the same
        # bytes. gnmr wants the padded K-major grid, whatever the shape.
        b = _BLOCK[fmt]
        r, c = (cols, -(-rows // b)) if layout == "columnwise" else (rows, -(-cols // b))
        scale_rows, scale_cols = _round_up(r, 128), _round_up(c, 4)
        if scales.numel() != scale_rows * scale_cols:
            raise ValueError(
                f"{desc}: swizzled scales hold {scales.numel()} entries, the padded grid "
                f"[{scale_rows}, {scale_cols}] of a [{rows}, {cols}] tensor needs "
                f"{scale_rows * scale_cols}")
    else:
        scale_rows, scale_cols = _rows_cols(scales, desc)
    src_ptr, src_dtype = 0, "fp32"
    if source is not None:
        _host_contiguous(source, desc, "the source")
        if str(source.dtype) not in _SOURCE_DTYPES:
            raise ValueError(f"{desc}: source dtype {source.dtype} is not supported "
                             "(supported: float32, bfloat16, float16)")
        if _rows_cols(source, desc, first_down) != (rows, cols):
            raise ValueError(
                f"{desc}: source shape {tuple(source.shape)} is not the codes' [{rows}, {cols}] "
                "in storage order (a transposed copy needs its source transposed too)")
        src_ptr, src_dtype = source.data_ptr(), _SOURCE_DTYPES[str(source.dtype)]
    t = _gnmr.BlockTensor(
        format=fmt, layout=layout, scale_layout=scale_layout, data_ptr=data.data_ptr(),
        rows=rows, cols=cols, scales_ptr=scales.data_ptr(), scale_rows=scale_rows,
        scale_cols=scale_cols, global_scale=float(global_scale), source_ptr=src_ptr,
        source_dtype=src_dtype)
    return BlockRef(t, (data, scales, source) + tuple(keep))


def _torchao_mx(x, source) -> BlockRef:
    what = "torchao MXTensor"
    fmt = _MX_ELEM.get(str(x.elem_dtype))
    if fmt is None:
        raise ValueError(f"{what}: element dtype {x.elem_dtype} is not supported (supported: "
                         "float8_e4m3fn, float8_e5m2, float4_e2m1fn_x2)")
    if x.block_size != 32:
        raise ValueError(f"{what}: block_size {x.block_size} is not supported (supported: 32, "
                         "the OCP MX block)")
    layout = "swizzled" if getattr(x, "is_swizzled_scales", False) else "compact"
    return _build(fmt, "rowwise", layout, x.qdata, x.scale, what, source=source, keep=(x,))


def _torchao_nvfp4(x, source) -> BlockRef:
    what = "torchao NVFP4Tensor"
    if x.block_size != 16:
        raise ValueError(f"{what}: block_size {x.block_size} is not supported (supported: 16)")
    g, pts = 1.0, x.per_tensor_scale
    if pts is not None:
        if pts.numel() != 1:
            raise ValueError(f"{what}: a per-expert per_tensor_scale {tuple(pts.shape)} is not "
                             "supported (supported: none, or one scalar per tensor)")
        _host_contiguous(pts, what, "per_tensor_scale")
        g = float(pts.reshape(()))
    layout = "swizzled" if getattr(x, "is_swizzled_scales", False) else "compact"
    return _build("nvfp4", "rowwise", layout, x.qdata, x.scale, what, global_scale=g,
                  source=source, keep=(x,))


def _te_usage(x, usage: Optional[str], what: str) -> str:
    if usage is None:
        usage = "rowwise" if getattr(x, "_rowwise_data", None) is not None else "columnwise"
    if usage not in ("rowwise", "columnwise"):
        raise ValueError(f"{what}: usage must be 'rowwise' or 'columnwise', not {usage!r}")
    if getattr(x, f"_{usage}_data", None) is None:
        raise ValueError(f"{what}: it holds no {usage} data")
    return usage


def _te_dtype_name(x) -> str:
    d = getattr(x, "_fp8_dtype", None)
    return getattr(d, "name", str(d).rsplit(".", 1)[-1])


def _te_mxfp8(x, usage, source) -> BlockRef:
    what = "TE MXFP8Tensor"
    usage = _te_usage(x, usage, what)
    fmt = _TE_FP8.get(_te_dtype_name(x))
    if fmt is None:
        raise ValueError(f"{what}: _fp8_dtype {x._fp8_dtype} is not supported (supported: "
                         "kFloat8E4M3, kFloat8E5M2)")
    # Columnwise data is stored untransposed with 32x1 blocks; both scale
    # tensors are padded ([128, 4] / [4, 128] multiples): the padding is
    # the compact layout's row stride, or part of the swizzled grid.
    layout = "swizzled" if getattr(x, "_with_gemm_swizzled_scales", False) else "compact"
    return _build(fmt, usage, layout, getattr(x, f"_{usage}_data"),
                  getattr(x, f"_{usage}_scale_inv"), what, source=source, keep=(x,))


def _te_blockwise(x, usage, source) -> BlockRef:
    what = "TE Float8BlockwiseQTensor"
    usage = _te_usage(x, usage, what)
    if _te_dtype_name(x) != "kFloat8E4M3":
        raise ValueError(f"{what}: _fp8_dtype {getattr(x, '_fp8_dtype', None)} is not "
                         "supported (supported: kFloat8E4M3)")
    # 1x128: TE keeps the scales M-major, [ceil(K/128), roundup(M, 4)] (the
    # transpose of the block grid, padded): compact_transposed. 128x128:
    # [ceil(M/128), roundup(ceil(K/128), 4)] row-major. Either of the stored
    # matrix (the columnwise copy is the transpose, stored as such).
    layout, scale_layout = (("square", "compact") if x._is_2D_scaled
                            else ("rowwise", "compact_transposed"))
    return _build("fp8_block", layout, scale_layout, getattr(x, f"_{usage}_data"),
                  getattr(x, f"_{usage}_scale_inv"), what, source=source, keep=(x,),
                  first_down=usage == "columnwise")


def _te_nvfp4(x, usage, source) -> BlockRef:
    what = "TE NVFP4Tensor"
    usage = _te_usage(x, usage, what)
    amax = getattr(x, f"_amax_{usage}", None)
    if getattr(x, "_row_scaled_nvfp4", False) or amax is None or amax.numel() != 1:
        raise ValueError(f"{what}: {usage} amax {None if amax is None else tuple(amax.shape)} "
                         "is not one per-tensor value (supported: one amax; row-scaled NVFP4 "
                         "has one global scale per row, which gnmr does not describe)")
    _host_contiguous(amax, what, f"_amax_{usage}")
    # TE decodes with amax / (6 * e4m3_max) (dequantize_nvfp4.cuh), in fp32.
    e4m3_max = float(getattr(x, "_nvfp4_e4m3_max", 448))
    g = struct.unpack("f", struct.pack("f", float(amax.reshape(())) / (6.0 * e4m3_max)))[0]
    # Both copies are rowwise 1x16 blocks of the stored matrix (columnwise:
    # the transpose); 16x16 weight quantization repeats a block's scale in
    # each of its 16 rows, so it reads as 1x16 blocks.
    layout = "swizzled" if getattr(x, "_with_gemm_swizzled_scales", False) else "compact"
    return _build("nvfp4", "rowwise", layout, getattr(x, f"_{usage}_data"),
                  getattr(x, f"_{usage}_scale_inv"), what, global_scale=g, source=source,
                  keep=(x,), first_down=usage == "columnwise")


def is_block_scaled(x) -> bool:
    """Whether ``describe(x)`` reads ``x`` by its fields: a ``BlockRef``, a
    torchao MXTensor / NVFP4Tensor or a TE block-scaled tensor (by the
    fields the module's doc lists; nothing is checked beyond them)."""
    if isinstance(x, BlockRef):
        return True
    if hasattr(x, "_rowwise_data") or hasattr(x, "_columnwise_data"):
        return True
    return (hasattr(x, "qdata") and hasattr(x, "scale")
            and (hasattr(x, "elem_dtype") or hasattr(x, "per_tensor_scale")))


def describe(x, scales=None, *, format: Optional[str] = None, layout: str = "rowwise",
             scale_layout: str = "compact", global_scale: float = 1.0, source=None,
             usage: Optional[str] = None) -> BlockRef:
    """The descriptor of one block-scaled tensor (see the module's doc).
    ``scales``, ``format``, ``layout``, ``scale_layout`` and
    ``global_scale`` are for plain tensors; ``usage`` ('rowwise' or
    'columnwise') for TE tensors holding both copies (default: rowwise)."""
    if isinstance(x, BlockRef):
        return x
    plain = scales is not None or format is not None
    if not plain:
        if (layout, scale_layout, global_scale) != ("rowwise", "compact", 1.0):
            raise ValueError("layout, scale_layout and global_scale describe plain codes (with "
                             "scales= and format=); a quantized tensor carries its own")
        if hasattr(x, "_rowwise_data") or hasattr(x, "_columnwise_data"):
            if hasattr(x, "_amax_rowwise") or hasattr(x, "_amax_columnwise"):
                return _te_nvfp4(x, usage, source)
            if hasattr(x, "_is_2D_scaled"):
                return _te_blockwise(x, usage, source)
            return _te_mxfp8(x, usage, source)
        if hasattr(x, "qdata") and hasattr(x, "scale"):
            if usage is not None:
                raise ValueError("usage applies to TE tensors only (torchao's are rowwise)")
            if hasattr(x, "elem_dtype"):
                return _torchao_mx(x, source)
            if hasattr(x, "per_tensor_scale"):
                return _torchao_nvfp4(x, source)
        raise ValueError(
            f"cannot read a {type(x).__name__} as a block-scaled tensor (supported: torchao "
            "MXTensor / NVFP4Tensor, TE MXFP8Tensor / Float8BlockwiseQTensor / NVFP4Tensor, or "
            "codes with scales= and format=)")
    if usage is not None:
        raise ValueError("usage applies to TE tensors only")
    if format not in FORMATS:
        raise ValueError(f"unknown block format {format!r} (supported: {', '.join(FORMATS)})")
    if scales is None:
        raise ValueError(f"{format}: scales= is required with plain codes")
    if layout not in ("rowwise", "columnwise", "square"):
        raise ValueError(f"unknown block layout {layout!r} (supported: rowwise, columnwise, "
                         "square)")
    if scale_layout not in ("compact", "swizzled", "compact_transposed"):
        raise ValueError(f"unknown scale layout {scale_layout!r} "
                         "(supported: compact, swizzled, compact_transposed)")
    return _build(format, layout, scale_layout, x, scales, "codes", global_scale=global_scale,
                  source=source)


def block_stats(x, scales=None, **kwargs) -> dict:
    """Statistics of one block-scaled tensor, or of a list of them taken as
    one unit (each item a quantized tensor or a ``describe`` result):
    a dict of every ``BlockStats`` field. Arguments as ``describe``."""
    if isinstance(x, (list, tuple)):
        if scales is not None or kwargs:
            raise ValueError("block_stats of a list takes no other arguments: describe() "
                             "each item instead")
        refs = [describe(item) for item in x]
    else:
        refs = [describe(x, scales, **kwargs)]
    return _gnmr.block_stats([r.tensor for r in refs])


stats = block_stats
