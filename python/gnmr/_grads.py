"""Where a ``gnmr.torch.Monitor`` finds a parameter's gradient, and how its
actions change it: the one rule for every read and write of a gradient in
gnmr.torch (``Monitor(..., grad_attr=...)``; docs/integrations.md,
"Megatron and Transformer Engine: main_grad").

Design notes
- ``grad_attr="auto"`` (the default) decides per parameter, at every read:
  a ``main_grad`` attribute that is a tensor wins, else ``.grad``. Megatron
  and Transformer Engine (``fuse_wgrad_accumulation``) accumulate the
  gradient into ``main_grad`` (an fp32 view into a contiguous bucket) and
  leave ``.grad`` None, or set it to a placeholder (Megatron's fused wgrad
  path hands autograd an uninitialised or zero tensor and marks
  ``grad_added_to_main_grad``). So where both are set, ``main_grad`` is the
  gradient the optimizer will use (Megatron copies it into the fp32 main
  parameter's ``.grad``); a trainer whose optimizer reads ``.grad`` although
  ``main_grad`` is set declares ``grad_attr="grad"``. A ``main_grad`` that is
  ``None`` is no gradient buffer: ``auto`` reads ``.grad``.
- ``"grad"`` reads only ``.grad``; ``"main_grad"`` only ``main_grad``, and
  a unit parameter without one is a ValueError naming the parameter and its
  unit (at construction, and at any later read).
- Actions act on the tensor that was observed: a clip scales it in place;
  a skip sets ``.grad`` to None (the optimizer then leaves the parameter
  and its moments alone) but zeroes ``main_grad`` in place: it is a view
  into the framework's bucket, which all-reduces, copies and re-zeroes that
  memory, so it must keep its storage. A zero ``main_grad`` is not a
  skipped update: the optimizer still steps, so momentum (Adam's moments)
  still moves the parameters and weight decay applies.
- DTensor gradients are changed in their local shards (gnmr/_dtensor.py).
"""
from __future__ import annotations

from typing import Any, List, Optional

import torch as _torch

from gnmr._dtensor import local as _local

MODES = ("auto", "grad", "main_grad")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"gnmr.torch.Monitor: grad_attr={mode!r}: expected one of "
                         f"{', '.join(repr(m) for m in MODES)}")
    return mode


def _main_grad(p: _torch.Tensor) -> Optional[_torch.Tensor]:
    g = getattr(p, "main_grad", None)
    return g if isinstance(g, _torch.Tensor) else None


def reads_main_grad(p: _torch.Tensor, mode: str) -> bool:
    """Whether ``mode`` reads parameter ``p``'s gradient from ``main_grad``
    (``"main_grad"`` always, ``"auto"`` where ``p`` has one now)."""
    return mode == "main_grad" or (mode == "auto" and _main_grad(p) is not None)


def _param_name(u: Any, p: _torch.Tensor) -> str:
    for module_name, module in u.modules:
        for name, q in module.named_parameters():
            if q is p:
                return f"{module_name}.{name}" if module_name else name
    return "?"


def _missing(u: Any, p: _torch.Tensor) -> ValueError:
    return ValueError(
        f"gnmr.torch.Monitor: grad_attr='main_grad', but parameter "
        f"'{_param_name(u, p)}' of unit '{u.name}' has no main_grad tensor (Megatron's "
        "DistributedDataParallel and Transformer Engine's fuse_wgrad_accumulation set "
        "one): build the Monitor after the framework has set main_grad, or use "
        "grad_attr='auto' (main_grad where a parameter has one, else .grad)")


def unit_grads(u: Any, mode: str) -> List[Optional[_torch.Tensor]]:
    """The gradients of unit ``u``'s parameters under ``mode`` (None where a
    parameter has none); ValueError naming the parameter where
    ``mode="main_grad"`` finds no ``main_grad``."""
    if mode == "grad":
        return [p.grad for p in u.params]
    out = []
    for p in u.params:
        g = _main_grad(p)
        if g is None:
            if mode == "main_grad":
                raise _missing(u, p)
            g = p.grad
        out.append(g)
    return out


def check_declared(units: List[Any], mode: str) -> None:
    """``mode="main_grad"``: ValueError for the first unit parameter without
    a ``main_grad`` tensor."""
    if mode == "main_grad":
        for u in units:
            unit_grads(u, mode)


def scale_(u: Any, mode: str, scale: float) -> None:
    """Clip: multiplies unit ``u``'s gradients by ``scale`` in place."""
    with _torch.no_grad():
        for g in unit_grads(u, mode):
            if g is not None:
                _local(g).mul_(scale)


def drop(u: Any, mode: str) -> None:
    """Skip: ``.grad`` set to None, ``main_grad`` zeroed in place (see the
    module notes)."""
    with _torch.no_grad():
        for p in u.params:
            if reads_main_grad(p, mode):
                g = _main_grad(p)
                if g is None:
                    raise _missing(u, p)
                _local(g).zero_()
            else:
                p.grad = None
