#!/usr/bin/env python3
"""Setting N1 (docs/evaluation.md, "Setting N1"): natural MX instability in
the residual-MLP proxy (mx_proxy.py), every arm paired by seed.

The divergence rule is mx_proxy.py's, fixed before the sweep. The sweep
(experiments/results-n1/sweep.md) has found no cell yet where low precision
diverges on >= 30% of seeds and fp32 on none; CELL is its edge (the one
learning rate where MXFP8 diverged on a seed fp32 survives), for the arms'
plumbing until a qualifying cell replaces it.

    /usr/bin/python3 experiments/n1_eval.py --seeds 1,2,3 --out experiments/results-n1/tune
    /usr/bin/python3 experiments/n1_eval.py --seeds 11,12,13,14,15,16,17,18,19,20 \\
        --out experiments/results-n1/heldout

Arms: hf (fp32), lc (MXFP8, no control), gnmr (gnmrd's defaults; units:
each block's LayerNorm, fc1, fc2), gnmr variants (--gnmr-config), the
paper's static fix (LayerNorm affine parameters unquantized), static fp32
blocks (first and last), AutoswitchGemm per GEMM, global clipping, ZClip,
SPAM, skip-batch. One JSON line per run in <out>/runs.jsonl (a run already
there is not repeated: an interrupted evaluation resumes), then the table
(<out>/results.md).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

# Provisional (module notes): the sweep's edge, not a qualifying cell.
CELL = dict(width=128, depth=4, batch=128, steps=3000, lr=7e-3, format="mxfp8",
            backprop="mx", ln="mx", teacher="default", noise=0.005)


def arm_specs(clip_norm, gnmr_configs):
    """name -> (cell overrides, arm constructor spec)."""
    d = CELL["depth"]
    specs = {
        "hf": ({"format": "fp32"}, ("none",)),
        "lc": ({}, ("none",)),
        "static-ln": ({"ln": "fp32"}, ("none",)),
        "static-ends": ({}, ("static", "static-ends", [
            "blocks.0.ln", "blocks.0.fc1", "blocks.0.fc2",
            f"blocks.{d - 1}.ln", f"blocks.{d - 1}.fc1", f"blocks.{d - 1}.fc2"])),
        "autoswitch": ({}, ("autoswitch",)),
        "clip": ({}, ("clip", clip_norm)),
        "zclip": ({}, ("zclip",)),
        "spam": ({}, ("spam",)),
        "skip": ({}, ("skip",)),
    }
    for name, config in gnmr_configs.items():
        specs[name] = ({}, ("gnmr", config))
    return specs


def make_arm(spec, target):
    import mx_proxy as P
    import n1_arms as A
    kind = spec[0]
    if kind == "none":
        return P.Arm()
    if kind == "static":
        return A.StaticHP(spec[1], spec[2])
    if kind == "autoswitch":
        return A.AutoswitchGemm()
    if kind == "clip":
        return A.GlobalClip(spec[1])
    if kind == "zclip":
        return A.ZClip()
    if kind == "spam":
        return A.Spam()
    if kind == "skip":
        return A.SkipBatch()
    if kind == "gnmr":
        return A.GnmrArm(target, f"n1-{uuid.uuid4().hex[:12]}", spec[1])
    raise ValueError(kind)


def _init(pythonpath):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if pythonpath and pythonpath not in sys.path:
        sys.path.insert(0, pythonpath)


def _one(job):
    import mx_proxy as P
    name, overrides, spec, seed, target, steps = job
    cell = dict(CELL, **overrides, seed=seed, steps=steps)
    r = P.run(cell, make_arm(spec, target))
    r["arm"] = name
    return r


def table(runs, arms, seeds):
    by = {(r["arm"], r["seed"]): r for r in runs}
    hf = {s: by[("hf", s)]["val_loss"] for s in seeds if ("hf", s) in by}
    lines = ["| arm | diverged | val loss (median) | val loss / HF (median) | "
             "off low-cost unit-steps | spikes (mean) | skipped steps (mean) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for a in arms:
        rs = [by[(a, s)] for s in seeds if (a, s) in by]
        if not rs:
            continue
        vals = [r["val_loss"] if r["val_loss"] is not None else float("inf") for r in rs]
        ratio = [v / hf[r["seed"]] for v, r in zip(vals, rs) if r["seed"] in hf]
        hp = sum(r["hp_unit_steps"] for r in rs) / sum(r["units"] * r["steps_run"] for r in rs)
        lines.append(
            f"| {a} | {sum(r['diverged'] for r in rs)}/{len(rs)} | {statistics.median(vals):.4g} | "
            + (f"{statistics.median(ratio):.3g}" if ratio else "-")
            + f" | {100 * hp:.2f}% | {statistics.mean(r['spikes'] for r in rs):.1f} | "
            f"{statistics.mean(r['skipped_steps'] for r in rs):.1f} |")
    lines += ["", "Per seed (diverged at step, or validation loss):", "",
              "| arm | " + " | ".join(f"s{s}" for s in seeds) + " |",
              "| --- | " + " | ".join("---" for _ in seeds) + " |"]
    for a in arms:
        cells = []
        for s in seeds:
            r = by.get((a, s))
            cells.append("-" if r is None else f"div@{r['diverged_at']}" if r["diverged"]
                         else f"{r['val_loss']:.4g}")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", required=True, help="comma-separated seeds")
    p.add_argument("--arms", default="", help="comma-separated arm names (default: all)")
    p.add_argument("--clip-norm", type=float, default=1.0,
                   help="global clipping's max norm (chosen on the tuning seeds)")
    p.add_argument("--gnmr-config", action="append", default=[],
                   metavar="NAME=JSON", help="a GNMR arm with this controller config "
                   "(repeatable); 'gnmr' (gnmrd's defaults) is always there")
    p.add_argument("--steps", type=int, default=None, help="override the cell's steps (smoke)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", required=True, help="folder: runs.jsonl (appended), results.md")
    p.add_argument("--gnmrd", default=os.path.join(ROOT, "build", "bin", "gnmrd"))
    p.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"),
                   help="where the gnmr module is (default build/python)")
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    configs = {"gnmr": {}}
    for item in a.gnmr_config:
        name, _, js = item.partition("=")
        try:
            configs[name] = json.loads(js)
        except json.JSONDecodeError as e:
            p.error(f"--gnmr-config {name}: not JSON ({e})")
    steps = a.steps or CELL["steps"]
    specs = arm_specs(a.clip_norm, configs)
    arms = a.arms.split(",") if a.arms else list(specs)
    unknown = [x for x in arms if x not in specs]
    if unknown:
        p.error(f"unknown arm(s) {unknown}; arms: {', '.join(specs)}")
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "runs.jsonl")
    runs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    have = {(r["arm"], r["seed"]) for r in runs}
    todo = [(x, s) for s in seeds for x in arms if (x, s) not in have]
    print(f"n1_eval: {len(todo)} runs to do ({len(have)} cached), cell {CELL}", flush=True)
    gnmrd = None
    if any(specs[x][1][0] == "gnmr" for x, _ in todo):
        from gnmr_eval.runner import Gnmrd
        gnmrd = Gnmrd(a.gnmrd)
    target = gnmrd.target if gnmrd else ""
    t0 = time.time()
    try:
        ctx = mp.get_context("spawn")
        with ctx.Pool(a.jobs, initializer=_init, initargs=(a.pythonpath,)) as pool, \
                open(path, "a") as out:
            jobs = [(x, specs[x][0], specs[x][1], s, target, steps) for x, s in todo]
            for i, r in enumerate(pool.imap_unordered(_one, jobs), 1):
                out.write(json.dumps(r) + "\n")
                out.flush()
                runs.append(r)
                print(f"[{time.time() - t0:6.0f} s] {i}/{len(todo)} {r['arm']} s{r['seed']}: "
                      + (f"DIVERGED at {r['diverged_at']}" if r["diverged"] else "ok")
                      + f", val {r['val_loss']}, off-LC unit-steps {r['hp_unit_steps']}"
                      f" ({r['seconds']} s)", flush=True)
    finally:
        if gnmrd:
            gnmrd.stop()
    text = table(runs, arms, seeds)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(f"Cell: {json.dumps(dict(CELL, steps=steps))}\n\n{text}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
