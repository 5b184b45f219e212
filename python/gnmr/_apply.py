"""The plan half of a ``gnmr.torch.Monitor`` step: ``apply`` carries out the
plan in force (promotions, entry clips and skips, the same-step guard),
acks it and steps the optimizer; ``before_forward`` switches promoted units
early when the plan is already decided (lag >= 1).

Design notes
- Promotions are switched through the Monitor's ``promote_callback`` only
  for units whose state changes, in unit order, so a callback sees each
  entry into and exit from recovery once.
- The same-step guard's flag is agreed by all-reduce only for sharded units
  (replicas of whole units see identical gradients).
"""
from __future__ import annotations

from typing import Optional

import torch as _torch

from gnmr import _gnmr
from gnmr._actions import carry_out
from gnmr._step_info import AppliedPlan


class ApplyMixin:
    """Needs the Monitor's ``client``, ``_units``, ``_promoted``,
    ``_promote_callback``, ``_lag``, ``_last_observed``, ``_sharded``,
    ``_guard_group``, ``_cuda_device``, ``_compile_watch``, ``_misuse``,
    ``_fail`` and ``_step_applied``."""

    def _plan(self, step: int) -> Optional[_gnmr.Plan]:
        try:
            plan = self.client.plan_for(step)
        except (_gnmr.Error, ValueError) as e:
            self._fail(f"plan for step {step}", e)
            return None
        if plan.has_decision:
            self._lag = plan.apply_step - plan.observed_step
        return plan

    def _set_promotions(self, plan: Optional[_gnmr.Plan], applied: Optional[AppliedPlan]) -> None:
        want = set()
        if plan is not None:
            want = {e.unit for e in plan.entries if e.action == _gnmr.Action.PROMOTE}
        for i in sorted(want - self._promoted):
            u = self._units[i]
            for module_name, module in u.modules:
                self._promote_callback(module_name, module, True)
            if applied is not None:
                applied.newly_promoted.append(u.name)
        for i in sorted(self._promoted - want):
            u = self._units[i]
            for module_name, module in u.modules:
                self._promote_callback(module_name, module, False)
            if applied is not None:
                applied.demoted.append(u.name)
        if want != self._promoted:
            self._compile_watch.check()
        self._promoted = want
        if applied is not None:
            applied.promoted = [self._units[i].name for i in sorted(want)]

    def before_forward(self, step: int) -> None:
        """Switches promoted units before the forward pass of ``step``
        (lag >= 1: the plan of ``step`` is already decided). No-op with lag 0."""
        if self._lag == 0:
            return
        self._set_promotions(self._plan(step), None)

    def apply(self, step: int, optimizer: Optional[_torch.optim.Optimizer] = None, *,
              step_optimizer: bool = True) -> AppliedPlan:
        """Carries out the plan in force at ``step`` on the gradients and
        calls ``optimizer.step()`` unless the plan says ``global_skip`` (or
        ``step_optimizer`` is False); acks the plan. Returns what was done."""
        applied = AppliedPlan(step=step)
        if self._last_observed != step:
            self._misuse(f"gnmr.torch: apply({step}) before after_backward({step}): this step "
                         "has no statistics, so nothing protects it from a non-finite gradient")
        plan = self._plan(step)
        if plan is not None:
            applied.plan = plan
            applied.has_decision = plan.has_decision
            applied.miss_reason = "" if plan.has_decision else plan.miss_reason.name.lower()
            applied.digest = plan.digest
            applied.global_skip = plan.global_skip
            applied.nonfinite = self._agree_nonfinite(plan.nonfinite_observed)
            applied.skip_step = applied.global_skip or applied.nonfinite
            self._set_promotions(plan, applied)
            carry_out(plan, self._units, optimizer, applied)
            try:
                self.client.ack(plan, skip_step=applied.skip_step)
            except (_gnmr.Error, ValueError) as e:
                self._fail(f"ack step {step}", e)
        if optimizer is not None and step_optimizer and not applied.skip_step:
            optimizer.step()
            applied.optimizer_stepped = True
        self._step_applied(applied)
        return applied

    def _agree_nonfinite(self, local: bool) -> bool:
        """The same-step guard's flag, agreed by every rank holding shards of
        a sharded unit, or over an explicit ``guard_group`` (pipeline stages:
        each holds other units), with one all-reduce (MAX), as Megatron does
        for found_inf; replicas of whole units see identical gradients and
        need none."""
        dist = _torch.distributed
        agree = self._sharded or self._guard_group is not None
        if not (agree and dist.is_available() and dist.is_initialized()):
            return local
        flag = _torch.tensor([1.0 if local else 0.0],
                             device=self._cuda_device or _torch.device("cpu"))
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._guard_group)
        return bool(flag.item() > 0)
