"""What each arm does around a training step.

Every arm sees the same model, batches and fault schedule of a seed. The
training loop (train.py) calls, per step t::

    arm.before_forward(t)        # promotions in force for this forward pass
    ... forward, backward (and the DP all-reduce) ...
    step_optimizer = arm.after_backward(t)   # treat gradients

and then reads ``arm.in_force`` (units on their high-fidelity path or whose
gradient was treated at t) and ``arm.admissions`` ((unit, observed step)).

Arms: ``NoControl`` (HF and LC), ``GnmrArm`` (the real client + gnmrd through
gnmr.torch.Monitor), ``OracleArm`` (lag 0 / lag 1, promotes exactly the
faulty unit-steps), ``RandomArm`` (random promotions at a given unit-step
budget), ``GlobalClipArm`` (clip_grad_norm_ at a tuned threshold) and
``ZClipArm`` (z-score adaptive clipping of the total norm, after ZClip).
"""
from __future__ import annotations

import math
import random
from typing import Dict, List, Optional, Set, Tuple

import torch


# Shared with the controller's defaults so the oracle's entry clip matches.
EMA_DECAY = 0.98
WARMUP = 50


class Arm:
    low_cost = True
    replaces_base_clip = False  # the clipping arms replace the recipe's clip

    def __init__(self) -> None:
        self.in_force: Set[int] = set()
        self.admissions: List[Tuple[int, int]] = []

    def setup(self, model, optimizer, schedule, seed: int, steps: int) -> None:
        self.model, self.optimizer, self.schedule = model, optimizer, schedule
        self.units = model.units()
        self.seed, self.steps = seed, steps

    def before_forward(self, step: int) -> None:
        pass

    def after_backward(self, step: int) -> bool:
        return True

    def close(self) -> None:
        pass

    def extra(self) -> Dict:
        return {}

    def _promote(self, want: Set[int]) -> None:
        for i, u in enumerate(self.units):
            u.gnmr_promoted = i in want


class NoControl(Arm):
    def __init__(self, low_cost: bool) -> None:
        super().__init__()
        self.low_cost = low_cost


def update_mean(mu: float, samples: int, norm: float, tau: float) -> float:
    """The controller's historical mean after one more valid sample: a plain
    average over the first WARMUP samples, then an EMA of min(norm, tau * mu)."""
    if samples < WARMUP:
        return (mu * samples + norm) / (samples + 1)
    return EMA_DECAY * mu + (1 - EMA_DECAY) * min(norm, tau * mu)


def unit_norms(units) -> List[float]:
    out = []
    for u in units:
        s = 0.0
        for p in u.parameters():
            if p.grad is not None:
                s += float(p.grad.double().pow(2).sum())
        out.append(math.sqrt(s))
    return out


class OracleArm(Arm):
    """Knows the schedule. Lag 1: a fault found at its first step t runs on
    the high-fidelity path from t + 1 to its end (t itself is lost). Lag 0:
    in addition the unit's gradient of step t is clipped to its historical
    mean (the controller's entry clip: clamp(mu / norm, clip_min_scale, 1), mu an EMA
    kept as the controller keeps it)."""

    def __init__(self, lag: int, tau: float = 2.5, clip_min_scale: float = 0.01) -> None:
        super().__init__()
        self.lag, self.tau, self.clip_min_scale = lag, tau, clip_min_scale

    def setup(self, *a, **k) -> None:
        super().setup(*a, **k)
        self.mu = [0.0] * len(self.units)
        self.samples = [0] * len(self.units)
        self.promoted_until: Dict[int, int] = {}  # unit -> last step promoted

    def before_forward(self, step: int) -> None:
        self._promote({u for u, last in self.promoted_until.items() if step <= last})
        self.in_force = {u for u, last in self.promoted_until.items() if step <= last}

    def after_backward(self, step: int) -> bool:
        norms = unit_norms(self.units)
        onsets = [e for e in self.schedule if e.first == step and e.unit not in self.in_force]
        for e in onsets:
            self.admissions.append((e.unit, step))
            if e.last > step:
                self.promoted_until[e.unit] = e.last
            if self.lag == 0:
                self.in_force.add(e.unit)
                mu = self.mu[e.unit]
                if norms[e.unit] > 0 and self.samples[e.unit] > 0:
                    scale = min(1.0, max(self.clip_min_scale, mu / norms[e.unit]))
                    with torch.no_grad():
                        for p in self.units[e.unit].parameters():
                            if p.grad is not None:
                                p.grad.mul_(scale)
        for i, n in enumerate(norms):  # the controller's history rule
            if n <= 0 or not math.isfinite(n):
                continue
            self.mu[i] = update_mean(self.mu[i], self.samples[i], n, self.tau)
            self.samples[i] += 1
        return True


class RandomArm(Arm):
    """Promotes random units for ``lock`` steps at random times (from the
    controller's warmup on) until ``budget`` unit-steps are spent."""

    def __init__(self, budget: int, lock: int) -> None:
        super().__init__()
        self.budget, self.lock = budget, lock

    def setup(self, *a, **k) -> None:
        super().setup(*a, **k)
        rng = random.Random(f"gnmr-eval-random/{self.seed}")
        self.windows = []
        left = self.budget
        while left > 0:
            length = min(self.lock, left)
            unit = rng.randrange(len(self.units))
            first = rng.randrange(WARMUP, self.steps - length + 1)
            self.windows.append((unit, first, first + length - 1))
            self.admissions.append((unit, first - 1))
            left -= length

    def before_forward(self, step: int) -> None:
        self.in_force = {u for (u, a, b) in self.windows if a <= step <= b}
        self._promote(self.in_force)


class GlobalClipArm(Arm):
    replaces_base_clip = True

    def __init__(self, max_norm: float) -> None:
        super().__init__()
        self.max_norm = max_norm
        self.clipped = 0

    def after_backward(self, step: int) -> bool:
        n = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        self.clipped += int(float(n) > self.max_norm)
        return True

    def extra(self) -> Dict:
        return {"clipped_steps": self.clipped}


class ZClipArm(Arm):
    """ZClip-style: EMA mean and variance of the total gradient norm; a norm
    whose z-score exceeds ``z`` is clipped to mean + z * std, and the clipped
    value enters the statistics. No clipping in the first ``warmup`` steps."""

    replaces_base_clip = True

    def __init__(self, z: float, alpha: float = 0.97, warmup: int = 25) -> None:
        super().__init__()
        self.z, self.alpha, self.warmup = z, alpha, warmup
        self.mean = None
        self.var = 0.0
        self.seen = 0
        self.clipped = 0

    def after_backward(self, step: int) -> bool:
        params = [p for p in self.model.parameters() if p.grad is not None]
        g = float(torch.norm(torch.stack([p.grad.norm() for p in params])))
        if not math.isfinite(g):
            return False
        if self.seen >= self.warmup and self.mean is not None:
            std = math.sqrt(max(self.var, 1e-24))
            if (g - self.mean) / std > self.z:
                target = self.mean + self.z * std
                with torch.no_grad():
                    for p in params:
                        p.grad.mul_(target / g)
                g = target
                self.clipped += 1
        if self.mean is None:
            self.mean = g
        else:
            d = g - self.mean
            self.mean += (1 - self.alpha) * d
            self.var = self.alpha * (self.var + (1 - self.alpha) * d * d)
        self.seen += 1
        return True

    def extra(self) -> Dict:
        return {"clipped_steps": self.clipped}


def unit_group(kind: Optional[str]):
    """``"qkv"``: q, k and v of each attention block form one unit (their
    gradients move together: a fault at one raises the others); None: every
    Linear is its own unit."""
    if kind is None:
        return None
    if kind != "qkv":
        raise ValueError(f"unknown unit grouping {kind!r}")

    def group(name: str) -> str:
        head, _, last = name.rpartition(".")
        return f"{head}.qkv" if head.endswith("attn") and last in ("q", "k", "v") else name
    return group


class GnmrArm(Arm):
    """The real stack: gnmr.torch.Monitor -> client library -> gnmrd."""

    def __init__(self, target: str, job_id: str, config: Dict, *, rank: int = 0,
                 world_size: int = 1, decision_wait_ms: float = 10000.0,
                 group: Optional[str] = None, forward: bool = False,
                 backward: bool = False) -> None:
        super().__init__()
        self.group = group
        self.forward = forward  # quantizer tensors to the forward channel
        self.backward = backward  # quantized gradients to the backward channel
        # Cleared by train.py for the gradients-only blocks of a three-way
        # overhead run; the hooks stay registered, only switched off.
        self.forward_step = True
        self.target, self.job_id, self.config = target, job_id, dict(config)
        self.rank, self.world_size = rank, world_size
        self.decision_wait_ms = decision_wait_ms
        self.lag = int(config.get("lag", 1))
        self.digests: List[Tuple[int, int]] = []
        self.without_decision = 0
        self.forward_items = self.backward_items = 0  # tensors handed to the channels

    def setup(self, *a, **k) -> None:
        super().setup(*a, **k)
        import gnmr.torch as gt
        from .fp8 import LowPrecisionLinear, quantizer_tensors
        group = unit_group(self.group)
        self.monitor = gt.Monitor(
            self.model, target=self.target, job_id=self.job_id, rank=self.rank,
            world_size=self.world_size, config=self.config,
            unit_filter=lambda n, m: isinstance(m, LowPrecisionLinear), unit_group=group,
            decision_wait_ms=self.decision_wait_ms, strict=True,
            forward_tensors=self._counted(quantizer_tensors) if self.forward else None)
        for n, m in self.model.named_modules():
            if isinstance(m, LowPrecisionLinear):
                m.record_quantized = self.forward
                if self.backward:
                    m.gnmr_backward_sink = self._backward_sink(group(n) if group else n)
        if not self.monitor.wait_connected(30):
            raise RuntimeError(f"gnmrd at {self.target} did not accept job {self.job_id}")
        # GNMR unit -> the Linears (fault sites) it covers: every figure is
        # counted per Linear, so a grouped unit in recovery costs all of them.
        self.members: Dict[str, List[int]] = {}
        for i, n in enumerate(self.model.unit_names()):
            self.members.setdefault(group(n) if group else n, []).append(i)
        self.prev: Set[str] = set()

    def _counted(self, fn):
        """``fn`` counting the forward tensors it hands over (the run's extra)."""
        def forward_tensors(*args):
            items = fn(*args)
            self.forward_items += len(items) if items else 0
            return items
        return forward_tensors

    def _backward_sink(self, unit: str):
        from gnmr.torch import ForwardTensor

        def sink(q, saturation):
            self.backward_items += 1
            self.monitor.observe_backward(unit, ForwardTensor(q, saturation_magnitude=saturation))
        return sink

    def before_forward(self, step: int) -> None:
        # On only for the steps this arm watches (train.py's alternate
        # blocks time the monitor's cost, forward hooks included).
        self.monitor.forward_enabled = self.forward and self.forward_step
        self.monitor.before_forward(step)

    def after_backward(self, step: int) -> bool:
        self.monitor.forward_enabled = False
        self.monitor.after_backward(step)
        applied = self.monitor.apply(step, None, step_optimizer=False)
        if step > 0 and not applied.has_decision:
            self.without_decision += 1
        self.digests.append((step, applied.digest))
        now = set(applied.promoted)
        for name in sorted(now - self.prev):
            for u in self.members[name]:
                self.admissions.append((u, step - self.lag))
        self.prev = now
        self.in_force = {u for name in now for u in self.members[name]}
        return not applied.global_skip

    def close(self) -> None:
        self.counters = self.monitor.counters().as_dict()
        self.monitor.close()

    def extra(self) -> Dict:
        return {"steps_without_decision": self.without_decision,
                "forward_items": self.forward_items, "backward_items": self.backward_items,
                "reports_dropped": self.counters.get("reports_dropped"),
                "missed_decisions": self.counters.get("missed_decisions"),
                "digests": self.digests}
