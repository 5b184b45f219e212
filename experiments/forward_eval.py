#!/usr/bin/env python3
"""The forward channel's evaluation, without the rest of run_eval.

Runs, on evaluation seeds 1..N (paired: a seed fixes init, batches and
faults), the headline GNMR configuration with and without the low-cost
path's quantized inputs as forward tensors, next to the references it is
judged against: HF, LC, LC-clean, the lag-0 oracle, global clipping and
ZClip, on amplifying, attenuating, gradient-quantizer ("grad") and no
faults; and both GNMR arms again with `denied: clip`; and the recommended
configuration with each unit's quantized gradient handed to the backward
channel (labels ending -bwd; docs/evaluation.md, "Follow-up 9"). Nothing
is tuned here:
GNMR's tau/tau_delta, the global clip multiple and ZClip's z are the
choices the full evaluation made on the tuning seeds (docs/evaluation.md),
the forward rules' thresholds their defaults, all fixed before any run of
this script. Runs share run_eval's cache (same names), so either command
reuses the other's runs.

    /usr/bin/python3 experiments/forward_eval.py --seeds 8   # ~15 min on 2 cores

Writes <out>/forward.md and prints it; the raw runs go to <out>/runs/ (the
cache, not kept in the tree), one summary line per run to <out>/runs.jsonl
(kept: gnmr_eval/summary.py). The same options with --tables-only run
nothing and rebuild forward.md from runs.jsonl alone.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The full evaluation's choices on tuning seeds 101-102 (docs/evaluation.md).
CHOSEN = {"lag0": {"tau": 6.0, "tau_delta": 4.0}, "gclip_multiple": 0.75, "zclip_z": 2.0}
TUNE_SEEDS = [101, 102]  # their HF runs give the median norm global clipping scales


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "experiments", "results"))
    p.add_argument("--seeds", type=int, default=8, help="evaluation seeds 1..N (default 8)")
    p.add_argument("--seed-list", default="",
                   help="comma-separated seeds instead of 1..N (e.g. the tuning seeds 101,102)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a controller key for every GNMR arm, e.g. tau_forward=4 (repeatable; "
                        "the arms' labels get -KEYVALUE, so runs never mix)")
    p.add_argument("--only", default="",
                   help="run only the arms whose label matches this regex (and HF, LC, "
                        "LC-clean, which every gap needs)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--gnmrd", default=os.path.join(ROOT, "build", "bin", "gnmrd"))
    p.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"))
    p.add_argument("--steps", type=int, default=0, help="override the run length (tests)")
    p.add_argument("--overhead-seeds", type=int, default=3,
                   help="seeds of the overhead runs, with and without forward tensors (default 3)")
    p.add_argument("--tables-only", action="store_true",
                   help="run nothing: rebuild <out>/forward.md from <out>/runs.jsonl (refreshed "
                        "from <out>/runs/ when there), given the options that made the table")
    p.add_argument("--layers", type=int, default=2,
                   help="transformer layers (default 2, the evaluation model; 4: the second "
                        "size, 25 units; its runs go to <out>-4L unless --out is given)")
    args = p.parse_args(argv)
    if args.layers != 2 and args.out == p.get_default("out"):
        args.out += f"-{args.layers}L"
    return args


def specs(P, seeds, median_norm):
    out = []
    h, t = P.HEADLINE, CHOSEN["lag0"]
    hl = P.headline_label()
    for s in seeds:
        out += [P.spec("HF", "hf", "amp", s), P.spec("LC", "lc", "amp", s),
                P.spec("LC", "lc", "att", s), P.spec("LC", "lc", "grad", s),
                P.spec("LC-clean", "lc", "none", s)]
        for faults in ("amp", "att", "grad", "none"):
            out.append(P.gnmr_spec(hl, faults, s, h["lag"], h["max_o"], h["lock_steps"],
                                   t["tau"], t["tau_delta"]))
        out += [P.spec("Oracle-L0", "oracle", "amp", s, lag=0),
                P.spec("Oracle-L0", "oracle", "att", s, lag=0),
                P.spec("Oracle-L0", "oracle", "grad", s, lag=0),
                P.spec("GlobalClip", "gclip", "amp", s,
                       max_norm=CHOSEN["gclip_multiple"] * median_norm),
                P.spec("ZClip", "zclip", "amp", s, z=CHOSEN["zclip_z"])]
    fwd = P.forward_specs(seeds, CHOSEN)
    fwd += [relabel(P, x, x["label"], "grad") for x in fwd if x["faults"] == "amp"]
    # denied: clip (a candidate the budget denies gets its gradient of that
    # step clipped to its mean), without and with forward tensors.
    clip = []
    for x in fwd + [x for x in out if x["label"] == hl]:
        c = relabel(P, x, x["label"] + "-dclip", x["faults"])
        c["config"] = dict(x["config"], denied="clip")
        clip.append(c)
    # attribution: exclusive (docs/controller.md, "Attribution"): in a step
    # where a forward rule names a root, the gradient-only candidates (its
    # coupled neighbours) are denied, so clipped, instead of taking budget.
    excl = []
    for x in fwd:
        c = relabel(P, x, x["label"] + "-dclip-excl", x["faults"])
        c["config"] = dict(x["config"], denied="clip", attribution="exclusive")
        excl.append(c)
    # ... and a lock of 10 steps (Follow-up 6, chosen on the tuning seeds),
    # built as --set lock_steps=10 builds it, so the runs are the same; and
    # with it attribution: upstream (Follow-up 8: the recommended
    # configuration with forward tensors at lag 0), as --set builds it.
    short = with_settings(P, excl, SHORT_LOCK)
    up = with_settings(P, short, UPSTREAM)
    return out + fwd + clip + excl + short + up + backward_specs(P, up)


def backward_specs(P, up):
    """The recommended configuration (``up``) with each low-cost unit's
    quantized gradient (the E5M2 grad_output of "grad"-fault runs) handed to
    the backward channel (docs/controller.md, "Backward channel"), on the
    gradient-quantizer faults, and on clean runs with that quantizer on (the
    backward rules' false admissions; "-gq" in the label: not LC-clean's
    model). tau_backward at its default, fixed before any run."""
    out = []
    for x in up:
        if x["faults"] == "grad":
            c = relabel(P, x, x["label"] + "-bwd", "grad")
            out.append(dict(c, backward=True))
        elif x["faults"] == "none":
            c = relabel(P, x, x["label"] + "-bwd-gq", "none")
            out.append(dict(c, backward=True, grad_quant=True))
            c = relabel(P, x, x["label"] + "-gq", "none")
            out.append(dict(c, grad_quant=True))
    return out


SHORT_LOCK = ["lock_steps=10"]
UPSTREAM = ["attribution=upstream"]


def settings_suffix(settings):
    """The label suffix of --set KEY=VALUE ... ("-KEYVALUE" each; "" for none)."""
    return "".join(f"-{k}{v}" for k, v in (kv.split("=", 1) for kv in settings))


def setting_value(text):
    """A --set value as the config wants it: an integer (lock_steps=10), a
    number (tau_forward=8) or a word (attribution=exclusive)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def with_settings(P, todo, settings):
    """--set KEY=VALUE on every GNMR arm, under a label that names it."""
    if not settings:
        return todo
    pairs = [kv.split("=", 1) for kv in settings]
    suffix = settings_suffix(settings)
    out = []
    for x in todo:
        if x.get("arm") == "gnmr":
            x = relabel(P, x, x["label"] + suffix, x["faults"])
            x["config"] = dict(x["config"], **{k: setting_value(v) for k, v in pairs})
        out.append(x)
    return out


def relabel(P, x, label, faults):
    n = P.name(label, faults, x["seed"])
    return dict(x, label=label, name=n, faults=faults, job_id=n)


OVERHEAD_STEPS = 600  # 60 blocks of 10 steps: 20 in each of the three modes


def overhead_specs(P, seeds):
    """The monitor's cost at lag 1 with and without forward tensors, one run
    per seed: blocks of 10 steps cycle through monitor off, gradients only,
    and gradients + forward tensors (train.py, "overhead_modes"), so both
    ratios and their difference are paired within one run. Every rule's
    threshold out of reach, so nothing is admitted (a promoted unit's fp32
    path would skew the timing)."""
    out = []
    for s in seeds:
        x = P.gnmr_spec("Overhead3-L1", "none", s, 1, 2, 20, 1e9, 1e9, alternate=10,
                        overhead_modes=3, steps=OVERHEAD_STEPS, decision_wait_ms=0.0,
                        forward=True)
        x["config"].update(tau_forward=1e9, tau_saturation=1e9, underflow_fraction=0.999)
        out.append(x)
    return out


def overhead_lines(M, P, results, seeds):
    lines = []
    grad, fwd, extra = [], [], []
    for s in seeds:
        x = results.get(P.name("Overhead3-L1", "none", s))
        if not x:
            continue
        off, g, f = x["step_ms_modes"]
        grad.append(100 * (g / off - 1))
        fwd.append(100 * (f / off - 1))
        extra.append(100 * (f - g) / off)
        lines.append(f"| {s} | {off:.2f} | {g:.2f} | {f:.2f} | {grad[-1]:+.1f}% | {fwd[-1]:+.1f}% "
                     f"| {extra[-1]:+.1f} |")
    if grad:
        lines.append(f"| mean ± 95% | | | | {M.fmt_ci(grad, 1)} | **{M.fmt_ci(fwd, 1)}** "
                     f"| {M.fmt_ci(extra, 1)} |")
    return lines


def paired(M, t, x, y, faults):
    x, y = t.label(x), t.label(y)
    d = [t.get(x, faults, s)["val_loss"] - t.get(y, faults, s)["val_loss"] for s in t.seeds
         if t.get(x, faults, s) and t.get(y, faults, s)]
    if not d:
        return None
    return f"| {x} | {y} | {faults} | {M.fmt_ci(d, 4)} | {sum(1 for v in d if v < 0)}/{len(d)} |"


def todo_specs(P, args, seeds, median_norm):
    """The runs of this command after the tuning seeds' HF runs, --only applied."""
    todo = with_settings(P, specs(P, seeds, median_norm), args.set)
    if args.only:
        keep = re.compile(args.only)
        todo = [x for x in todo if x["label"] in ("HF", "LC", "LC-clean")
                or keep.search(x["label"])]
    return todo


def main(argv=None) -> int:
    args = parse_args(argv)
    for pth in (HERE, args.pythonpath):
        sys.path.insert(0, pth)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from gnmr_eval import plan as P
    from gnmr_eval import summary as S

    seeds = ([int(x) for x in args.seed_list.split(",")] if args.seed_list
             else list(range(1, args.seeds + 1)))
    tune = [P.spec("HF", "hf", "amp", s) for s in TUNE_SEEDS]
    overhead = overhead_specs(P, list(range(1, args.overhead_seeds + 1)))
    if args.tables_only:
        every = S.from_runs(args.out)
        if not every:
            print(f"forward_eval: no runs in {args.out} ({S.FILE} or runs/)", file=sys.stderr)
            return 2
        # Global clipping's max_norm is in no run's name: the same names with nan.
        todo = todo_specs(P, args, seeds, S.median_norm(every, TUNE_SEEDS))
        wall_min = S.facts(args.out, "forward.md").get("wall_min", float("nan"))
    else:
        started = time.time()
        every, todo = run_all(args, P, S, tune, overhead, seeds)
        wall_min = (time.time() - started) / 60
        S.save_facts(args.out, "forward.md", wall_min=wall_min)
    # The table shows this command's runs only, as the runner loaded them,
    # though the summary may hold other commands' runs of the same folder.
    records = {x["name"]: every[x["name"]] for x in tune + todo + overhead
               if x["name"] in every}
    text = table(args, records, seeds, wall_min)
    with open(os.path.join(args.out, "forward.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def run_all(args, P, S, tune, overhead, seeds):
    """Runs what is not cached in <out>/runs/; returns the folder's summary
    (this command's lines refreshed) and the runs after the tuning seeds'."""
    from gnmr_eval.runner import Gnmrd, Runner  # torch in the workers only
    overrides = dict(steps=args.steps) if args.steps else {}
    overrides["layers"] = args.layers  # every run of <out> has this size
    daemon = Gnmrd(args.gnmrd)
    try:
        runner = Runner(args.out, args.jobs, daemon.target, [HERE, args.pythonpath], overrides)
        runner.run(tune, "tuning seeds (HF only)")
        median_norm = statistics.median(
            n for s in TUNE_SEEDS
            for n in runner.results[P.name("HF", "amp", s)]["grad_norm"][S.NORM_FROM:])
        todo = todo_specs(P, args, seeds, median_norm)
        runner.run(todo, "forward channel")
        # Timed alone (jobs=1), as run_eval's overhead phase, forward tensors on.
        runner.jobs = 1
        runner.run(overhead, "overhead (forward)")
    finally:
        daemon.stop()
    return S.save(args.out, S.summarize_all(runner.results)), todo


def table(args, records, seeds, wall_min) -> str:
    """forward.md from the summary lines of this command's runs."""
    from gnmr_eval import metrics as M
    from gnmr_eval import plan as P
    from gnmr_eval import summary as S
    from gnmr_eval.report import Table
    t = Table(records, seeds)
    hl, fwd = P.headline_label(), P.forward_label()
    t.label_suffix = settings_suffix(args.set)  # every GNMR label carries it (with_settings)
    short = fwd + "-dclip-excl" + settings_suffix(SHORT_LOCK)
    up = short + settings_suffix(UPSTREAM)
    rows = [t.row(lb, f) for lb, f in (
        ("HF", "amp"), ("LC", "amp"), ("LC-clean", "none"), (hl, "amp"), (fwd, "amp"),
        ("Oracle-L0", "amp"), ("GlobalClip", "amp"), ("ZClip", "amp"),
        ("LC", "att"), (hl, "att"), (fwd, "att"), ("Oracle-L0", "att"),
        ("LC", "grad"), (hl, "grad"), (fwd, "grad"), ("Oracle-L0", "grad"),
        (hl, "none"), (fwd, "none"))]
    for f in ("amp", "att", "grad", "none"):
        rows += [t.row(hl + "-dclip", f), t.row(fwd + "-dclip", f),
                 t.row(fwd + "-dclip-excl", f), t.row(short, f), t.row(up, f)]
    rows += [t.row(up + "-bwd", "grad"), t.row(up + "-gq", "none"),
             t.row(up + "-bwd-gq", "none")]
    pairs = [paired(M, t, fwd, y, f) for y, f in (
        (hl, "amp"), ("GlobalClip", "amp"), ("ZClip", "amp"), (hl, "att"), ("LC", "att"),
        (hl, "grad"), (hl, "none"))]
    for f in ("amp", "att", "grad"):
        pairs += [paired(M, t, hl + "-dclip", hl, f), paired(M, t, fwd + "-dclip", fwd, f),
                  paired(M, t, fwd + "-dclip", "GlobalClip", f),
                  paired(M, t, fwd + "-dclip-excl", fwd + "-dclip", f)]
    pairs.append(paired(M, t, fwd + "-dclip-excl", "GlobalClip", "amp"))
    pairs += [paired(M, t, short, fwd + "-dclip-excl", f) for f in ("amp", "att", "grad")]
    pairs += [paired(M, t, short, "GlobalClip", "amp"), paired(M, t, short, "ZClip", "amp")]
    pairs += [paired(M, t, up, short, f) for f in ("amp", "att", "grad", "none")]
    pairs += [paired(M, t, up, y, "amp") for y in ("GlobalClip", "ZClip", "Oracle-L0")]
    pairs += [paired(M, t, up + "-bwd", y, "grad") for y in (up, hl, "Oracle-L0")]
    md = [f"Forward channel evaluation: {args.layers} layers, seeds {seeds}, "
          f"{wall_min:.1f} min (median HF gradient norm of the tuning seeds "
          f"{S.median_norm(records, TUNE_SEEDS):.3f}).", "",
          t.markdown(rows), "",
          "| X | Y | faults | val loss X − Y (mean ± 95%) | seeds where X is better |",
          "| --- | --- | --- | --- | --- |"] + [p for p in pairs if p] + [
          "", "Monitor overhead, lag 1 (clean LC run of 600 steps, blocks of 10 steps "
          "cycling monitor off / gradients / gradients + forward tensors, timed alone; "
          "medians, the first block of each mode left out):", "",
          "| seed | ms/step off | gradients | + forward | overhead, gradients "
          "| overhead, + forward | forward's share (points) |",
          "| --- | --- | --- | --- | --- | --- | --- |"
          ] + overhead_lines(M, P, records, list(range(1, args.overhead_seeds + 1)))
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
