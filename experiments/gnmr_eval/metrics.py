"""Per-run figures (docs/evaluation.md, "Figures"), computed from result dicts.

All definitions were fixed before the evaluation seeds were run:

- gap closed = (LC - X) / (LC - HF) on the final validation loss (fp32 path),
  with LC the uncontrolled low-cost run under the same faults and HF the
  high-fidelity run of the same seed; ``fault gap closed`` divides by
  (LC - LC-clean) instead, the part of the gap the faults caused.
- spike step: training loss more than SPIKE_NATS above HF's at the same step
  (identical batches).
- recovery fraction: unit-steps in force / (units x steps); split into
  faulty (the unit's quantizer was faulty at that step) and false-positive.
- an admission (unit u, observed step t) is a true positive when u was
  faulty at t; recall: fault events with a true-positive admission of their
  unit at one of their steps / all events.
"""
from __future__ import annotations

import math
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

SPIKE_NATS = 0.25
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228}


def faulty_set(r: Dict) -> set:
    return {(e["unit"], s) for e in r["schedule"] for s in range(e["first"], e["last"] + 1)}


def recovery(r: Dict) -> Tuple[float, float, float]:
    """(total, faulty, false-positive) recovery fractions."""
    cells = len(r["units"]) * r["steps"]
    faulty = faulty_set(r)
    inf = [(u, t) for t, us in enumerate(r["in_force"]) for u in us]
    tp = sum(1 for c in inf if c in faulty)
    return len(inf) / cells, tp / cells, (len(inf) - tp) / cells


def admissions(r: Dict) -> Tuple[int, int, int, int]:
    """(admissions, true positives, fault events, events detected)."""
    faulty = faulty_set(r)
    adm = [tuple(a) for a in r["admissions"]]
    tp = sum(1 for a in adm if a in faulty)
    events = r["schedule"]
    detected = sum(1 for e in events if _detected(e, adm, r["in_force"]))
    return len(adm), tp, len(events), detected


def _detected(e: Dict, adm, in_force) -> bool:
    """Admitted during the event, or already in recovery when it began (an
    overlapping event at the same unit)."""
    if any(u == e["unit"] and e["first"] <= t <= e["last"] for u, t in adm):
        return True
    return e["first"] < len(in_force) and e["unit"] in in_force[e["first"]]


def false_positive_kinds(r: Dict) -> Tuple[int, int]:
    """False-positive admissions split into (during another unit's fault,
    with no fault active): co-triggered neighbours vs natural spikes."""
    faulty = faulty_set(r)
    active = {t for _, t in faulty}
    during = natural = 0
    for u, t in (tuple(a) for a in r["admissions"]):
        if (u, t) in faulty:
            continue
        if t in active:
            during += 1
        else:
            natural += 1
    return during, natural


def gap_closed(x: Dict, lc: Dict, hf: Dict) -> float:
    d = lc["val_loss"] - hf["val_loss"]
    return (lc["val_loss"] - x["val_loss"]) / d if d != 0 else float("nan")


def spike_steps(x: Dict, hf: Dict) -> int:
    return sum(1 for a, b in zip(x["train_loss"], hf["train_loss"]) if a - b > SPIKE_NATS)


def step_ms_in_mode(x: Dict, mode: int) -> float:
    """Median step time (ms) of a three-way overhead run's steps in `mode`
    (0 monitor off, 1 gradients only, 2 gradients and forward tensors),
    the first block of each mode left out (warm-up)."""
    ts = [t for t, m in zip(x["step_time_s"], x["modes"]) if m == mode]
    block = int(x["spec"].get("alternate", 10))
    return 1000 * statistics.median(ts[block:] if len(ts) > 2 * block else ts)


def step_ms(x: Dict, watched: Optional[bool] = None) -> float:
    ts = [t for t, w in zip(x["step_time_s"], x.get("watched") or [True] * x["steps"])
          if watched is None or w == watched]
    return 1000 * statistics.median(ts[5:] if len(ts) > 20 else ts)


def mean_ci(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and half-width of the 95% t-interval (nan with one value)."""
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return float("nan"), float("nan")
    m = statistics.mean(v)
    if len(v) < 2:
        return m, float("nan")
    return m, T95.get(len(v) - 1, 1.96) * statistics.stdev(v) / math.sqrt(len(v))


def fmt_ci(values: Sequence[float], digits: int = 3, pct: bool = False) -> str:
    m, h = mean_ci(values)
    if pct:
        return f"{100 * m:.0f}% ± {100 * h:.0f}" if not math.isnan(h) else f"{100 * m:.0f}%"
    return f"{m:.{digits}f} ± {h:.{digits}f}" if not math.isnan(h) else f"{m:.{digits}f}"


def moving_average(v: List[float], w: int) -> List[float]:
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x
        if i >= w:
            acc -= v[i - w]
        out.append(acc / min(i + 1, w))
    return out


class LossSpikes:
    """A loss spike: above ``factor`` times the loss's running mean (an EMA
    with weight ``alpha``, about 50 steps at 0.98), from step ``warmup`` on;
    a spike does not enter the mean. Settings N1 (mx_proxy.py) and N2
    (n2_eval.py) count them; their skip-batch arms act on them."""

    def __init__(self, factor: float = 2.0, alpha: float = 0.98, warmup: int = 100) -> None:
        self.factor, self.alpha, self.warmup = factor, alpha, warmup
        self.mean: Optional[float] = None

    def is_spike(self, step: int, loss: float) -> bool:
        if self.mean is not None and step >= self.warmup and loss > self.factor * self.mean:
            return True
        self.mean = loss if self.mean is None else self.alpha * self.mean + (1 - self.alpha) * loss
        return False
