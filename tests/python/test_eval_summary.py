"""The evaluation's compact per-run summary (experiments/gnmr_eval/summary.py,
<out>/runs.jsonl): the raw runs are not kept in the tree, so a summary line
must give the same figures as its raw run, and a table rebuilt from the
summary alone (--tables-only) must be the same bytes as one built with the
raw runs there. Hand-made runs; no gnmrd, no training."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

EXPERIMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments")
sys.path.insert(0, EXPERIMENTS)

from gnmr_eval import metrics as M  # noqa: E402
from gnmr_eval import plan as P  # noqa: E402
from gnmr_eval import summary as S  # noqa: E402

STEPS = 60  # past summary.NORM_FROM, so HF runs have gradient norms to keep


def raw_run(label, arm, faults, seed, val, bump=0.0, in_force=None, admissions=()):
    """A run as train.run returns it: two units, a fault on unit 1 at steps 3-4."""
    schedule = ([{"unit": 1, "first": 3, "last": 4, "kind": faults, "factor": 16.0}]
                if faults != "none" else [])
    losses = [3.0 - 0.01 * t + (bump if t in (3, 4, 5) else 0.0) for t in range(STEPS)]
    name = P.name(label, faults, seed)
    return {"name": name, "arm": arm, "seed": seed, "faults": faults, "steps": STEPS,
            "units": ["a", "b"], "val_loss": val, "train_loss": losses,
            "grad_norm": [1.0 + 0.001 * t for t in range(STEPS)],
            "in_force": in_force or [[] for _ in range(STEPS)],
            "admissions": [list(a) for a in admissions], "schedule": schedule,
            "step_time_s": [0.02 + 0.0001 * t for t in range(STEPS)],
            "watched": [True] * STEPS, "modes": [1] * STEPS, "optimizer_skips": 0,
            "extra": {"steps_without_decision": 0}, "wall_s": 1.5,
            "spec": {"name": name, "label": label, "arm": arm, "faults": faults, "seed": seed,
                     "layers": 2}}


def gnmr_run(seed):
    in_force = [[] for _ in range(STEPS)]
    for t in (3, 4, 5, 6):
        in_force[t] = [1]
    in_force[20] = [0, 1]
    return raw_run(P.headline_label(), "gnmr", "amp", seed, 2.55, bump=0.3,
                   in_force=in_force, admissions=[(1, 3), (0, 20)])


def test_a_summary_line_gives_the_raw_runs_figures():
    hf = raw_run("HF", "hf", "amp", 101, 2.5)
    x = gnmr_run(101)
    rec = S.summarize(x, hf, curve=True)
    assert S.recovery(rec) == M.recovery(x)
    assert S.admissions(rec) == M.admissions(x)
    assert tuple(rec["false_admissions"]) == M.false_positive_kinds(x)
    assert rec["spike_steps"] == M.spike_steps(x, hf) == 3
    assert rec["step_ms"] == M.step_ms(x) and rec["val_loss"] == x["val_loss"]
    assert S.in_force(rec) == x["in_force"]
    assert rec["timeline"]["in_force"] == [[1, 3, 6], [0, 20, 20], [1, 20, 20]]
    assert [(e["unit"], e["first"], e["last"]) for e in S.schedule(rec)] == [(1, 3, 4)]
    assert not rec["diverged"] and rec["unit_names"] == ["a", "b"]
    assert S.summarize(hf)["grad_norm_tail"] == hf["grad_norm"][S.NORM_FROM:]
    # A line survives JSON exactly (the tables' floats are not rounded).
    assert json.loads(json.dumps(rec)) == rec


def test_save_merges_and_keeps_a_curve(tmp_path):
    x = gnmr_run(1)
    S.save(str(tmp_path), {x["name"]: S.summarize(x, curve=True)})
    y = raw_run("LC", "lc", "amp", 1, 2.6)
    S.save(str(tmp_path), {x["name"]: S.summarize(x), y["name"]: S.summarize(y)})
    got = S.load(str(tmp_path))
    assert sorted(got) == sorted([x["name"], y["name"]])
    assert got[x["name"]]["train_loss"] == x["train_loss"]
    S.save_facts(str(tmp_path), "forward.md", wall_min=2.5)
    assert S.facts(str(tmp_path), "forward.md") == {"wall_min": 2.5}


def forward_tables_only(out):
    subprocess.run([sys.executable, os.path.join(EXPERIMENTS, "forward_eval.py"),
                    "--seed-list", "1,2", "--overhead-seeds", "0", "--tables-only",
                    "--out", out], check=True, capture_output=True)
    with open(os.path.join(out, "forward.md")) as f:
        return f.read()


def test_forward_table_from_the_summary_alone_is_the_same_bytes(tmp_path):
    out = str(tmp_path / "results")
    os.makedirs(os.path.join(out, "runs"))
    runs = [raw_run("HF", "hf", "amp", s, 2.5 + 0.001 * s) for s in (101, 102, 1, 2)]
    for s in (1, 2):
        runs += [raw_run("LC", "lc", "amp", s, 2.6, bump=0.5),
                 raw_run("LC-clean", "lc", "none", s, 2.52), gnmr_run(s)]
    for r in runs:
        with open(os.path.join(out, "runs", r["name"] + ".json"), "w") as f:
            json.dump(r, f)
    S.save_facts(out, "forward.md", wall_min=3.25)
    with_runs = forward_tables_only(out)
    assert S.FILE in os.listdir(out) and "| HF | amp | 2 |" in with_runs
    assert f"| {P.headline_label()} | amp | 2 |" in with_runs
    shutil.rmtree(os.path.join(out, "runs"))
    os.remove(os.path.join(out, "forward.md"))
    assert forward_tables_only(out) == with_runs
