"""The compact per-run summary of a results folder: ``<out>/runs.jsonl``.

A raw run (``<out>/runs/<name>.json``: every step's loss, gradient norm,
step time and units in recovery, ~24 KB) is not kept in the tree: the runs
are deterministic and the command next to each table regenerates them. What
the tables, the plots and docs/evaluation.md's analyses read of a run is
kept instead, one JSON line per run (~1 KB): its figures (validation loss,
recovery unit-steps, admission counts, spike steps against HF, step times)
and its timeline (faults, admissions, units in recovery as intervals).

The tables are always computed from these lines, right after the runs as
well as from the summary alone (``--tables-only``), so both give the same
bytes. ``<out>/tables.json`` keeps what a table prints that is no run's
(the command's wall time, the corpus).
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
import statistics
from typing import Dict, Iterable, List, Optional

from . import metrics as M
from . import plan as P

FILE = "runs.jsonl"
FACTS = "tables.json"
# Global clipping's scale is the median HF gradient norm after step 50 of the
# tuning seeds (101, 102, ...: run_eval.py), pooled: a median of medians is
# not it, so those HF runs keep these norms.
NORM_FROM = 50
TUNING_SEEDS_FROM = 101
# Spec keys the line has anyway, or that differ between attempts (job_id).
_NOT_SETTING_KEYS = ("name", "label", "arm", "faults", "seed", "job_id", "target", "rank")
_CURVE_KEYS = ("train_loss", "unit_names")
_WALL = re.compile(r"(?:\], |whole command )(nan|[0-9.]+) min\b")


def _intervals(in_force: List[List[int]]) -> List[List[int]]:
    """Per-step unit lists -> [unit, first step, last step], by first step."""
    start: Dict[int, int] = {}
    out = []
    for t, units in enumerate(in_force + [[]]):  # the empty step closes the rest
        for u in [u for u in start if u not in units]:
            out.append([u, start.pop(u), t - 1])
        for u in units:
            start.setdefault(u, t)
    return sorted(out, key=lambda x: (x[1], x[0]))


def in_force(rec: Dict) -> List[List[int]]:
    """The per-step unit lists back from the intervals (each sorted, as runs store them)."""
    steps: List[List[int]] = [[] for _ in range(rec["steps"])]
    for u, a, b in rec["timeline"]["in_force"]:
        for t in range(a, b + 1):
            steps[t].append(u)
    return [sorted(x) for x in steps]


def schedule(rec: Dict) -> List[Dict]:
    return [dict(unit=u, first=a, last=b) for u, a, b in rec["timeline"]["faults"]]


def summarize(r: Dict, hf: Optional[Dict] = None, curve: bool = False) -> Dict:
    """One raw run -> its summary line; `hf`: the HF run of its seed (spike
    steps count against it); `curve`: keep the training loss and unit names
    (the runs the plots draw)."""
    spec = r.get("spec", {})
    faulty = M.faulty_set(r)
    cells = [(u, t) for t, us in enumerate(r["in_force"]) for u in us]
    n_adm, tp, events, detected = M.admissions(r)
    losses = r["train_loss"] + [r["val_loss"]]
    rec = {
        "name": r["name"], "label": spec.get("label", r["name"].split("__")[0]),
        "arm": r["arm"], "faults": r["faults"], "seed": r["seed"],
        "layers": spec.get("layers", 2),
        "setting": {k: v for k, v in spec.items() if k not in _NOT_SETTING_KEYS},
        "steps": r["steps"], "units": len(r["units"]),
        "val_loss": r["val_loss"], "final_train_loss": r["train_loss"][-1],
        "diverged": not all(math.isfinite(v) for v in losses),
        "optimizer_skips": r.get("optimizer_skips", 0),
        "recovery_unit_steps": len(cells),
        "recovery_unit_steps_faulty": sum(1 for c in cells if c in faulty),
        "admissions": n_adm, "admissions_true": tp,
        "fault_events": events, "events_detected": detected,
        "false_admissions": list(M.false_positive_kinds(r)),
        "spike_steps": M.spike_steps(r, hf) if hf else None,
        "step_ms": M.step_ms(r),
        "wall_s": r.get("wall_s"),
        "health": {k: v for k, v in r.get("extra", {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)},
        "timeline": {"faults": [[e["unit"], e["first"], e["last"]] for e in r["schedule"]],
                     "admissions": r["admissions"], "in_force": _intervals(r["in_force"])},
    }
    if False in (r.get("watched") or []):  # monitor on in every other block
        rec["step_ms_off_on"] = [M.step_ms(r, False), M.step_ms(r, True)]
    if 2 in (r.get("modes") or []):  # three-way blocks: off, gradients, + forward
        rec["step_ms_modes"] = [M.step_ms_in_mode(r, m) for m in (0, 1, 2)]
    for k in ("dp_identical", "dp_rank_val"):
        if k in r:
            rec[k] = r[k]
    if r["arm"] == "hf" and r["seed"] >= TUNING_SEEDS_FROM:
        rec["grad_norm_tail"] = r["grad_norm"][NORM_FROM:]
    if curve:
        rec["train_loss"] = r["train_loss"]  # unrounded: the same plot as from the raw run
        rec["unit_names"] = r["units"]
    return rec


def summarize_all(raw: Dict[str, Dict], curve_labels: Iterable[str] = ()) -> Dict[str, Dict]:
    """Every raw run by name -> its line; the amplifying runs of
    `curve_labels` keep their curves (run_eval.py, which plots, passes
    report.curve_labels(); forward_eval.py plots nothing)."""
    curves = set(curve_labels)
    out = {}
    for name, r in raw.items():
        label = r.get("spec", {}).get("label", name.split("__")[0])
        out[name] = summarize(r, raw.get(P.name("HF", "amp", r["seed"])),
                              curve=r["faults"] == "amp" and label in curves)
    return out


# --- figures from a line: the metrics module's, from the counts ---------------

def recovery(rec: Dict):
    """(total, faulty, false-positive) recovery fractions (metrics.recovery)."""
    cells = rec["units"] * rec["steps"]
    n, tp = rec["recovery_unit_steps"], rec["recovery_unit_steps_faulty"]
    return n / cells, tp / cells, (n - tp) / cells


def admissions(rec: Dict):
    """(admissions, true positives, fault events, events detected)."""
    return rec["admissions"], rec["admissions_true"], rec["fault_events"], rec["events_detected"]


def median_norm(records: Dict[str, Dict], seeds: List[int]) -> float:
    """The median HF gradient norm of `seeds` after NORM_FROM (nan without them)."""
    hfs = [records.get(P.name("HF", "amp", s)) for s in seeds]
    if not all(hfs):
        return float("nan")
    return statistics.median(n for x in hfs for n in x["grad_norm_tail"])


# --- the files ---------------------------------------------------------------

def load(out_dir: str) -> Dict[str, Dict]:
    path = os.path.join(out_dir, FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {r["name"]: r for r in map(json.loads, f) if r}


def save(out_dir: str, records: Dict[str, Dict]) -> Dict[str, Dict]:
    """Merges `records` into the folder's summary (lines of runs another
    command made stay, and a line keeps the curve a plotting command gave it:
    the runs are deterministic) and returns the whole of it."""
    merged = load(out_dir)
    for name, rec in records.items():
        old = merged.get(name, {})
        merged[name] = dict(rec, **{k: old[k] for k in _CURVE_KEYS if k in old and k not in rec})
    tmp = os.path.join(out_dir, FILE + ".tmp")
    with open(tmp, "w") as f:
        for name in sorted(merged):
            f.write(json.dumps(merged[name], separators=(",", ":")) + "\n")
    os.replace(tmp, os.path.join(out_dir, FILE))
    return merged


def from_runs(out_dir: str, curve_labels: Iterable[str] = ()) -> Dict[str, Dict]:
    """The summary refreshed from the raw runs in <out>/runs/ (when there are
    any), then read back: the tables' input with or without raw runs."""
    raw = {}
    for p in sorted(glob.glob(os.path.join(out_dir, "runs", "*.json"))):
        with open(p) as f:
            raw[os.path.basename(p)[:-len(".json")]] = json.load(f)
    if raw:
        return save(out_dir, summarize_all(raw, curve_labels))
    return load(out_dir)


def facts(out_dir: str, table: str) -> Dict:
    """What `table` printed that is no run's, as save_facts kept it; for a
    table written before there was a summary, its wall time is read from
    its own first line (the only record of it)."""
    path = os.path.join(out_dir, FACTS)
    got = {}
    if os.path.exists(path):
        with open(path) as f:
            got = json.load(f).get(table, {})
    md = os.path.join(out_dir, table)
    if "wall_min" not in got and os.path.exists(md):
        with open(md) as f:  # forward.md: "seeds [...], 6.5 min (", results.md: "command 6.5 min."
            m = _WALL.search(f.read())
        if m:
            got["wall_min"] = float(m.group(1))
    return got


def save_facts(out_dir: str, table: str, **kw) -> None:
    path = os.path.join(out_dir, FACTS)
    every = {}
    if os.path.exists(path):
        with open(path) as f:
            every = json.load(f)
    every[table] = dict(every.get(table, {}), **kw)
    with open(path, "w") as f:
        json.dump(every, f, indent=1, sort_keys=True)
        f.write("\n")
