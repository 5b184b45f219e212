"""Seeded fault schedules, fixed before any result was seen.

A schedule is a list of events (unit index, first step, last step, kind,
factor). Per run: ``EVENTS`` events; each picks a unit uniformly among all
units, a first step uniformly in [FIRST_STEP, steps - TAIL), a duration
uniformly in 1..MAX_DURATION steps, and the factor 16. Events may overlap in
time (at different units, or the same unit: then the later one wins). The
schedule depends only on (seed, kind, number of units, steps), so every arm of
a seed meets the same faults.

FIRST_STEP lies past the controller's warmup (50 valid samples): a fault in
warmup could only be caught by the non-finite rule, which this stress does
not exercise.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Tuple

EVENTS = 8
FIRST_STEP = 60
TAIL = 20
MAX_DURATION = 12
FACTOR = 16.0


@dataclass(frozen=True)
class FaultEvent:
    unit: int
    first: int
    last: int  # inclusive
    kind: str  # "amp" | "att" | "grad"
    factor: float

    def steps(self) -> range:
        return range(self.first, self.last + 1)


def make_schedule(seed: int, kind: str, num_units: int, steps: int) -> List[FaultEvent]:
    if kind == "none":
        return []
    if kind not in ("amp", "att", "grad"):
        raise ValueError(f"unknown fault kind {kind!r}")
    rng = random.Random(f"gnmr-eval-faults/{kind}/{seed}")
    events = []
    for _ in range(EVENTS):
        unit = rng.randrange(num_units)
        first = rng.randrange(FIRST_STEP, steps - TAIL)
        duration = rng.randint(1, MAX_DURATION)
        events.append(FaultEvent(unit, first, min(steps - 1, first + duration - 1), kind, FACTOR))
    return sorted(events, key=lambda e: (e.first, e.unit))


def faults_at(schedule: List[FaultEvent], step: int) -> Dict[int, Tuple[str, float]]:
    """unit -> (kind, factor) for the faults active at ``step``."""
    active = {}
    for e in schedule:
        if e.first <= step <= e.last:
            active[e.unit] = (e.kind, e.factor)
    return active
