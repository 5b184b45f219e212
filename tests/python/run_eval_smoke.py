"""ctest entry: the evaluation's one command in its --smoke form (90 steps,
one seed, a reduced grid) through the real gnmrd, then checks of what it
wrote, and that --tables-only rebuilds the same tables and plots from the
runs' summary alone (the raw runs are not kept in the tree). Exit 77 (skip)
without torch or matplotlib."""
from __future__ import annotations

import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def run_and_load(script: str, args: list, out: str) -> dict:
    """Runs experiments/<script> with `args` into `out` through the real
    gnmrd; its runs by name."""
    cmd = [sys.executable, os.path.join(ROOT, "experiments", script)] + args + [
        "--out", out, "--gnmrd", os.environ["GNMRD"],
        "--pythonpath", os.environ["GNMR_PYTHONPATH"]]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return {os.path.basename(p)[:-5]: json.load(open(p))
            for p in glob.glob(os.path.join(out, "runs", "*.json"))}


def rebuilt_from_summary(script: str, args: list, out: str, outputs: list) -> list:
    """`script` with `args` and --tables-only on a copy of `out` without runs/
    and without `outputs`: each output must come back the same bytes."""
    problems = []
    with open(os.path.join(out, "runs.jsonl")) as f:
        lines = sum(1 for _ in f)
    raw = len(glob.glob(os.path.join(out, "runs", "*.json")))
    if lines != raw:
        problems.append(f"{script}: runs.jsonl has {lines} lines for {raw} runs")
    copy = tempfile.mkdtemp(prefix="gnmr-eval-rebuilt-")
    for name in os.listdir(out):
        if name not in ("runs", "img") and name not in outputs:
            shutil.copy(os.path.join(out, name), copy)
    run_and_load(script, args + ["--tables-only"], copy)
    for name in outputs:
        with open(os.path.join(out, name), "rb") as a, open(os.path.join(copy, name), "rb") as b:
            if a.read() != b.read():
                problems.append(f"{script} --tables-only: {name} differs from the original")
    return problems


def main() -> int:
    for mod in ("torch", "matplotlib", "gnmr._gnmr"):
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: cannot import {mod} ({e})", flush=True)
            return 77
    out = tempfile.mkdtemp(prefix="gnmr-eval-smoke-")
    runs = run_and_load("run_eval.py", ["--smoke"], out)
    problems = []
    for name, r in runs.items():
        if not math.isfinite(r["val_loss"]):
            problems.append(f"{name}: validation loss {r['val_loss']}")
        if r["arm"] == "gnmr" and r["extra"]["steps_without_decision"] and "Overhead" not in name:
            problems.append(f"{name}: {r['extra']['steps_without_decision']} steps without decision")
        if r["faults"] == "amp" and not r["schedule"]:
            problems.append(f"{name}: no faults scheduled")
    dp = runs.get("GNMR-L0-o2-k20-DP2__amp__s1")
    if dp is None or not dp["dp_identical"]:
        problems.append("2 DP ranks: missing or different plans")
    oracle = runs.get("Oracle-L0__amp__s1")
    if oracle is None or len(oracle["admissions"]) != len(oracle["schedule"]):
        problems.append("lag-0 oracle: one admission per fault expected")
    hf, lc = runs.get("HF__amp__s1"), runs.get("LC__amp__s1")
    if hf is None or lc is None or hf["val_loss"] == lc["val_loss"]:
        problems.append("HF and LC runs missing or identical")
    for f in ("results.md", "chosen.json", "img/eval_loss_diff.png", "img/eval_timeline.png"):
        if not os.path.exists(os.path.join(out, f)):
            problems.append(f"{f} not written")
    for faults in ("amp", "att", "none"):
        if "GNMR-L0-o2-k20-fwd__%s__s1" % faults not in runs:
            problems.append(f"forward channel run on {faults} faults missing")
    expected = 29  # 1 seed: tuning 7 + 1 (q/k/v units), evaluation 13 + 1, forward channel 3,
    #              random 1, DP 1, overhead 2
    if len(runs) != expected:
        problems.append(f"{len(runs)} runs, {expected} expected")
    problems += rebuilt_from_summary("run_eval.py", ["--smoke"], out, [
        "results.md", "img/eval_loss_diff.png", "img/eval_timeline.png"])
    problems += forward_eval_smoke()
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f"eval smoke: {len(runs)} runs checked", flush=True)
    return 1 if problems else 0


def forward_eval_smoke() -> list:
    """forward_eval.py (the forward channel's evaluation) in a short form:
    one arm with a --set override (an integer key), one three-way overhead
    run; then checks of what it wrote."""
    out = tempfile.mkdtemp(prefix="gnmr-forward-eval-smoke-")
    args = ["--steps", "90", "--seed-list", "1", "--only", "fwd-dclip-excl", "--set",
            "lock_steps=5", "--overhead-seeds", "1"]
    runs = run_and_load("forward_eval.py", args, out)
    problems = []
    arm = "GNMR-L0-o2-k20-fwd-dclip-excl-lock_steps5"
    for faults in ("amp", "att", "grad", "none"):
        r = runs.get(f"{arm}__{faults}__s1")
        if r is None:
            problems.append(f"forward_eval: {arm} on {faults} faults missing")
        elif r["spec"]["config"].get("lock_steps") != 5:
            problems.append(f"forward_eval: --set lock_steps=5 gave {r['spec']['config']}")
    # The recommended arm (docs/evaluation.md, Follow-up 8), --set on top.
    up = "GNMR-L0-o2-k20-fwd-dclip-excl-lock_steps10-attributionupstream-lock_steps5__amp__s1"
    config = runs.get(up, {}).get("spec", {}).get("config", {})
    if config.get("attribution") != "upstream" or config.get("lock_steps") != 5:
        problems.append(f"forward_eval: {up} missing or configured as {config}")
    overhead = runs.get("Overhead3-L1__none__s1")
    if overhead is None or sorted(set(overhead["modes"])) != [0, 1, 2]:
        problems.append("forward_eval: three-way overhead run missing or without all modes")
    text = open(os.path.join(out, "forward.md")).read()
    if "| 1 |" not in text.split("Monitor overhead", 1)[-1]:
        problems.append("forward_eval: overhead row of seed 1 not in forward.md")
    problems += rebuilt_from_summary("forward_eval.py", args, out, ["forward.md"])
    return problems


if __name__ == "__main__":
    sys.exit(main())
