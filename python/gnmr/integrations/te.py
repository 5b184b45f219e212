"""GNMR with NVIDIA Transformer Engine (FP8 through ``te.fp8_autocast`` /
``te.autocast``): the recipe of docs/recipes.md as code (docs/integrations.md,
"Transformer Engine"). **Not run here**: TE needs CUDA and is not installable
on the machines this project is tested on; its test skips saying so.

A TE module's FP8 is turned off by running its forward inside a nested
autocast with ``enabled=False``; ``PromotableTE`` wraps a TE module and does
that while promoted::

    from gnmr.integrations import te as gnmr_te
    gnmr_te.wrap_te_modules(model)                 # te.Linear & co. -> PromotableTE
    monitor = gnmr.torch.Monitor(model, target="local", job_id="run",
                                 **gnmr_te.monitor_kwargs())

Caveat: TE's delayed-scaling amax history of a module does not advance
while it is promoted. With ``fuse_wgrad_accumulation`` (Megatron) the
gradient is in ``param.main_grad``: the Monitor reads it there by default
(``grad_attr="auto"``; docs/integrations.md, "Megatron and Transformer
Engine: main_grad").
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import torch as _torch

import gnmr.torch as _gt

try:
    import transformer_engine.pytorch as te
except ImportError as e:  # the usual case off a CUDA machine
    raise ImportError("gnmr.integrations.te needs Transformer Engine "
                      f"(transformer_engine.pytorch): {e}") from e

__all__ = ["PromotableTE", "wrap_te_modules", "is_promotable", "monitor_kwargs"]

# The TE modules that cast to FP8 themselves (those with an FP8 GEMM).
_TE_TYPES: Tuple[type, ...] = tuple(
    t for t in (getattr(te, n, None) for n in ("Linear", "LayerNormLinear", "LayerNormMLP",
                                                "GroupedLinear"))
    if isinstance(t, type))


def _no_fp8():
    """The nested autocast that turns FP8 off (``te.autocast`` in TE >= 2.8,
    ``te.fp8_autocast`` before)."""
    auto = getattr(te, "autocast", None)
    if auto is not None:
        return auto(enabled=False)
    return te.fp8_autocast(enabled=False)


class PromotableTE(_torch.nn.Module):
    """Wraps a TE module (te.Linear, te.LayerNormMLP, ...); promoted, its
    forward runs without FP8 (``gnmr_promoted``, set by
    ``gnmr.torch.default_promote_callback``)."""

    def __init__(self, inner: _torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.gnmr_promoted = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.gnmr_promoted:
            with _no_fp8():
                return self.inner(*args, **kwargs)
        return self.inner(*args, **kwargs)


def wrap_te_modules(model: _torch.nn.Module) -> int:
    """Replaces every TE FP8 module in ``model`` by a ``PromotableTE``
    around it (in place); returns how many. The parameters stay the same
    objects (the inner module's), so an optimizer built before still holds
    them; their names gain ``.inner``."""
    n = 0
    for parent in list(model.modules()):
        if isinstance(parent, PromotableTE):
            continue
        for name, child in list(parent.named_children()):
            if isinstance(child, _TE_TYPES):
                setattr(parent, name, PromotableTE(child))
                n += 1
    return n


def is_promotable(name: str, module: _torch.nn.Module) -> bool:
    """A ``unit_filter``: every ``PromotableTE``."""
    return isinstance(module, PromotableTE)


def monitor_kwargs() -> Dict[str, Any]:
    return {"unit_filter": is_promotable, "promote_callback": _gt.default_promote_callback}
