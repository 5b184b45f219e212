#!/usr/bin/env python3
"""Plots gnmrd's scaling against ranks (docs/perf.md, "Scaling with
reporter election") from the rows `daemon_load` printed.

Usage: bench/plot_scaling.py ROWS.md OUT.png

ROWS.md holds the table rows daemon_load prints (lines starting with
"| <ranks> x <units> |"), from any number of runs; header lines and other
text are ignored. One line per `report` mode (and ranks per stream, when
relays carry several): gnmrd CPU per step, its
decision latency p99 (histogram bucket bound) and its RSS at the end,
against ranks (log scale).
"""
from __future__ import annotations

import re
import sys
from collections import defaultdict


def parse_rows(text: str):
    rows = []
    for line in text.splitlines():
        m = re.match(r"\|\s*(\d+) x (\d+)\s*\|", line)
        if not m:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 12:
            continue  # a table from before --tp/--report
        # Since --ranks-per-stream the column after `report` says how many
        # ranks share a stream (relays: docs/relay.md).
        per_stream = int(cells[3]) if len(cells) >= 13 else 1
        tail = cells[-5:-1] if len(cells) >= 13 else cells[7:11]
        p99 = re.search(r"<= ([\d.]+) ms\s*$", tail[1])
        cpu = re.match(r"([\d.]+) ms", tail[2])
        rss = re.match(r"(\d+) MB", tail[3])
        if not (p99 and cpu and rss):
            continue
        rows.append({"ranks": int(m.group(1)), "units": int(m.group(2)), "tp": int(cells[1]),
                     "report": cells[2], "per_stream": per_stream, "p99_ms": float(p99.group(1)),
                     "cpu_ms": float(cpu.group(1)), "rss_mb": int(rss.group(1))})
    return rows


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    rows = parse_rows(open(sys.argv[1]).read())
    if not rows:
        print(f"plot_scaling: no daemon_load rows in {sys.argv[1]}", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_mode = defaultdict(list)
    relays = any(r["per_stream"] > 1 for r in rows)
    for r in rows:
        label = f"report: {r['report']}"
        if r["per_stream"] > 1:
            label += f", relays of {r['per_stream']} ranks"
        elif relays:
            label += ", a stream per rank"
        by_mode[label].append(r)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = [("cpu_ms", "gnmrd CPU per step (ms)"), ("p99_ms", "gnmrd decision latency p99 (ms, bucket)"),
              ("rss_mb", "gnmrd RSS at the end (MB)")]
    for ax, (key, title) in zip(axes, panels):
        for mode, rs in sorted(by_mode.items()):
            rs = sorted(rs, key=lambda r: r["ranks"])
            ax.plot([r["ranks"] for r in rs], [r[key] for r in rs], marker="o", label=mode)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (1,024 units each, TP 8)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"plot_scaling: {len(rows)} rows -> {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
