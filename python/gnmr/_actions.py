"""What ``Monitor.apply`` does to the gradients and the optimizer for each
entry of a plan (the actions of docs/controller.md): clip scales a unit's
gradient (also a lag-0 promote's entry clip and a denied clip, which is a
one-step clip entry), skip drops it on the first step in force (``.grad``
set to ``None``, ``main_grad`` zeroed in place), reset_state clears the
unit's optimizer state on the first step in force. Promotions are switched
by the Monitor itself. The gradient is the one the Monitor observed
(``grad_attr``; gnmr/_grads.py has the one rule). DTensor gradients (FSDP2)
are scaled in their local shards: the same result without DTensor's
dispatch."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch as _torch

from gnmr import _gnmr
from gnmr import _grads


def clips(e: Any) -> bool:
    """Whether plan entry `e` scales its unit's gradient at this step."""
    A = _gnmr.Action
    return e.action == A.CLIP or (e.action == A.PROMOTE and e.first_step
                                  and e.entry == _gnmr.EntryTreatment.CLIP)


def carry_out(plan: _gnmr.Plan, units: List[Any], optimizer: Optional[_torch.optim.Optimizer],
              applied: Any, scales: Optional[Dict[int, float]] = None,
              grad_attr: str = "auto") -> None:
    """Applies `plan`'s entries to `units` (gnmr._units.Unit); records what
    it did in `applied` (a gnmr.torch.AppliedPlan). `scales`: clip factors
    that replace the plan's (sharded units, from their full norms);
    `grad_attr`: where the gradients are (gnmr/_grads.py)."""
    A, E = _gnmr.Action, _gnmr.EntryTreatment
    scales = scales or {}
    for e in plan.entries:
        u = units[e.unit]
        first = e.first_step
        skip = first and (e.action == A.SKIP or (e.action == A.PROMOTE and e.entry == E.SKIP))
        if clips(e):
            scale = float(scales.get(e.unit, e.scale))
            if scale != 1.0:
                _grads.scale_(u, grad_attr, scale)
            applied.clipped[u.name] = scale
        if skip:
            _grads.drop(u, grad_attr)
            applied.skipped.append(u.name)
        if e.action == A.RESET_STATE and first:
            if optimizer is not None:
                for p in u.params:
                    optimizer.state.pop(p, None)
            applied.reset.append(u.name)
