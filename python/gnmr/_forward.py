"""Forward tensors for the forward channel (``Monitor(..., forward_tensors=...)``).

A forward hook on every module of every unit asks ``forward_tensors(name,
module, inputs, output)`` for the tensors to observe: best the quantized
input of the module's low-precision path as the backend stores it (fp8
codes with their scale_inv), else its output activation. Their statistics
(sum of squares, amax, saturated and zero elements) are computed at once by
``Client.observe_forward`` and travel with the step's gradient report, so
the controller sees the quantizer misbehave at the unit that owns it
(docs/controller.md, "Forward channel").

Hooks observe only forward passes that build a graph
(``torch.is_grad_enabled()``): evaluation under ``torch.no_grad()`` leaves
the next training step's statistics alone. A module run several times in a
step (shared weights, micro-batches) adds up.

Block-scaled tensors (torchao's ``MXTensor`` / ``NVFP4Tensor``, Transformer
Engine's MXFP8, 1x128 / 128x128 FP8 and NVFP4 tensors, or a
``gnmr.blocks.describe`` result), as items or as a ForwardTensor's
``tensor``, are read in place by ``Client.observe_forward_blocks``: their
dequantized statistics join the unit's forward row and their block figures
its block columns (docs/statistics.md, "Block columns"). Host memory only
for now: a CUDA one turns the forward channel off with a warning.

CUDA tensors (on the Monitor's device) are read by the client's GPU kernels,
enqueued on the current stream at the hook: no host synchronisation, and
the tensor need not outlive the hook (the caching allocator reuses its
memory only after the work queued on that stream). A CUDA tensor in a
Monitor without CUDA units, or on another device, turns the forward
channel off with a warning (raised with ``strict``).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Callable, List, Optional, Sequence, Union

import torch as _torch

from gnmr import _dtype_error, _dtype_name, _gnmr
from gnmr import blocks as _blocks


@dataclasses.dataclass
class ForwardTensor:
    """A forward tensor with how to read it.

    ``saturation_magnitude``: 0 counts no saturation; ``math.inf`` counts
    elements at the format's largest finite magnitude (fp8 codes: 448 for
    e4m3fn, 57344 for e5m2); a finite m > 0 counts |x| >= m, for
    fake-quantized codes held in a wider dtype (e.g. an fp32 tensor of
    values already rounded to E4M3, m = 448 * scale). ``scale_inv``: fp8
    only, the real value is stored * scale_inv; a one-element float32
    tensor on the tensor's device is read by the kernels when they run (a
    backend's scale_inv buffer: no host synchronisation; it must stay
    alive and keep its address, as a backend's does). A block-scaled
    ``tensor`` carries its own scales and counts codes at its element
    format's maximum: both fields must keep their defaults. ``source``
    (block-scaled tensors only): the host tensor the codes were quantized
    from, in their storage order, read in place; it adds the source figures
    (underflow, relative error) that the ``tau_relative_error`` rule reads
    (docs/statistics.md, "Source columns").
    """

    tensor: Any  # a torch.Tensor, or a block-scaled tensor (module doc)
    saturation_magnitude: float = 0.0
    scale_inv: Union[float, _torch.Tensor] = 1.0
    source: Optional[_torch.Tensor] = None


ForwardItem = Union[_torch.Tensor, ForwardTensor]
ForwardTensorsFn = Callable[[str, _torch.nn.Module, tuple, Any], Optional[Sequence[ForwardItem]]]


def output_activation(name: str, module: _torch.nn.Module, inputs: tuple,
                      output: Any) -> List[ForwardItem]:
    """A ``forward_tensors`` for backends without quantizer access: the
    module's output activation (no saturation counting)."""
    return [output] if isinstance(output, _torch.Tensor) else []


def _eager(fn):
    """``fn`` run outside torch.compile's graphs: the hook hands data
    pointers to the client, which Dynamo cannot trace. Marked, the hook is
    one clean graph break per hooked module (its tensors leave the graph as
    outputs) instead of a failed trace into it; docs/integrations.md,
    "torch.compile". PyTorch 1.13 has no torch.compiler: fn itself."""
    disable = getattr(getattr(_torch, "compiler", None), "disable", None)
    return disable(fn) if disable is not None else fn


def _compiling() -> bool:
    """True while Dynamo traces (a constant in its graph); False in eager
    mode, which then skips the disable wrapper's cost."""
    is_compiling = getattr(getattr(_torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling is not None and is_compiling())


class ForwardHooks:
    """The forward hooks of one Monitor; ``on_error(what, exc)`` handles a
    failure (the Monitor warns, counts, or raises with strict)."""

    def __init__(self, client: _gnmr.Client, units: list, fn: ForwardTensorsFn,
                 on_error: Callable[[str, Exception], None], strict: bool,
                 cuda_device: Optional[_torch.device] = None):
        self._client = client
        self._cuda_device = cuda_device  # the Monitor's CUDA units' device, if any
        self._fn = fn
        self._on_error = on_error
        self._strict = strict
        self.enabled = False  # until the client has started
        self.off_reason = ""
        self._observe_eager = _eager(self._observe)
        self._handles = []
        for u in units:
            for module_name, module in u.modules:
                self._handles.append(module.register_forward_hook(
                    self._make_hook(u.handle, u.name, module_name)))

    def _make_hook(self, handle: int, unit_name: str, module_name: str):
        def hook(module, inputs, output):
            if not self.enabled or not _torch.is_grad_enabled():
                return
            try:
                observe = self._observe_eager if _compiling() else self._observe
                observe(handle, unit_name, module_name, module, inputs, output)
            except (_gnmr.Error, ValueError) as e:
                self._on_error(f"forward tensors of unit '{unit_name}'", e)
        return hook

    def _observe(self, handle, unit_name, module_name, module, inputs, output) -> None:
        items = self._fn(module_name, module, inputs, output)
        if items is None:
            return
        if isinstance(items, (_torch.Tensor, ForwardTensor, _blocks.BlockRef)):
            items = (items,)  # one item, not in a sequence
        elif not isinstance(items, (list, tuple)):
            items = tuple(items)  # any other iterable, e.g. a generator
        if not items:
            return
        if any(type(i) is not _torch.Tensor for i in items):  # skipped for plain tensors
            items = self._observe_blocks(handle, unit_name, items)
            if not items:
                return
        # Runs for every unit in every forward pass, right after the module's
        # own work has pushed the interpreter out of the caches: as few Python
        # operations as will do. One tensor (the common case) goes as plain
        # numbers, without a TensorRef object; several as TensorRefs in one
        # call (their statistics gathered together).
        if len(items) == 1:
            a = self._args(unit_name, items[0])
            if a is not None:
                self._client.observe_forward_tensor(handle, *a[1:])
            return
        args = []
        for item in items:
            a = self._args(unit_name, item)
            if a is None:
                return
            args.append(a)  # a[0]: the tensor (a contiguous copy) alive until the call returns
        self._client.observe_forward(
            handle, [_gnmr.TensorRef(p, n, d, dev, si, sip, sat)
                     for _, p, n, d, si, sat, dev, _s, sip in args], args[0][7])

    def _observe_blocks(self, handle, unit_name, items) -> list:
        """Observes the block-scaled items at once; returns the others."""
        plain, refs = [], []
        for item in items:
            t = item.tensor if isinstance(item, ForwardTensor) else item
            if type(t) is _torch.Tensor or not _blocks.is_block_scaled(t):
                if isinstance(item, ForwardTensor) and item.source is not None:
                    raise ValueError(f"unit '{unit_name}': a ForwardTensor's source is for "
                                     "block-scaled tensors (their source figures); this one "
                                     f"is a {type(t).__name__}")
                plain.append(item)
                continue
            if isinstance(item, ForwardTensor) and (item.saturation_magnitude != 0.0
                                                    or not isinstance(item.scale_inv, float)
                                                    or item.scale_inv != 1.0):
                raise ValueError(f"unit '{unit_name}': a block-scaled ForwardTensor carries its "
                                 "own scales and saturation: leave saturation_magnitude and "
                                 "scale_inv at their defaults")
            try:
                source = item.source if isinstance(item, ForwardTensor) else None
                if source is not None and isinstance(t, _blocks.BlockRef):
                    raise ValueError(f"unit '{unit_name}': this ForwardTensor's tensor is a "
                                     "gnmr.blocks.describe descriptor: give the source to "
                                     "describe(..., source=) instead")
                refs.append(_blocks.describe(t, source=source) if source is not None
                            else _blocks.describe(t))
            except NotImplementedError as e:  # a CUDA tensor: a set-up the channel cannot serve
                self.turn_off(f"unit '{unit_name}': {e}; the forward channel is off for this "
                              "Monitor (gradient statistics continue)")
                return []
        if refs:
            # refs keep their tensors alive until the call returns
            self._client.observe_forward_blocks(handle, [r.tensor for r in refs])
        return plain

    def _args(self, unit_name, item):
        """(tensor, data_ptr, numel, dtype, scale_inv, saturation, device,
        stream, scale_inv_ptr) of one forward item, or None when the forward
        channel was just turned off."""
        if isinstance(item, ForwardTensor):
            t, sat, scale_inv = item.tensor, item.saturation_magnitude, item.scale_inv
        elif isinstance(item, _torch.Tensor):
            t, scale_inv = item, 1.0
            sat = math.inf if (_dtype_name(item.dtype) or "").startswith("fp8") else 0.0
        else:
            raise ValueError(f"forward_tensors returned a {type(item).__name__}; expected "
                             "torch.Tensor or gnmr.torch.ForwardTensor items")
        device, stream, scale_inv_ptr = -1, None, 0
        if not t.is_cpu:
            if t.device != self._cuda_device:
                where = (f"this Monitor's CUDA units are on {self._cuda_device}"
                         if self._cuda_device is not None else "this Monitor has no CUDA units")
                self.turn_off(f"unit '{unit_name}': forward tensor on {t.device}, but {where}; "
                              "the forward channel is off for this Monitor (gradient "
                              "statistics continue)")
                return None
            device = t.device.index
            stream = _torch.cuda.current_stream(t.device).cuda_stream
        if isinstance(scale_inv, _torch.Tensor):
            if t.is_cpu or scale_inv.is_cpu:
                scale_inv = float(scale_inv)  # no device involved: nothing to wait for
            elif (scale_inv.device != t.device or scale_inv.dtype != _torch.float32
                  or scale_inv.numel() != 1):
                raise ValueError(f"unit '{unit_name}': a tensor scale_inv must be one float32 "
                                 f"element on {t.device}")
            else:
                scale_inv_ptr, scale_inv = scale_inv.data_ptr(), 1.0
        if not t.is_contiguous():
            t = t.contiguous()  # a copy, kept by the caller until the call returns
        dtype = _dtype_name(t.dtype)
        if dtype is None:
            raise _dtype_error(t.dtype)
        return (t, t.data_ptr(), t.numel(), dtype, float(scale_inv), float(sat), device, stream,
                scale_inv_ptr)

    def turn_off(self, reason: str) -> None:
        """Stops observing forward tensors, loudly (a set-up problem)."""
        self.enabled = False
        self.off_reason = reason
        self.remove()
        if self._strict:
            raise _gnmr.Error("gnmr.torch: " + reason)
        warnings.warn("gnmr.torch: " + reason, RuntimeWarning, stacklevel=5)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
