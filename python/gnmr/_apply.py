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
- A clip of a sharded unit scales every shard by the same factor, from the
  full gradient's norm: the client's own per-rank norm only estimates it
  (sqrt(local sumsq * shard_count), wrong for uneven or empty shards), so
  the guard's all-reduce also sums the local sumsq of the units clipped
  at the step. It is one all-reduce per step whatever the plan says (a
  collective that only some ranks reach would hang), with one slot per
  sharded unit; that needs the same sharded units, in the same order, on
  every rank of the group (FSDP2, HSDP), checked by one all-reduce at the
  first apply. Otherwise (pipeline stages) the estimate stays.
"""
from __future__ import annotations

import hashlib
import math
from typing import Dict, Optional, Tuple

import torch as _torch

from gnmr import _gnmr
from gnmr._actions import carry_out, clips
from gnmr._step_info import AppliedPlan


class ApplyMixin:
    """Needs the Monitor's ``client``, ``_units``, ``_promoted``,
    ``_promote_callback``, ``_lag``, ``_last_observed``, ``_sharded``,
    ``_guard_group``, ``_shard_slots``, ``_cuda_device``, ``_compile_watch``,
    ``_misuse``, ``_fail``, ``_step_applied`` and ``_grad_attr``."""

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
            applied.nonfinite, scales = self._agree(plan)
            applied.skip_step = applied.global_skip or applied.nonfinite
            self._set_promotions(plan, applied)
            carry_out(plan, self._units, optimizer, applied, scales, self._grad_attr)
            try:
                self.client.ack(plan, skip_step=applied.skip_step)
            except (_gnmr.Error, ValueError) as e:
                self._fail(f"ack step {step}", e)
        if optimizer is not None and step_optimizer and not applied.skip_step:
            optimizer.step()
            applied.optimizer_stepped = True
        self._step_applied(applied)
        return applied

    def _agree(self, plan: _gnmr.Plan) -> Tuple[bool, Dict[int, float]]:
        """The same-step guard's flag, agreed by every rank holding shards of
        a sharded unit, or over an explicit ``guard_group`` (pipeline stages:
        each holds other units), with one all-reduce, as Megatron does for
        found_inf; replicas of whole units see identical gradients and need
        none. With it, the clip scales of sharded units from their full
        norms (unit index -> scale; see the module notes)."""
        local = plan.nonfinite_observed
        dist = _torch.distributed
        agree = self._sharded or self._guard_group is not None
        if not (agree and dist.is_available() and dist.is_initialized()):
            return local, {}
        slots = self._sum_slots()  # unit index -> slot, when aligned over the group
        v = [1.0 if local else 0.0] + [0.0] * len(slots)
        clipped = [e for e in plan.entries if e.unit in slots and clips(e)]
        for e in clipped:  # this rank's sumsq, from norm = sqrt(sumsq * shard_count)
            v[1 + slots[e.unit]] = e.norm * e.norm / self._units[e.unit].shard[1]
        flag = _torch.tensor(v, dtype=_torch.float64,
                             device=self._cuda_device or _torch.device("cpu"))
        dist.all_reduce(flag, op=dist.ReduceOp.SUM, group=self._guard_group)
        out = flag.tolist()
        scales = {}
        per_rank = 1.0 / dist.get_world_size(self._guard_group)
        for e in clipped:
            # Each shard is held by (group size / shard_count) replicas.
            sumsq = out[1 + slots[e.unit]] * self._units[e.unit].shard[1] * per_rank
            # A NaN/Inf in any shard: the guard skips the step anyway; the
            # strongest clip, as for an infinite norm, the same on every rank.
            scales[e.unit] = (_gnmr.clip_scale(e.ref_norm, math.sqrt(sumsq), e.clip_min_scale)
                              if math.isfinite(sumsq) else float(e.clip_min_scale))
        return out[0] > 0, scales

    def _sum_slots(self) -> Dict[int, int]:
        """Slots of the sharded units in the per-step all-reduce; empty
        unless every rank of the guard group has the same sharded units
        with the same shard counts, each count dividing the group size
        (one all-reduce, at the first call)."""
        if self._shard_slots is None:
            dist = _torch.distributed
            size = dist.get_world_size(self._guard_group)
            sharded = [(i, u) for i, u in enumerate(self._units) if u.shard[1] > 1]
            layout = repr([(u.name, u.shard[1]) for _, u in sharded]).encode()
            # 48 bits of a digest: exact in float64, so MAX can compare them.
            fp = float(int.from_bytes(hashlib.sha256(layout).digest()[:6], "big"))
            uneven = any(size % u.shard[1] != 0 for _, u in sharded)
            v = _torch.tensor([fp, -fp, 1.0 if uneven else 0.0], dtype=_torch.float64,
                              device=self._cuda_device or _torch.device("cpu"))
            dist.all_reduce(v, op=dist.ReduceOp.MAX, group=self._guard_group)
            hi, lo, any_uneven = v.tolist()
            aligned = bool(sharded) and hi == -lo == fp and any_uneven == 0.0
            self._shard_slots = {i: k for k, (i, _) in enumerate(sharded)} if aligned else {}
        return self._shard_slots
