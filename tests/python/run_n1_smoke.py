"""ctest entry: setting N1's command (experiments/n1_eval.py) for 60 steps on
one seed, every arm, through the real gnmrd, then checks of what each arm
did (the sweep's model and rule are mx_proxy.py's, exercised by the same
runs). Exit 77 (skip) without torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STEPS = 60


def main() -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("needs torch")
        return 77
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, os.path.join(ROOT, "experiments", "n1_eval.py"), "--seeds", "1",
               "--steps", str(STEPS), "--jobs", "2", "--out", out, "--gnmrd", os.environ["GNMRD"],
               "--pythonpath", os.environ["GNMR_PYTHONPATH"],
               "--gnmr-config", 'gnmr-tau2={"tau": 2, "warmup": 10}']
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        runs = {r["arm"]: r for r in map(json.loads, open(os.path.join(out, "runs.jsonl")))}
        results = open(os.path.join(out, "results.md")).read()
        # a second call finds every run cached and writes the same table
        again = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    problems = []
    want = {"hf", "lc", "static-ln", "static-ends", "autoswitch", "clip", "zclip", "spam", "skip",
            "gnmr", "gnmr-tau2"}
    if set(runs) != want:
        problems.append(f"arms run: {sorted(runs)}, want {sorted(want)}")
    for name, r in runs.items():
        if r["steps_run"] != STEPS or r["units"] != 12 or r["val_loss"] is None:
            problems.append(f"{name}: steps {r['steps_run']}, units {r['units']}, "
                            f"val {r['val_loss']}")
    if "lc" in runs and "hf" in runs and runs["lc"]["curve"] == runs["hf"]["curve"]:
        problems.append("lc trained exactly as hf: the MX path did not run")
    if "static-ln" in runs and runs["static-ln"]["curve"] == runs["lc"]["curve"]:
        problems.append("static-ln trained exactly as lc: the LayerNorm switch did nothing")
    if "static-ends" in runs and runs["static-ends"]["hp_unit_steps"] != 6 * STEPS:
        problems.append(f"static-ends: {runs['static-ends']['hp_unit_steps']} fp32 unit-steps")
    if "autoswitch" in runs and runs["autoswitch"]["hp_unit_steps"] == 0:
        problems.append("autoswitch: no GEMM switched (E4M3's relative error is above 1e-4)")
    for g in ("gnmr", "gnmr-tau2"):
        if g in runs and runs[g]["steps_without_decision"] != 0:
            problems.append(f"{g}: {runs[g]['steps_without_decision']} steps without a decision")
    if "gnmr-tau2" in runs and runs["gnmr-tau2"]["admission_count"] == 0:
        problems.append("gnmr-tau2 (tau 2 after 10 samples) admitted nothing in 60 steps")
    if "| gnmr | 0/1 |" not in results or "0 runs to do" not in again:
        problems.append("results.md lacks the gnmr row, or the second call ran again:\n"
                        + results + again)
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
