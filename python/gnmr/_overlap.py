"""Overlap with backward (``Monitor(..., observe_during_backward=True)``).

A ``register_post_accumulate_grad_hook`` (PyTorch >= 2.1) on every
parameter of every host unit: when the last of a unit's parameters has its
gradient accumulated in this backward, the unit's statistics are computed
at once (``Client.observe_unit``) while backward goes on for the earlier
layers, and ``after_backward(step)`` only computes the units left (no hook
fired: no gradient, device units) and queues the report. The client
computes the same kernels on the same memory, so reports, norms and plans
are bit-identical to the after_backward path.

Rules that keep it so:
- A unit counts as observed only if every one of its parameters' hooks
  fired since its last observation; a hook of one of its parameters marks
  any earlier result stale. A unit not observed in the last backward is
  computed by after_backward, and a stale result in the client is dropped
  first (``set_tensors`` discards it).
- Gradient accumulation: every micro-batch's backward fires the hooks.
  Without a hint each micro-batch observes again and the last one counts
  (correct, N times the work); ``with monitor.accumulating():`` around the
  backward of every micro-batch but the last skips that work.
- Threads: PyTorch runs the hooks of CPU parameters on the thread that
  called backward. The client is single-threaded (its training thread), so
  a hook on any other thread than the one that built the Monitor or last
  called after_backward observes nothing and leaves the unit to
  after_backward (counted in ``off_thread``).
- CUDA units keep the old path: one launch of every device unit by
  after_backward on the current stream (a launch per unit is the GPU design
  still to measure); their parameters get no hook.
- The gradient must not change between its hook and after_backward: the
  Monitor refuses world_size > 1 and sharded units (DDP averages the
  gradients after the hooks, FSDP2 reduce-scatters them) and a ``main_grad``
  (filled by Megatron's or TE's own hooks and kernels), and a gradient
  edited in place after backward (e.g. GradScaler.unscale_ before
  after_backward) would not be seen.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable, Iterator, List, Set

import torch as _torch

from gnmr._grads import reads_main_grad

AVAILABLE = hasattr(_torch.Tensor, "register_post_accumulate_grad_hook")


class BackwardHooks:
    """Per-parameter hooks that observe a unit as soon as it is ready.

    ``observe(i)`` does the work for unit index i (the Monitor's: refresh
    the client's pointers, ``observe_unit``); ``fail(what, e)`` reports an
    error (raises with strict), so a failing hook never breaks backward
    otherwise."""

    def __init__(self, units, observe: Callable[[int], None],
                 fail: Callable[[str, Exception], None]):
        self._units = units
        self._observe = observe
        self._fail = fail
        n = len(units)
        self.done = [False] * n     # observed in this backward, nothing fired since
        self.stored = [False] * n   # the client holds a result for the next observe
        self._fired: List[Set[int]] = [set() for _ in range(n)]
        self.accumulating_now = False
        self.thread = threading.get_ident()
        self.enabled = False  # set by Monitor.start
        self.early = 0        # units observed by hooks since the last end_step
        self.last_early = 0   # ... in the last step
        self.off_thread = 0   # hooks that fired on another thread (left to after_backward)
        self._handles = []
        for i, u in enumerate(units):
            if any(p.device.type != "cpu" for p in u.params):
                continue  # device units: after_backward launches them all
            for j, p in enumerate(u.params):
                self._handles.append(
                    p.register_post_accumulate_grad_hook(functools.partial(self._ready, i, j)))

    def _ready(self, i: int, j: int, _param) -> None:
        self.done[i] = False  # its memory just changed: an earlier result is stale
        if not self.enabled or self.accumulating_now:
            return
        if threading.get_ident() != self.thread:
            self.off_thread += 1
            self._fired[i].clear()
            return
        fired = self._fired[i]
        fired.add(j)
        if len(fired) < len(self._units[i].params):
            return
        fired.clear()
        try:
            self._observe(i)
        except Exception as e:  # noqa: BLE001  (never into autograd, unless strict)
            self._fail(f"observe unit '{self._units[i].name}' during backward", e)
            return
        self.done[i] = True
        self.stored[i] = True
        self.early += 1

    def end_step(self, observed: bool) -> None:
        """After after_backward's observe: the client used (or, on failure,
        may still hold) the stored results."""
        n = len(self.done)
        self.done = [False] * n
        if observed:
            self.stored = [False] * n
        for f in self._fired:
            f.clear()
        self.last_early, self.early = self.early, 0
        self.thread = threading.get_ident()

    @contextlib.contextmanager
    def accumulating(self) -> Iterator[None]:
        prev = self.accumulating_now
        self.accumulating_now = True
        try:
            yield
        finally:
            self.accumulating_now = prev

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def setup(units, world_size: int, observe: Callable[[int], None],
          fail: Callable[[str, Exception], None], grad_attr: str = "auto"):
    """The hooks for ``observe_during_backward=True``, or None where this
    PyTorch has no post-accumulate-grad hooks (a warning; after_backward
    then observes every unit, as without the option). ValueError where the
    gradients change after their hooks (see the module docstring)."""
    if world_size > 1 or any(u.shard[1] > 1 or u.dtensor for u in units):
        raise ValueError(
            "gnmr.torch: observe_during_backward reads each gradient when its hook fires, "
            "before DDP's all-reduce or FSDP2's reduce-scatter has produced the gradient "
            "after_backward observes; it is not supported with world_size > 1 or sharded "
            "units (docs/integrations.md, \"Overlap with backward\")")
    if any(reads_main_grad(p, grad_attr) for u in units for p in u.params):
        raise ValueError(
            "gnmr.torch: observe_during_backward fires on .grad, but this Monitor reads "
            "main_grad (grad_attr), which the framework fills by its own hooks or fused "
            "kernels; pass observe_during_backward=False, or grad_attr='grad' where .grad "
            "is the gradient (docs/integrations.md, \"Megatron and Transformer Engine: "
            "main_grad\")")
    if not AVAILABLE:
        import warnings
        warnings.warn(
            f"gnmr.torch: observe_during_backward needs "
            f"torch.Tensor.register_post_accumulate_grad_hook (PyTorch >= 2.1; this is "
            f"{_torch.__version__}): after_backward observes every unit instead",
            RuntimeWarning, stacklevel=3)
        return None
    return BackwardHooks(units, observe, fail)


class OverlapMixin:
    """The Monitor's side of the option; needs ``_backward_hooks``."""

    @property
    def observe_during_backward(self) -> bool:
        """Whether units are observed by their gradient hooks as backward
        runs (the option given, and this PyTorch has the hooks)."""
        return self._backward_hooks is not None

    def accumulating(self):
        """Context manager around the backward of every micro-batch but the
        last (gradient accumulation): the hooks of ``observe_during_backward``
        then leave the units alone, so only the last micro-batch's backward
        computes statistics. Without it each micro-batch's backward observes
        again and the last one counts (the same result, more work). A no-op
        without ``observe_during_backward``."""
        if self._backward_hooks is None:
            return contextlib.nullcontext()
        return self._backward_hooks.accumulating()
