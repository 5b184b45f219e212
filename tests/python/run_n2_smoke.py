"""ctest entry: setting N2's command (experiments/n2_eval.py, the block-scaled
FP8 recipe on the evaluation GPT): the sweep and every natural arm for 30
steps and every injected-fault arm on amplifying faults for 90 steps, one
seed, through the real gnmrd; then checks of what each arm did. Exit 77 (skip) without torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ARMS = {"HF", "LC-block", "GNMR-default", "GNMR-rec", "GNMR-rec-re10", "Autoswitch",
        "Autoswitch-1e-2", "Oracle-L0", "GlobalClip", "ZClip", "SkipBatch", "SPAM", "Static-head"}


def run(out, *args):
    cmd = [sys.executable, os.path.join(ROOT, "experiments", "n2_eval.py"), *args, "--seeds", "1",
           "--out", out, "--gnmrd", os.environ["GNMRD"],
           "--pythonpath", os.environ["GNMR_PYTHONPATH"]]
    print(" ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def lines(out, phase):
    with open(os.path.join(out, f"{phase}.jsonl")) as f:
        return [json.loads(x) for x in f]


def main() -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("needs torch")
        return 77
    problems = []
    with tempfile.TemporaryDirectory() as out:
        table = run(out, "sweep", "--steps", "30")
        sweep = lines(out, "sweep")
        if len(sweep) != 12 or "| LC-block |" not in table:  # 6 cells, fp32 and the recipe
            problems.append(f"sweep: {len(sweep)} runs, want 12; table:\n{table}")
        by = {(x["label"], x["seed"]): x for x in sweep}
        hf, lc = by.get(("HF-lr0.01-st30-L2", 1)), by.get(("LC-block-lr0.01-st30-L2", 1))
        if hf and lc and hf["curve"] == lc["curve"]:
            problems.append("the block recipe trained exactly as fp32: it did not run")
        table = run(out, "natural", "--steps", "30")
        natural = {x["label"] for x in lines(out, "natural")}
        want = {f"N2-{a}" for a in ("HF", "LC-block", "GNMR-default", "GNMR-rec",
                                     "Autoswitch-1e-2", "Static-head", "GlobalClip", "ZClip",
                                     "SkipBatch", "SPAM")}
        if not want <= natural or "| GNMR-rec |" not in table:
            problems.append(f"natural arms: {sorted(natural)}; table:\n{table}")
        table = run(out, "injected", "--steps", "90", "--faults", "amp")
        runs = {(x["label"], x["faults"]): x for x in lines(out, "injected") if x["seed"] == 1}
        got = {label for label, faults in runs if faults == "amp"}
        if got != ARMS:
            problems.append(f"amp arms: {sorted(got)}, want {sorted(ARMS)}")
        for (label, faults), x in runs.items():
            if x["steps"] != 90 or x["val_loss"] != x["val_loss"]:
                problems.append(f"{label}/{faults}: steps {x['steps']}, val {x['val_loss']}")
            if label.startswith("GNMR") and x["health"].get("steps_without_decision"):
                problems.append(f"{label}/{faults}: steps without a decision")
        rec = runs.get(("GNMR-rec", "amp"), {}).get("health", {})
        if not rec.get("forward_items") or not rec.get("backward_items"):
            problems.append(f"GNMR-rec handed no block tensors to its channels: {rec}")
        if runs.get(("Autoswitch", "none"), {}).get("recovery_unit_steps") != 13 * 90:
            problems.append("Autoswitch at 1e-4 did not switch every unit-step of a clean run "
                            "(E4M3's own relative error is ~7e-4)")
        static = runs.get(("Static-head", "amp"), {})
        if static.get("recovery_unit_steps") != 90:
            problems.append(f"Static-head: {static.get('recovery_unit_steps')} unit-steps, want 90")
        if "Faults: amp" not in table or "| GNMR-rec |" not in table:
            problems.append("injected.md lacks the amp table or GNMR-rec's row:\n" + table)
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
