"""The backward channel (``Monitor.observe_backward``).

A backend's backward quantizer stores the gradient it hands to a unit's
dgrad / wgrad GEMMs (fp8 E5M2 codes with a scale_inv, or a block-scaled
tensor); a fault there (a stale or desynchronised scale) leaves the forward
pass healthy and raises the gradient of every unit upstream with the
root's, so the gradient rules cannot tell the root from its neighbours.
Handed over here, the quantized gradient's statistics (sum of squares,
saturated and zero elements) travel with the step's report, and the
controller's backward rules judge them against the unit's own history
(docs/controller.md, "Backward channel").

Call it from the quantizer's backward (e.g. a custom autograd Function's
``backward``), on the training thread, between ``before_forward`` and
``after_backward`` of the step. Host tensors only for now: a CUDA tensor
is refused (ValueError, a warning unless ``strict``).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Sequence, Union

import torch as _torch

from gnmr import _dtype_error, _dtype_name, _gnmr
from gnmr import blocks as _blocks
from gnmr._forward import ForwardTensor


class BackwardMixin:
    """``observe_backward``; needs ``_units``, ``client``, ``_fail``."""

    def observe_backward(self, unit: str, tensors: Union[Any, Sequence[Any]]) -> None:
        """Observes unit ``unit``'s quantized gradient: a torch.Tensor (an
        fp8 tensor counts saturation at its format's maximum), a
        ``ForwardTensor`` (``saturation_magnitude``, ``scale_inv``), a
        block-scaled tensor, or a sequence of them. Calls of one step add
        up. An unknown unit is a KeyError; a tensor the client cannot read
        is reported as any client error (a warning, raised with strict)."""
        by_name: Dict[str, int] = self.__dict__.get("_backward_units")
        if by_name is None:
            by_name = self._backward_units = {u.name: u.handle for u in self._units}
        handle = by_name.get(unit)
        if handle is None:
            raise KeyError(f"gnmr.torch: observe_backward: no unit named {unit!r}")
        if not self._started:
            return  # as the forward hooks: nothing before start
        items = tensors if isinstance(tensors, (list, tuple)) else (tensors,)
        try:
            refs, blocks, keep = [], [], []
            for item in items:
                t = item.tensor if isinstance(item, ForwardTensor) else item
                if type(t) is not _torch.Tensor and _blocks.is_block_scaled(t):
                    d = _blocks.describe(t)
                    keep.append(d)
                    blocks.append(d.tensor)
                    continue
                refs.append(_host_ref(unit, item, keep))
            if refs:
                self.client.observe_backward(handle, refs)
            if blocks:
                self.client.observe_backward_blocks(handle, blocks)
        except (_gnmr.Error, ValueError, NotImplementedError) as e:
            self._fail(f"backward tensors of unit '{unit}'", e)


def _host_ref(unit: str, item: Any, keep: list) -> "_gnmr.TensorRef":
    """The TensorRef of one host item; `keep` holds any contiguous copy
    alive until the client's call returns."""
    if isinstance(item, ForwardTensor):
        t, sat, scale_inv = item.tensor, item.saturation_magnitude, item.scale_inv
        if item.source is not None:
            raise ValueError(f"unit '{unit}': the backward channel takes no source "
                             "(it carries no source figures)")
    elif isinstance(item, _torch.Tensor):
        t, scale_inv = item, 1.0
        sat = math.inf if (_dtype_name(item.dtype) or "").startswith("fp8") else 0.0
    else:
        raise ValueError(f"observe_backward got a {type(item).__name__}; expected "
                         "torch.Tensor or gnmr.torch.ForwardTensor items")
    if not t.is_cpu:
        raise ValueError(f"unit '{unit}': backward tensor on {t.device}: the backward "
                         "channel reads host tensors only for now")
    if not t.is_contiguous():
        t = t.contiguous()
    keep.append(t)
    dtype = _dtype_name(t.dtype)
    if dtype is None:
        raise _dtype_error(t.dtype)
    return _gnmr.TensorRef(t.data_ptr(), t.numel(), dtype, -1, float(scale_inv), 0, float(sat))
