#!/usr/bin/env python3
"""GNMR's low-precision stress evaluation (docs/evaluation.md) in one command.

Starts a private gnmrd, tunes thresholds on the tuning seeds, runs every arm
on the evaluation seeds (two single-thread runs in parallel by default), then
writes the tables and plots. See experiments/README.md.

    /usr/bin/python3 experiments/run_eval.py               # full: ~30 min on 2 cores
    /usr/bin/python3 experiments/run_eval.py --smoke       # a few steps, for ctest

Results: <out>/runs/*.json (the raw runs, one per run; reused when present,
so an interrupted evaluation resumes; not kept in the tree, this command
regenerates them), <out>/runs.jsonl (one compact line per run, what the
tables and plots are computed from: gnmr_eval/summary.py), <out>/results.md
and <out>/chosen.json; the full run also writes the PNGs to docs/img/
(--img-dir). With --tables-only (and the same --seeds) it runs nothing and
rebuilds the tables and plots from runs.jsonl and chosen.json alone.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "experiments", "results"),
                   help="results folder (default: experiments/results)")
    p.add_argument("--seeds", type=int, default=5, help="evaluation seeds 1..N (default 5)")
    p.add_argument("--tune-seeds", type=int, default=2,
                   help="tuning seeds 101..100+N (default 2)")
    p.add_argument("--jobs", type=int, default=2, help="parallel runs (default 2)")
    p.add_argument("--gnmrd", default=os.path.join(ROOT, "build", "bin", "gnmrd"))
    p.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"),
                   help="where the built gnmr package is (default build/python)")
    p.add_argument("--img-dir", default=None,
                   help="where the PNGs go (default docs/img; <out>/img with --smoke)")
    p.add_argument("--tables-only", action="store_true",
                   help="run nothing: rebuild results.md and the plots from <out>/runs.jsonl "
                        "(refreshed from <out>/runs/ when there) and <out>/chosen.json")
    p.add_argument("--smoke", action="store_true",
                   help="90 steps, 1 seed, a reduced grid: checks the pipeline, not the claim")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    paths = [HERE, args.pythonpath]
    for pth in paths:
        sys.path.insert(0, pth)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        if not args.tables_only:  # rebuilding runs nothing: no gnmr module
            import gnmr.torch  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as e:
        print(f"run_eval: {e}: needs Debian's python3-torch and python3-matplotlib and the "
              f"built gnmr module in {args.pythonpath} (./scripts/build.sh)", file=sys.stderr)
        return 2
    from gnmr_eval import plan as P
    from gnmr_eval import report
    from gnmr_eval import summary as S

    overrides = {}
    seeds = list(range(1, args.seeds + 1))
    tune = list(range(101, 101 + args.tune_seeds))
    if args.smoke:
        overrides = dict(steps=90, batch=4, val_windows=8)
        seeds, tune = [1], [101]
        P.TAU_GRID, P.GCLIP_GRID, P.ZCLIP_GRID = P.TAU_GRID[:1], P.GCLIP_GRID[:1], P.ZCLIP_GRID[:1]
        P.MAX_O, P.LOCKS = [2], [20]
    img_dir = args.img_dir or (os.path.join(args.out, "img") if args.smoke
                               else os.path.join(ROOT, "docs", "img"))
    if args.tables_only:
        records = S.from_runs(args.out, report.curve_labels())
        try:
            with open(os.path.join(args.out, "chosen.json")) as f:
                chosen = json.load(f)
        except OSError as e:
            print(f"run_eval: {e}: --tables-only needs a finished evaluation's chosen.json",
                  file=sys.stderr)
            return 2
        facts = S.facts(args.out, "results.md")
        corpus_desc = facts.get("corpus")
        if not corpus_desc:  # a folder from before tables.json: the corpus is the same
            from gnmr_eval.data import load_corpus
            corpus_desc = load_corpus().describe()
        wall_min = facts.get("wall_min", float("nan"))
    else:
        records, chosen, corpus_desc, wall_min = run_all(args, paths, overrides, seeds, tune)
    text = report.write_outputs(args.out, records, seeds, chosen, corpus_desc,
                                chosen["median_hf_grad_norm"], wall_min, img_dir)
    print(text)
    print(f"run_eval: done; tables in {args.out}/results.md, plots in {img_dir}", flush=True)
    return 0


def run_all(args, paths, overrides, seeds, tune):
    """Every phase's runs not cached in <out>/runs/; returns the folder's
    summary lines, the choices, the corpus and the wall time (minutes)."""
    from gnmr_eval import metrics as M
    from gnmr_eval import plan as P
    from gnmr_eval import report
    from gnmr_eval import summary as S
    from gnmr_eval.data import load_corpus
    from gnmr_eval.runner import Gnmrd, Runner
    corpus = load_corpus()
    print(f"run_eval: corpus {corpus.describe()}", flush=True)

    started = time.time()
    daemon = Gnmrd(args.gnmrd)
    try:
        runner = Runner(args.out, args.jobs, daemon.target, paths, overrides)
        runner.run(P.tuning_specs(tune), "tuning")
        median_norm = statistics.median(
            n for s in tune for n in runner.results[P.name("HF", "amp", s)]["grad_norm"][50:])
        runner.run(P.gclip_tuning_specs(tune, median_norm), "tuning (global clip)")

        def gap(x, s):
            return M.gap_closed(x, runner.results[P.name("LC", "amp", s)],
                                runner.results[P.name("HF", "amp", s)])

        chosen = P.choose(runner.results, tune, gap, lambda x, s: M.recovery(x)[0])
        chosen["median_hf_grad_norm"] = median_norm
        runner.run(P.group_tuning_specs(tune), "tuning (q/k/v as one unit)")
        chosen[f"lag0-{P.GROUP}"] = P.choose_group(runner.results, tune, gap,
                                                   lambda x: M.recovery(x)[0])
        with open(os.path.join(args.out, "chosen.json"), "w") as f:
            json.dump(chosen, f, indent=1)
        print(f"run_eval: chosen on tuning seeds {tune}: lag 0 tau {chosen['lag0']['tau']:g}, "
              f"lag 1 tau {chosen['lag1']['tau']:g}, global clip x{chosen['gclip']['multiple']:g}"
              f", ZClip z {chosen['zclip']['z']:g}, q/k/v units tau "
              f"{chosen['lag0-' + P.GROUP]['tau']:g}", flush=True)
        runner.run(P.eval_specs(seeds, chosen, median_norm), "evaluation")
        runner.run(P.group_eval_specs(seeds, chosen), "evaluation (q/k/v as one unit)")
        runner.run(P.forward_specs(seeds, chosen), "evaluation (forward channel)")
        runner.run(P.random_specs(seeds, runner.results), "evaluation (random, equal budget)")
        runner.run(P.dp_specs(seeds[:1] if args.smoke else seeds, chosen),
                   "evaluation (2 DP ranks)")
        # Timed alone (jobs=1): the overhead ratio should not see the other run.
        runner.jobs = 1
        runner.run(P.overhead_specs(seeds[:3]), "overhead")
    finally:
        daemon.stop()
    records = S.save(args.out, S.summarize_all(runner.results, report.curve_labels()))
    wall_min = (time.time() - started) / 60
    S.save_facts(args.out, "results.md", wall_min=wall_min, corpus=corpus.describe())
    print(f"run_eval: runs done in {wall_min:.1f} min", flush=True)
    return records, chosen, corpus.describe(), wall_min


if __name__ == "__main__":
    sys.exit(main())
