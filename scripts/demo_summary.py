#!/usr/bin/python3
"""Summarises the demo run: the ranks' gnmr-synth JSON and `gnmrctl jobs --json`.

Usage: demo_summary.py JOBS.json RANK0.json [RANK1.json ...]
Exits 1 if the ranks applied different decisions at a step they all applied.
"""
import json
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        jobs = json.load(f).get("jobs", [])
    ranks = []
    for path in argv[2:]:
        with open(path) as f:
            ranks.append(json.load(f))
    job = jobs[0] if jobs else {}
    applied = [{a["step"]: a["digest"] for a in r.get("applied", [])} for r in ranks]
    common = set(applied[0])
    for a in applied[1:]:
        common &= set(a)
    differing = sorted(s for s in common if len({a[s] for a in applied}) > 1)

    print("== summary")
    print(f"job                 {job.get('job_id', '?')} ({len(ranks)} ranks, "
          f"{job.get('units', '?')} units)")
    print(f"steps decided       {int(job.get('last_step', -1)) + 1}")
    print(f"admissions          {int(job.get('admissions', 0))}")
    print(f"denials             {int(job.get('denials', 0))}")
    print(f"recovery fraction   {100.0 * float(job.get('recovery_fraction', 0.0)):.2f}% "
          f"of unit-steps (max_o {job.get('max_o', '?')})")
    for r in ranks:
        print(f"rank {r['rank']}: {r['steps']} steps, {r['decisions_received']} decisions, "
              f"{r['missed_decisions']} missed, {r.get('reports_sent', '?')} reports sent, "
              f"{r.get('reports_held', 0)} held back, {r['dropped_reports']} dropped, "
              f"{r['promoted_unit_steps']} promoted unit-steps, "
              f"{r['global_skips']} skipped steps (non-finite)")
    if any(int(r['decisions_received']) < int(r['steps']) for r in ranks):
        print("(fewer decisions than steps: at lag 1 the decision observed at step t plans\n"
              " step t + 1, so a run's first step has none to receive, and a rank that joins\n"
              " late misses the ones made before it connected; docs/safety.md)")
    if any(int(r.get('reports_held', 0)) > 0 for r in ranks):
        print("(held back: one data-parallel replica of each shard reports for the others,\n"
              " which stand by; gnmrd checks every step that they would have said the same:\n"
              " docs/scale.md, \"Reporter election\")")
    if any(int(r['dropped_reports']) > 0 for r in ranks):
        print("(reports dropped: steps the job had already closed when that rank connected,\n"
              " e.g. a rank whose process started late, or reports a full queue pushed out;\n"
              " the rank still applied every decision it received)")
    same = "yes" if not differing else f"NO, differing at steps {differing[:10]}"
    print(f"identical decisions on every rank: {same} "
          f"({len(common)} steps applied by all ranks compared)")
    return 0 if not differing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
