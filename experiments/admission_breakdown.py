#!/usr/bin/env python3
"""Where an arm's admissions and missed fault events come from.

For each seed's run of ARM on FAULTS (experiments/<out>/runs/ARM__FAULTS__sN.json,
or its line in <out>/runs.jsonl where the raw runs are not there: the
summary keeps each run's faults, admissions and units in recovery), classifies every admission (unit, observed step) against the fault schedule:
true (that unit's quantizer was faulty then), false in the same step as a true
one (a coupled neighbour), false during another step of a fault, or false with
no fault active; and every fault event as hit (admitted or already in recovery
during it) or missed, split by whether the budget (max_o) was full when it began.

    /usr/bin/python3 experiments/admission_breakdown.py GNMR-L0-o2-k20-fwd-dclip amp --seeds 8
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gnmr_eval import summary as S  # noqa: E402


def breakdown(run: dict, max_o: int) -> collections.Counter:
    schedule, admissions, in_force = run["schedule"], run["admissions"], run["in_force"]

    def faulty(unit, step):
        return any(e["unit"] == unit and e["first"] <= step <= e["last"] for e in schedule)

    def any_fault(step):
        return any(e["first"] <= step <= e["last"] for e in schedule)

    true_steps = {t for u, t in admissions if faulty(u, t)}
    c = collections.Counter()
    for u, t in admissions:
        if faulty(u, t):
            c["true"] += 1
        elif t in true_steps:
            c["false, same step as a true one"] += 1
        elif any_fault(t):
            c["false, in another fault step"] += 1
        else:
            c["false, no fault"] += 1
    for e in schedule:
        steps = range(e["first"], min(e["last"] + 1, len(in_force)))
        hit = (any(u == e["unit"] and t in steps for u, t in admissions)
               or any(e["unit"] in in_force[t] for t in steps))
        if hit:
            c["events hit"] += 1
        elif e["first"] < len(in_force) and len(in_force[e["first"]]) >= max_o:
            c["events missed, budget full"] += 1
        else:
            c["events missed, budget free"] += 1
    return c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("arm", help="run label, e.g. GNMR-L0-o2-k20-fwd-dclip")
    p.add_argument("faults", help="amp, att, grad or none")
    p.add_argument("--seeds", type=int, default=8, help="seeds 1..N (default 8)")
    p.add_argument("--max-o", type=int, default=2, help="the arm's budget (default 2)")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    total = collections.Counter()
    summary = S.load(args.out)
    for s in range(1, args.seeds + 1):
        name = f"{args.arm}__{args.faults}__s{s}"
        path = os.path.join(args.out, "runs", name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                run = json.load(f)
        elif name in summary:
            rec = summary[name]
            run = {"schedule": S.schedule(rec), "admissions": rec["timeline"]["admissions"],
                   "in_force": S.in_force(rec)}
        else:
            print(f"seed {s}: no run ({path}, {S.FILE})", file=sys.stderr)
            continue
        c = breakdown(run, args.max_o)
        total += c
        print(f"seed {s}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    print("total: " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
