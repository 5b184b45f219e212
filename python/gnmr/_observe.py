"""The observation half of a ``gnmr.torch.Monitor`` step: ``after_backward``
points every unit at its current gradient tensors (``.grad``, or
``main_grad`` as ``grad_attr`` says: gnmr/_grads.py) and observes the step.

Design notes
- A unit's TensorRefs are sent to the client only when a pointer or dtype
  changed. With ``zero_grad(set_to_none=True)`` (PyTorch's default) every
  step has new gradient tensors, so that is every step: the refs are built
  with as few Python operations as will do.
- A ``None`` gradient reads as zeros from one shared buffer per device
  (no allocation per step); a unit whose gradients are all ``None`` (its
  forward did not run, e.g. a MoE expert) is marked inactive for the step.
- CUDA units are observed on the current stream (the one backward ran
  on), without a host synchronisation.
- A ``main_grad`` (Megatron, Transformer Engine) keeps its storage from
  step to step, so its unit's refs are sent once.
- DTensor gradients (FSDP2) are read through their local shards
  (gnmr/_dtensor.py): a DTensor's own ``data_ptr()`` is 0. A rank's shard
  may be empty (uneven sharding): a ``None`` gradient of an empty shard
  still gets one (empty) ref, as every unit needs at least one tensor.
"""
from __future__ import annotations

from typing import List

import torch as _torch

from gnmr import _gnmr
from gnmr import tensor_ref as _tensor_ref
from gnmr._dtensor import local as _local
from gnmr._grads import unit_grads

_ZERO_CHUNK = 1 << 20  # elements of the shared zero buffer for None grads


class ObserveMixin:
    """Needs the Monitor's ``_units``, ``client``, ``_cuda_device``,
    ``_zeros``, ``_problems``, ``_fail``, ``_last_observed``,
    ``_grad_attr`` and ``_backward_hooks`` (None unless
    observe_during_backward)."""

    def _zero_refs(self, numel: int, device: _torch.device) -> List[_gnmr.TensorRef]:
        zeros = self._zeros.get(device)
        if zeros is None:
            zeros = self._zeros[device] = _torch.zeros(_ZERO_CHUNK, dtype=_torch.float32,
                                                       device=device)
        refs = []
        ordinal = -1 if device.type == "cpu" else device.index
        ptr = zeros.data_ptr()
        if numel == 0:  # one empty ref: the unit of an empty shard still has a tensor
            return [_gnmr.TensorRef(ptr, 0, "fp32", ordinal)]
        while numel > 0:
            n = min(numel, _ZERO_CHUNK)
            refs.append(_gnmr.TensorRef(ptr, n, "fp32", ordinal))
            numel -= n
        return refs

    def _refresh(self, u, keep: list, force: bool = False) -> None:
        """Points unit ``u`` at its current gradient tensors (only when a
        pointer changed, unless ``force``: set_tensors also drops a result
        the client stored for the unit); marks it inactive without any."""
        grads = unit_grads(u, self._grad_attr)
        if u.dtensor:
            grads = [None if g is None else _local(g) for g in grads]
        # Only tell the client when a pointer changed (saves the
        # per-tensor work where gradients are zeroed in place).
        key = tuple(None if g is None else (g.data_ptr(), g.dtype) for g in grads)
        if all(k is None for k in key):
            # Nothing to report (its forward did not run). Its
            # pointers still go to the zero buffer: a device launch
            # reads every unit.
            self.client.mark_inactive(u.handle)
        if (not force and key == u.last_key
                and all(g is None or g.is_contiguous() for g in grads)):
            return
        refs = []
        for p, g in zip(u.params, grads):
            if g is None:
                refs.extend(self._zero_refs(_local(p).numel(), p.device))
                continue
            if g.is_sparse:
                raise ValueError(f"unit '{u.name}': sparse gradients are not supported")
            # No detach(): the pointer needs none, and `keep` holds g.
            if not g.is_contiguous():
                g = g.contiguous()  # a copy, kept alive below
            keep.append(g)
            refs.append(_tensor_ref(g))
        self.client.set_tensors(u.handle, refs)
        u.last_key = key

    def _observe_unit_now(self, i: int) -> None:
        """A backward hook's work (gnmr/_overlap.py): unit i's gradients are
        final, so its statistics are computed now; a non-contiguous
        gradient's copy lives until then."""
        u = self._units[i]
        keep: list = []
        self._refresh(u, keep)
        self.client.observe_unit(u.handle)

    def after_backward(self, step: int) -> None:
        """Points every unit at its current gradient tensors and observes
        the step (statistics on this thread; the report is queued). With
        ``observe_during_backward``, units already observed by their hooks
        in this backward are not touched again."""
        hooks = self._backward_hooks
        observed = False
        try:
            keep = []
            for i, u in enumerate(self._units):
                if hooks is not None and hooks.done[i]:
                    continue  # the client holds its statistics of this backward
                self._refresh(u, keep, force=hooks is not None and hooks.stored[i])
            if self._cuda_device is None:
                self.client.observe(step)  # reads the grads now; `keep` held them alive
            else:  # launches on the stream; later work on it is ordered after the read
                stream = _torch.cuda.current_stream(self._cuda_device).cuda_stream
                self.client.observe(step, stream)
            observed = True
            self._last_observed = step
        except (_gnmr.Error, ValueError) as e:
            self._fail(f"observe step {step}", e)
        finally:
            if hooks is not None:
                hooks.end_step(observed)
        self._problems.report()
