"""What a trainer can log about one step: ``Monitor.last_step_info()`` and
the callbacks of ``Monitor.add_step_callback`` get a ``StepInfo``; its
``flat()`` is a dict of numbers for wandb, TensorBoard, MLflow & co.

Design notes
- Built on demand (``last_step_info()``, or once per step when a callback
  is registered), so a trainer that logs nothing pays nothing.
- Norms are the client's own: the statistics ``after_backward(step)``
  computed and reported (``Client.unit_norms``), before any clip, NaN where
  not known (a GPU unit whose results are not read yet). Nothing is
  recomputed from the gradients (which apply() may have clipped or dropped).
- Why a unit is in recovery (``trigger``, ``gnmr``, ``delta`` and the
  forward ratios) comes with the decision, local or from gnmrd: each
  recovery entry keeps the figures of the sample that admitted it (a denied
  clip: that denied it) for as long as it is in force (docs/controller.md,
  "Why a unit is in recovery"). A daemon too old to send them gives
  ``trigger == "none"`` and ``None`` figures, which ``flat()`` leaves out.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

from gnmr import _gnmr

# Miss reasons that count as a missed decision (gnmr::MissReason).
_MISSES = ("timeout", "disconnected", "not_received")
# UnitInfo's figures of why a unit is in recovery (flat(): <key>/<unit>).
_REASON_FIGURES = ("gnmr", "delta", "fwd_ratio", "saturation_ratio", "underflow_ratio")


@dataclasses.dataclass
class AppliedPlan:
    """What ``Monitor.apply`` did at one step (unit names)."""

    step: int
    has_decision: bool = False
    miss_reason: str = ""  # why there is no decision ("" when there is)
    digest: int = 0
    global_skip: bool = False  # the decision of this very step saw a non-finite (lag 0)
    nonfinite: bool = False  # the same-step guard: NaN/Inf at this step (any rank)
    skip_step: bool = False  # the optimizer step was not taken (global_skip or nonfinite)
    optimizer_stepped: bool = False
    promoted: List[str] = dataclasses.field(default_factory=list)  # in force at this step
    newly_promoted: List[str] = dataclasses.field(default_factory=list)
    demoted: List[str] = dataclasses.field(default_factory=list)
    clipped: Dict[str, float] = dataclasses.field(default_factory=dict)  # name -> scale
    skipped: List[str] = dataclasses.field(default_factory=list)
    reset: List[str] = dataclasses.field(default_factory=list)
    plan: Optional[_gnmr.Plan] = None


@dataclasses.dataclass
class UnitInfo:
    """A unit the plan of the step names (in recovery at the step)."""

    action: str  # "promote", "clip", "skip", "reset_state"
    since: int  # first step in force
    until: int  # first step no longer in force
    first_step: bool
    ref_norm: float  # the clip target
    norm: float  # this rank's norm at the step (NaN: not known)
    scale: float  # the clip factor (1 unless clipped)
    # Why it is in recovery: what admitted it ("gnmr", "delta", "nonfinite",
    # "forward", "saturation", "underflow", "block_saturation", "dead_blocks",
    # "scale_clamps", "relative_error", "backward", "backward_saturation",
    # "backward_underflow"; "none": the daemon does not say)
    # and that sample's figures, None when not said (see the module doc).
    trigger: str = "none"
    gnmr: Optional[float] = None  # GNMR, vs tau_gnmr
    delta: Optional[float] = None  # Delta-GNMR, vs tau_delta
    fwd_ratio: Optional[float] = None  # F: forward norm / its mean, vs tau_forward
    saturation_ratio: Optional[float] = None  # S, vs tau_saturation
    underflow_ratio: Optional[float] = None  # U, vs underflow_fraction
    # A budget denial clipped on this step only (denied: clip, lag 0); it
    # held no budget.
    denied_clip: bool = False


@dataclasses.dataclass
class StepInfo:
    """One step as the Monitor saw and handled it."""

    step: int
    has_decision: bool
    miss_reason: str  # "" with a decision, else why not (docs/safety.md)
    digest: int  # the plan digest, equal on every rank that applied the plan
    generation: int
    global_skip: bool  # the decision skipped the whole step (lag 0, a non-finite)
    nonfinite: bool  # the same-step guard saw a NaN/Inf (any rank)
    skip_step: bool  # the optimizer step was not taken for either reason
    optimizer_stepped: bool  # apply() called optimizer.step() (never with step_optimizer=False)
    norms: Dict[str, float]  # every unit's gradient norm at the step
    units: Dict[str, UnitInfo]  # the units the plan names
    promoted: List[str]
    clipped: Dict[str, float]
    skipped: List[str]
    reset: List[str]

    def flat(self, prefix: str = "gnmr/", norms: bool = True) -> Dict[str, float]:
        """Numbers only, one key per metric, e.g. ``gnmr/skip_step``,
        ``gnmr/in_recovery``, ``gnmr/norm/<unit>``, ``gnmr/scale/<unit>``.
        Unknown norms (NaN) are left out; so is the digest (a uint64)."""
        out: Dict[str, float] = {
            prefix + "has_decision": float(self.has_decision),
            prefix + "missed_decision": float(self.miss_reason in _MISSES),
            prefix + "global_skip": float(self.global_skip),
            prefix + "nonfinite": float(self.nonfinite),
            prefix + "skip_step": float(self.skip_step),
            prefix + "in_recovery": float(len(self.units)),
            prefix + "promoted": float(len(self.promoted)),
            prefix + "clipped": float(len(self.clipped)),
            prefix + "skipped_units": float(len(self.skipped)),
            prefix + "reset_units": float(len(self.reset)),
        }
        if norms:
            for name, v in self.norms.items():
                if not math.isnan(v):
                    out[f"{prefix}norm/{name}"] = v
        for name, scale in self.clipped.items():
            out[f"{prefix}scale/{name}"] = scale
        for name, u in self.units.items():
            for key in _REASON_FIGURES:
                v = getattr(u, key)
                if v is not None:
                    out[f"{prefix}{key}/{name}"] = v
        return out


def build(applied: Any, unit_names: List[str], norms: List[float]) -> StepInfo:
    """The StepInfo of a gnmr.torch.AppliedPlan; `norms` in unit order
    (``Client.unit_norms``; empty when unknown)."""
    plan: Optional[_gnmr.Plan] = applied.plan
    units: Dict[str, UnitInfo] = {}
    if plan is not None:
        for e in plan.entries:
            name = unit_names[e.unit]
            # The factor applied (a sharded unit's, from its full norm).
            scale = applied.clipped.get(name, e.scale)
            # A trigger of "none": the decision does not say why (an older
            # gnmrd), so its figures are not known either.
            said = e.trigger != "none"
            figures = {key: getattr(e, key) if said else None for key in _REASON_FIGURES}
            units[name] = UnitInfo(
                action=e.action.name.lower(), since=e.since, until=e.until,
                first_step=e.first_step, ref_norm=e.ref_norm, norm=e.norm, scale=scale,
                denied_clip=bool(e.denied_clip), trigger=e.trigger, **figures)
    if len(norms) != len(unit_names):
        norms = [math.nan] * len(unit_names)
    return StepInfo(
        step=applied.step, has_decision=applied.has_decision, miss_reason=applied.miss_reason,
        digest=applied.digest, generation=plan.generation if plan is not None else 0,
        global_skip=applied.global_skip, nonfinite=applied.nonfinite,
        skip_step=applied.skip_step, optimizer_stepped=applied.optimizer_stepped,
        norms=dict(zip(unit_names, norms)), units=units, promoted=list(applied.promoted),
        clipped=dict(applied.clipped), skipped=list(applied.skipped),
        reset=list(applied.reset))


def metrics_logger(log: Callable[[Dict[str, float], int], Any], *, prefix: str = "gnmr/",
                   every: int = 1, norms: bool = True) -> Callable[[StepInfo], None]:
    """A step callback that hands ``info.flat(prefix)`` and the step to
    ``log`` every ``every`` steps, and always on a step with a skip or a
    unit in recovery (the steps worth seeing)::

        monitor.add_step_callback(gnmr.torch.metrics_logger(
            lambda d, step: wandb.log(d, step=step)))
        monitor.add_step_callback(gnmr.torch.metrics_logger(
            lambda d, step: [writer.add_scalar(k, v, step) for k, v in d.items()]))
    """
    if every < 1:
        raise ValueError("every must be >= 1")

    def callback(info: StepInfo) -> None:
        if info.step % every == 0 or info.skip_step or info.units:
            log(info.flat(prefix, norms), info.step)

    return callback


class StepLogMixin:
    """Monitor's logging half: ``last_step_info`` and step callbacks. Needs
    ``client``, ``unit_names`` and ``_fail`` of gnmr.torch.Monitor."""

    _step_callbacks: Tuple[Callable[[StepInfo], None], ...] = ()
    _last_applied: Any = None
    _last_info: Optional[StepInfo] = None

    def last_step_info(self) -> Optional[StepInfo]:
        """The last ``apply``'d step as a ``StepInfo`` (None before the
        first). Norms are the statistics ``after_backward`` computed: call
        this before the next ``after_backward``, or they read NaN."""
        if self._last_info is None and self._last_applied is not None:
            try:
                norms = self.client.unit_norms(self._last_applied.step)
            except (_gnmr.Error, ValueError) as e:
                self._fail("unit norms", e)
                norms = []
            self._last_info = build(self._last_applied, self.unit_names, norms)
        return self._last_info

    def add_step_callback(self, callback: Callable[[StepInfo], None]) -> None:
        """Calls ``callback(info)`` at the end of every ``apply`` (see
        ``metrics_logger`` for trackers)."""
        self._step_callbacks = self._step_callbacks + (callback,)

    def remove_step_callback(self, callback: Callable[[StepInfo], None]) -> None:
        """ValueError if it was not added."""
        i = self._step_callbacks.index(callback)
        self._step_callbacks = self._step_callbacks[:i] + self._step_callbacks[i + 1:]

    def _step_applied(self, applied: Any) -> None:
        """End of apply: remember the step, run the callbacks."""
        self._last_applied, self._last_info = applied, None
        for callback in self._step_callbacks:
            try:
                callback(self.last_step_info())
            except Exception as e:  # a logger's bug never stops training
                self._fail(f"step callback {getattr(callback, '__name__', callback)!s}", e)
