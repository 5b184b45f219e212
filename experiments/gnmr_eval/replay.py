"""A recorded trace through the real controller (`gnmrctl replay`), and what
its decisions say: admissions, recovery, detection of known faults or
injected spikes.

Every replay passes every detection key explicitly (`--set`), so a result
does not depend on the compiled-in defaults it is meant to choose.
"""
from __future__ import annotations

import csv
import json
import random
import re
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

_SUMMARY = {
    "admissions": re.compile(r"admissions: (\d+)"),
    "denials": re.compile(r"denials: (\d+)"),
    "in_force": re.compile(r"\((\d+) of \d+ unit-steps in recovery\)"),
    "unit_steps": re.compile(r"of (\d+) unit-steps in recovery"),
    "peak": re.compile(r"peak units in recovery: (\d+)"),
    "steps": re.compile(r": (\d+) steps \("),
}


@dataclass
class Replay:
    """One replay: the summary's counts and every decision line."""
    admissions: int
    denials: int
    in_force: int      # unit-steps in recovery
    unit_steps: int    # unit observations
    peak: int          # most units in recovery at once
    steps: int
    decisions: List[Dict] = field(default_factory=list)

    def admitted(self) -> List[Tuple[str, int, Dict]]:
        """(unit, observed step, evidence) of every admission."""
        return [(a["unit"], d["observed_step"], a) for d in self.decisions for a in d["admitted"]]

    def in_recovery_before(self, step: int) -> Set[str]:
        """Units in recovery after the last decision observed before `step`."""
        last: Set[str] = set()
        for d in self.decisions:
            if d["observed_step"] >= step:
                break
            last = set(d["in_recovery"])
        return last

    def denied_at(self, step: int) -> Set[str]:
        return {u for d in self.decisions if d["observed_step"] == step for u in d["denied"]}


def replay(gnmrctl: str, trace: str, settings: Dict[str, object]) -> Replay:
    cmd = [gnmrctl, "replay", "--trace", trace]
    for k, v in settings.items():
        cmd += ["--set", f"{k}={v}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    counts = {}
    for key, rx in _SUMMARY.items():
        m = rx.search(p.stderr)
        if not m:
            raise SystemExit(f"gnmrctl replay: no '{key}' in its summary:\n{p.stderr}")
        counts[key] = int(m.group(1))
    decisions = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    return Replay(decisions=decisions, **counts)


def read_trace(path: str) -> List[Dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_trace(path: str, rows: Sequence[Dict[str, str]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def unit_names(rows: Sequence[Dict[str, str]]) -> List[str]:
    names: List[str] = []
    for r in rows:
        if r["unit"] in names:
            break
        names.append(r["unit"])
    return names


# Single-step spikes injected into a clean trace: one every SPIKE_EVERY
# steps from SPIKE_FIRST (past warmup and the learning-rate warmup), each at
# a unit drawn from the seed. They are further apart than a 20-step lock,
# so each one meets a budget that only the clean run's own admissions use.
SPIKE_FIRST = 110
SPIKE_EVERY = 30


def spike_plan(seed: int, names: Sequence[str], steps: int) -> List[Tuple[int, str]]:
    rng = random.Random(f"gnmr-defaults-spikes/{seed}")
    return [(t, rng.choice(list(names))) for t in range(SPIKE_FIRST, steps - 10, SPIKE_EVERY)]


def inject(rows: Sequence[Dict[str, str]], spikes: Sequence[Tuple[int, str]],
           factor: float) -> List[Dict[str, str]]:
    """The rows with each spike's unit gradient multiplied by `factor` at its
    step (sumsq x factor^2, amax x factor)."""
    at = set((str(t), u) for t, u in spikes)
    out = []
    for r in rows:
        if (r["step"], r["unit"]) in at:
            r = dict(r, sumsq=repr(float(r["sumsq"]) * factor * factor),
                     amax=repr(float(r["amax"]) * factor))
        out.append(r)
    return out


@dataclass
class SpikeOutcome:
    caught: int = 0       # admitted at the spike's own step
    held: int = 0         # already in recovery (promoted: nothing to clip)
    denied: int = 0       # triggered, but the budget was full
    missed: int = 0       # did not trigger
    gnmr: List[float] = field(default_factory=list)  # GNMR of the caught spikes


def spike_outcome(r: Replay, spikes: Sequence[Tuple[int, str]]) -> SpikeOutcome:
    o = SpikeOutcome()
    adm = {(u, t): ev for u, t, ev in r.admitted()}
    for t, u in spikes:
        if (u, t) in adm:
            o.caught += 1
            o.gnmr.append(adm[(u, t)]["gnmr"])
        elif u in r.in_recovery_before(t):
            o.held += 1
        elif u in r.denied_at(t):
            o.denied += 1
        else:
            o.missed += 1
    return o


def entry_clipped(gnmr: float, tau: float, ema_decay: float, clip_min_scale: float,
                  clip_scale) -> float:
    """A spike's norm after the lag-0 entry clip, in units of the unit's mean
    before the spike. The reference norm is the mean after the spike entered
    it (the controller sends mu after the update, where the sample enters as
    min(norm, tau * mu)); `clip_scale` is the client's ClipScale."""
    ref = ema_decay + (1.0 - ema_decay) * min(gnmr, tau)
    return gnmr * clip_scale(ref, gnmr, clip_min_scale)


@dataclass
class FaultOutcome:
    events: int = 0
    detected: int = 0
    delays: List[int] = field(default_factory=list)  # steps from fault start to admission
    admissions: int = 0
    true_pos: int = 0
    co_triggered: int = 0  # false, during another unit's fault
    natural: int = 0       # false, no fault active


def fault_outcome(r: Replay, schedule: Sequence[Dict], names: Sequence[str]) -> FaultOutcome:
    """Detection of a fault schedule (docs/evaluation.md's definitions:
    detected = admitted during the event, or already in recovery when it
    began)."""
    faulty = {(names[e["unit"]], s) for e in schedule for s in range(e["first"], e["last"] + 1)}
    active = {s for _, s in faulty}
    adm = [(u, t) for u, t, _ in r.admitted()]
    o = FaultOutcome(events=len(schedule), admissions=len(adm))
    for u, t in adm:
        if (u, t) in faulty:
            o.true_pos += 1
        elif t in active:
            o.co_triggered += 1
        else:
            o.natural += 1
    for e in schedule:
        name = names[e["unit"]]
        hits = [t - e["first"] for u, t in adm if u == name and e["first"] <= t <= e["last"]]
        if name in r.in_recovery_before(e["first"]):
            o.detected += 1
            o.delays.append(0)
        elif hits:
            o.detected += 1
            o.delays.append(min(hits))
    return o


def median(v: Sequence[float]) -> Optional[float]:
    if not v:
        return None
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
