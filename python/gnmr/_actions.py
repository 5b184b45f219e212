"""What ``Monitor.apply`` does to the gradients and the optimizer for each
entry of a plan (the actions of docs/controller.md): clip scales a unit's
``.grad`` (also a lag-0 promote's entry clip and a denied clip, which is a
one-step clip entry), skip sets it to ``None`` on
the first step in force, reset_state clears the unit's optimizer state on
the first step in force. Promotions are switched by the Monitor itself.
DTensor gradients (FSDP2) are scaled in their local shards: the same
result without DTensor's dispatch."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch as _torch

from gnmr import _gnmr
from gnmr._dtensor import local as _local


def clips(e: Any) -> bool:
    """Whether plan entry `e` scales its unit's gradient at this step."""
    A = _gnmr.Action
    return e.action == A.CLIP or (e.action == A.PROMOTE and e.first_step
                                  and e.entry == _gnmr.EntryTreatment.CLIP)


def carry_out(plan: _gnmr.Plan, units: List[Any], optimizer: Optional[_torch.optim.Optimizer],
              applied: Any, scales: Optional[Dict[int, float]] = None) -> None:
    """Applies `plan`'s entries to `units` (gnmr._units.Unit); records what
    it did in `applied` (a gnmr.torch.AppliedPlan). `scales`: clip factors
    that replace the plan's (sharded units, from their full norms)."""
    A, E = _gnmr.Action, _gnmr.EntryTreatment
    scales = scales or {}
    for e in plan.entries:
        u = units[e.unit]
        first = e.first_step
        skip = first and (e.action == A.SKIP or (e.action == A.PROMOTE and e.entry == E.SKIP))
        if clips(e):
            scale = float(scales.get(e.unit, e.scale))
            if scale != 1.0:
                with _torch.no_grad():
                    for p in u.params:
                        if p.grad is not None:
                            _local(p.grad).mul_(scale)
            applied.clipped[u.name] = scale
        if skip:
            for p in u.params:
                p.grad = None
            applied.skipped.append(u.name)
        if e.action == A.RESET_STATE and first:
            if optimizer is not None:
                for p in u.params:
                    optimizer.state.pop(p, None)
            applied.reset.append(u.name)
