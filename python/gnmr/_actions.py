"""What ``Monitor.apply`` does to the gradients and the optimizer for each
entry of a plan (the actions of docs/controller.md): clip scales a unit's
``.grad`` (also a lag-0 promote's entry clip and a denied clip, which is a
one-step clip entry), skip sets it to ``None`` on
the first step in force, reset_state clears the unit's optimizer state on
the first step in force. Promotions are switched by the Monitor itself."""
from __future__ import annotations

from typing import Any, List, Optional

import torch as _torch

from gnmr import _gnmr


def carry_out(plan: _gnmr.Plan, units: List[Any], optimizer: Optional[_torch.optim.Optimizer],
              applied: Any) -> None:
    """Applies `plan`'s entries to `units` (gnmr._units.Unit); records what
    it did in `applied` (a gnmr.torch.AppliedPlan)."""
    A, E = _gnmr.Action, _gnmr.EntryTreatment
    for e in plan.entries:
        u = units[e.unit]
        first = e.first_step
        clip = e.action == A.CLIP or (e.action == A.PROMOTE and first and e.entry == E.CLIP)
        skip = first and (e.action == A.SKIP or (e.action == A.PROMOTE and e.entry == E.SKIP))
        if clip:
            scale = float(e.scale)
            if scale != 1.0:
                with _torch.no_grad():
                    for p in u.params:
                        if p.grad is not None:
                            p.grad.mul_(scale)
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
