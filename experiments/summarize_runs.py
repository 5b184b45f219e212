#!/usr/bin/env python3
"""Writes a results folder's compact summary (<out>/runs.jsonl, one line per
run, and <out>/tables.json) from its raw runs (<out>/runs/*.json): for
folders made before run_eval.py and forward_eval.py wrote it themselves.
After it, the folder's tables rebuild from the summary alone (the command
that made them with --tables-only), so runs/ can go (it is not kept in the
tree; the command regenerates it).

    /usr/bin/python3 experiments/summarize_runs.py experiments/results-*
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gnmr_eval import summary as S  # noqa: E402
from gnmr_eval.report import curve_labels  # noqa: E402

# The commands' tables whose wall time (no run's) tables.json keeps.
TABLES = ("forward.md", "results.md")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="+", help="results folders (each with a runs/ folder)")
    args = p.parse_args(argv)
    for out in args.out:
        if not os.path.isdir(os.path.join(out, "runs")):
            print(f"{out}: no runs/, left as it is")
            continue
        # run_eval.py's folders (results.md) plot: their lines keep the curves.
        plots = os.path.exists(os.path.join(out, "results.md"))
        records = S.from_runs(out, curve_labels() if plots else ())
        for table in TABLES:
            facts = S.facts(out, table)
            if facts:
                S.save_facts(out, table, **facts)
        size = os.path.getsize(os.path.join(out, S.FILE))
        print(f"{out}: {len(records)} runs -> {S.FILE} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
