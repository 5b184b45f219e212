"""The helpers behind experiments/false_positives.py (the evidence for the
controller's defaults, docs/controller.md): spike injection, reading a real
`gnmrctl replay` (path in $GNMRCTL), classifying spikes and faults, and the
entry clip's arithmetic."""
from __future__ import annotations

import math
import os
import sys

import pytest

import gnmr

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "experiments"))

from gnmr_eval import replay as R  # noqa: E402

NAMES = ["u0", "u1", "u2"]
SETTINGS = dict(warmup=5, ema_decay=0.98, tau=6, tau_delta=4, gnmr_floor=1.5, short_window=4,
                max_o=4, lock_steps=4, lag=0)


def flat_rows(steps):
    return [{"step": str(t), "unit": u, "sumsq": repr(1.0 + 0.01 * i), "amax": "0.5"}
            for t in range(steps) for i, u in enumerate(NAMES)]


@pytest.fixture
def gnmrctl():
    path = os.environ.get("GNMRCTL")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("GNMRCTL not set (run through ctest)")
    return path


def test_inject_scales_exactly_the_spike_cells():
    rows = flat_rows(20)
    out = R.inject(rows, [(12, "u1")], 50.0)
    for a, b in zip(rows, out):
        if (a["step"], a["unit"]) == ("12", "u1"):
            assert float(b["sumsq"]) == float(a["sumsq"]) * 2500.0
            assert float(b["amax"]) == 25.0
        else:
            assert a == b
    assert R.unit_names(rows) == NAMES


def test_spike_plan_is_seeded_and_spaced_past_a_lock():
    a = R.spike_plan(1, NAMES, 320)
    assert a == R.spike_plan(1, NAMES, 320) and a != R.spike_plan(2, NAMES, 320)
    steps = [t for t, _ in a]
    assert steps[0] == R.SPIKE_FIRST and all(y - x == R.SPIKE_EVERY for x, y in zip(steps, steps[1:]))
    assert steps[-1] < 310


def test_replay_counts_and_classifies_spikes(gnmrctl, tmp_path):
    rows = R.inject(flat_rows(40), [(20, "u0"), (30, "u2")], 50.0)
    rows = R.inject(rows, [(30, "u1")], 2.0)  # below tau 6 and below Delta 4: missed
    path = str(tmp_path / "t.csv")
    R.write_trace(path, rows)
    r = R.replay(gnmrctl, path, SETTINGS)
    assert (r.steps, r.unit_steps, r.admissions, r.denials, r.peak) == (40, 120, 2, 0, 1)
    assert r.in_force == 8  # two locks of 4 steps, lag 0: in force from the spike itself
    assert [(u, t) for u, t, _ in r.admitted()] == [("u0", 20), ("u2", 30)]
    o = R.spike_outcome(r, [(20, "u0"), (30, "u2"), (30, "u1")])
    assert (o.caught, o.held, o.denied, o.missed) == (2, 0, 0, 1)
    assert all(45 < g < 55 for g in o.gnmr)
    # The same trace as a fault schedule: u0 faulty at 19-21 (caught at its
    # second step), u1 at 30 (missed); u2's admission is co-triggered.
    sched = [{"unit": 0, "first": 19, "last": 21}, {"unit": 1, "first": 30, "last": 30}]
    f = R.fault_outcome(r, sched, NAMES)
    assert (f.events, f.detected, f.delays) == (2, 1, [1])
    assert (f.admissions, f.true_pos, f.co_triggered, f.natural) == (2, 1, 1, 0)


def test_replay_reports_a_budget_denial_and_a_held_unit(gnmrctl, tmp_path):
    rows = R.inject(flat_rows(40), [(20, "u0"), (20, "u1"), (22, "u0")], 50.0)
    path = str(tmp_path / "t.csv")
    R.write_trace(path, rows)
    r = R.replay(gnmrctl, path, dict(SETTINGS, max_o=1))
    o = R.spike_outcome(r, [(20, "u0"), (20, "u1"), (22, "u0")])
    assert (o.caught, o.held, o.denied, o.missed) == (1, 1, 1, 0)


def test_entry_clip_arithmetic_matches_the_documented_examples():
    clip = gnmr.clip_scale
    # A x50 spike at tau 6: the reference is the mean after the spike entered
    # it capped at 6 mu, 0.98 + 0.02 * 6 = 1.1 mu.
    assert R.entry_clipped(50.0, 6.0, 0.98, 0.1, clip) == pytest.approx(5.0)
    assert R.entry_clipped(50.0, 6.0, 0.98, 0.01, clip) == pytest.approx(1.1)
    assert R.entry_clipped(16.0, 6.0, 0.98, 0.1, clip) == pytest.approx(1.6)
    # Below the clip floor's reach the result is the reference itself.
    assert R.entry_clipped(8.0, 6.0, 0.98, 0.01, clip) == pytest.approx(1.1)
    assert math.isclose(R.median([3, 1, 2]), 2) and R.median([1, 2]) == 1.5
    assert R.median([]) is None
