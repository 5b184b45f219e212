"""Tables (Markdown) and plots (PNG) of an evaluation's results, computed
from the runs' summary lines (summary.py), never from the raw runs: so the
tables rebuilt from a results folder's runs.jsonl alone are the same bytes."""
from __future__ import annotations

import math
import os
from typing import Dict, List

from . import metrics as M
from . import plan as P
from . import summary as S


class Table:
    def __init__(self, results: Dict[str, Dict], seeds: List[int]) -> None:
        # results: summary lines by run name (summary.summarize)
        self.r, self.seeds = results, seeds
        # Appended to every GNMR arm's label (forward_eval.py --set).
        self.label_suffix = ""

    def label(self, label: str) -> str:
        return label + self.label_suffix if label.startswith("GNMR") else label

    def get(self, label: str, faults: str, seed: int):
        return self.r.get(P.name(label, faults, seed))

    def per_seed(self, label: str, faults: str):
        return [(s, self.get(label, faults, s)) for s in self.seeds
                if self.get(label, faults, s) is not None]

    def row(self, label: str, faults: str = "amp") -> Dict[str, str]:
        label = self.label(label)
        runs = self.per_seed(label, faults)
        if not runs:
            return {}
        hf = {s: self.get("HF", "amp", s) for s, _ in runs}
        lc = {s: self.get("LC", faults, s) for s, _ in runs}
        clean = {s: self.get("LC-clean", "none", s) for s, _ in runs}
        rec = [S.recovery(x) for _, x in runs]
        adm = [S.admissions(x) for _, x in runs]
        n_adm, tp, events, det = (sum(a[i] for a in adm) for i in range(4))
        kinds = [x["false_admissions"] for _, x in runs]
        gaps = [M.gap_closed(x, lc[s], hf[s]) for s, x in runs if lc[s] and hf[s]]
        fgaps = [M.gap_closed(x, lc[s], clean[s]) for s, x in runs if lc[s] and clean[s]]
        return {
            "arm": label, "faults": faults, "n": str(len(runs)),
            "val": M.fmt_ci([x["val_loss"] for _, x in runs], 4),
            "gap": M.fmt_ci(gaps, pct=True) if faults != "none" else "–",
            "fgap": M.fmt_ci(fgaps, pct=True) if faults != "none" else "–",
            "spikes": f"{sum(x['spike_steps'] for _, x in runs) / len(runs):.1f}",
            "rec": f"{100 * sum(a[0] for a in rec) / len(rec):.2f}%",
            "rec_split": (f"{100 * sum(a[1] for a in rec) / len(rec):.2f} / "
                          f"{100 * sum(a[2] for a in rec) / len(rec):.2f}"),
            "adm": f"{n_adm / len(runs):.1f}",
            "fpk": (f"{sum(k[0] for k in kinds) / len(runs):.1f} / "
                    f"{sum(k[1] for k in kinds) / len(runs):.1f}"),
            "prec": f"{tp / n_adm:.2f}" if n_adm else "–",
            "recall": f"{det / events:.2f}" if events else "–",
            "ms": f"{sum(x['step_ms'] for _, x in runs) / len(runs):.1f}",
            "_gaps": gaps, "_rec": sum(a[0] for a in rec) / len(rec),
        }

    def markdown(self, rows: List[Dict[str, str]]) -> str:
        head = ("| arm | faults | seeds | val loss (fp32 path) | gap closed | fault gap closed | "
                "spike steps | recovery | faulty / false-pos. (%) | admissions | false adm. "
                "(in a fault / none) | precision | recall | ms/step |\n|" + " --- |" * 14 + "\n")
        body = "".join(
            f"| {r['arm']} | {r['faults']} | {r['n']} | {r['val']} | {r['gap']} | {r['fgap']} | "
            f"{r['spikes']} | {r['rec']} | {r['rec_split']} | {r['adm']} | {r['fpk']} | {r['prec']} | "
            f"{r['recall']} | {r['ms']} |\n" for r in rows if r)
        return head + body


def main_rows(t: Table) -> List[Dict[str, str]]:
    labels = ["HF", "LC", "LC-clean"]
    labels += [P.gnmr_label(lag, o, k) for lag in (0, 1) for o in P.MAX_O for k in P.LOCKS]
    labels += [P.gnmr_label(0, o, k, P.GROUP) for o in P.MAX_O for k in P.LOCKS]
    labels += [P.forward_label(), P.headline_label() + "-DP2", "Oracle-L0", "Oracle-L1", "Random", "GlobalClip",
               "ZClip"]
    rows = []
    for lb in labels:
        rows.append(t.row(lb, "none" if lb == "LC-clean" else "amp"))
    return rows


def side_rows(t: Table) -> List[Dict[str, str]]:
    hl = P.headline_label()
    fwd = P.forward_label()
    return [t.row(hl, "none"), t.row(fwd, "none"), t.row("LC", "att"), t.row(hl, "att"),
            t.row(fwd, "att"), t.row("Oracle-L0", "att")]


def plot_loss_diff(t: Table, path: str, arms: List[str]) -> None:
    """Training loss minus HF's per step (mean over seeds, 10-step average):
    the full range above, the same curves zoomed below (the faults that hit
    the head dominate the scale)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True,
                             gridspec_kw={"height_ratios": [1, 1.3]})
    for label in arms:
        faults = "none" if label == "LC-clean" else "amp"
        runs = t.per_seed(label, faults)
        if not runs:
            continue
        diffs = []
        for s, x in runs:
            hf = t.get("HF", "amp", s)
            diffs.append([a - b for a, b in zip(x["train_loss"], hf["train_loss"])])
        curve = M.moving_average([sum(col) / len(col) for col in zip(*diffs)], 10)
        for ax in axes:
            ax.plot(curve, label=label, lw=1.2)
    for ax in axes:
        ax.axhline(0, color="k", lw=0.5)
    axes[1].set_ylim(-0.1, 0.4)
    axes[0].set_title("Training loss − HF (amplifying faults; mean over seeds, 10-step average)")
    axes[0].set_ylabel("nats")
    axes[1].set_ylabel("nats (zoomed)")
    axes[1].set_xlabel("step")
    axes[0].legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(t: Table, path: str, seed: int, labels: List[str]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    runs = [(lb, t.get(lb, "amp", seed)) for lb in labels if t.get(lb, "amp", seed)]
    if not runs:
        return
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.4 * len(runs)), sharex=True)
    axes = axes if len(runs) > 1 else [axes]
    for ax, (label, x) in zip(axes, runs):
        nu, ns = x["units"], x["steps"]
        grid = [[0.0] * ns for _ in range(nu)]
        for u, first, last in x["timeline"]["in_force"]:
            for step in range(first, last + 1):
                grid[u][step] = 1.0
        ax.imshow(grid, aspect="auto", cmap="Blues", vmin=0, vmax=1.4, interpolation="nearest")
        for u, first, last in x["timeline"]["faults"]:
            ax.add_patch(Rectangle((first - 0.5, u - 0.5), last - first + 1,
                                   1, fill=False, edgecolor="red", lw=1.2))
        for u, st in x["timeline"]["admissions"]:
            ax.plot(st, u, marker="|", color="black", ms=7)
        ax.set_yticks(range(nu))
        ax.set_yticklabels(x["unit_names"], fontsize=6)
        ax.set_title(f"{label}, seed {seed}: blue = in recovery, red box = fault, "
                     "| = admission (observed step)", fontsize=9)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def overhead_rows(results: Dict[str, Dict], seeds: List[int]) -> List[str]:
    lines = []
    for lag in (1, 0):
        ratios = []
        for seed in seeds:
            x = results.get(P.name(f"Overhead-L{lag}", "none", seed))
            if not x:
                continue
            off, on = x["step_ms_off_on"]
            ratios.append(on / off - 1)
            lines.append(f"| lag {lag} | {seed} | {off:.2f} | {on:.2f} | {100 * (on / off - 1):+.1f}% |")
        if ratios:
            lines.append(f"| lag {lag} | mean | | | **{100 * sum(ratios) / len(ratios):+.1f}%** |")
    return lines


def paired_rows(t: Table) -> List[str]:
    """X - Y in final validation loss per seed (same batches and faults),
    mean and 95% interval: negative means X is better."""
    pairs = []
    for x in (P.headline_label(), P.gnmr_label(0, 4, 5)):
        for y in ("LC", "Random", "GlobalClip", "ZClip", "Oracle-L0", P.gnmr_label(1, 2, 20)):
            if x != y:
                pairs.append((x, y))
    for y in (P.headline_label(), "GlobalClip", "ZClip"):
        pairs.append((P.forward_label(), y))
    for o in P.MAX_O:
        for k in P.LOCKS:
            pairs.append((P.gnmr_label(0, o, k, P.GROUP), P.gnmr_label(0, o, k)))
    for y in ("GlobalClip", "ZClip", "Oracle-L0"):
        pairs.append((P.gnmr_label(0, 4, 5, P.GROUP), y))
    lines = []
    for x, y in pairs:
        d = [t.get(x, "amp", s)["val_loss"] - t.get(y, "amp", s)["val_loss"] for s in t.seeds
             if t.get(x, "amp", s) and t.get(y, "amp", s)]
        if d:
            wins = sum(1 for v in d if v < 0)
            lines.append(f"| {x} | {y} | {M.fmt_ci(d, 4)} | {wins}/{len(d)} |")
    return lines


def fmt_float(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:.3f}"


def loss_arms() -> List[str]:
    return ["LC", P.headline_label(), P.gnmr_label(0, 4, 5), P.gnmr_label(1, 2, 20),
            "Oracle-L0", "Oracle-L1", "Random", "GlobalClip", "ZClip"]


def timeline_arms() -> List[str]:
    return [P.headline_label(), P.gnmr_label(0, 4, 5), P.gnmr_label(1, 2, 20), "Oracle-L0"]


def curve_labels() -> List[str]:
    """The labels whose amplifying runs the plots draw: their summary lines
    keep the training loss and unit names (HF: the loss difference's base)."""
    return ["HF"] + loss_arms() + timeline_arms()


def write_outputs(out_dir: str, results, seeds, chosen, corpus_desc, median_norm,
                  elapsed_min: float, img_dir: str) -> str:
    """Writes the tables (Markdown) and plots from the summary lines
    `results`; returns the Markdown."""
    t = Table(results, seeds)
    os.makedirs(img_dir, exist_ok=True)
    plot_loss_diff(t, os.path.join(img_dir, "eval_loss_diff.png"), loss_arms())
    plot_timeline(t, os.path.join(img_dir, "eval_timeline.png"), seeds[0], timeline_arms())
    md = [f"Corpus: {corpus_desc}.", "",
          f"Evaluation seeds {seeds}; wall time of the whole command {elapsed_min:.1f} min.", "",
          "Chosen on the tuning seeds:", ""]
    for lag in (0, 1):
        c = chosen[f"lag{lag}"]
        md.append(f"- GNMR lag {lag}: tau {c['tau']:g}, tau_delta {c['tau_delta']:g} "
                  "(tuning table: recovery ok, mean gap closed, tau, tau_delta: "
                  + "; ".join(f"{ok}, {fmt_float(g)}, {a:g}, {b:g}" for ok, g, a, b in c["table"])
                  + ")")
    g = chosen.get(f"lag0-{P.GROUP}")
    if g:
        md.append(f"- GNMR lag 0 with q/k/v as one unit: tau {g['tau']:g}, tau_delta "
                  f"{g['tau_delta']:g} (tuning: " + "; ".join(
                      f"{ok}, {fmt_float(v)}, {a:g}, {b:g}" for ok, v, a, b in g["table"]) + ")")
    md.append(f"- global clip: {chosen['gclip']['multiple']:g} x median HF gradient norm "
              f"({median_norm:.3f}) (tuning: " + "; ".join(
                  f"{m:g}: {fmt_float(g)}" for g, m in chosen["gclip"]["table"]) + ")")
    md.append(f"- ZClip: z = {chosen['zclip']['z']:g} (tuning: " + "; ".join(
        f"{z:g}: {fmt_float(g)}" for g, z in chosen["zclip"]["table"]) + ")")
    md += ["", "### Amplifying faults (x16 scale/scale_inv mismatch)", "",
           t.markdown(main_rows(t)), "",
           "### Clean runs and attenuating faults (stale amax, x1/16)", "",
           t.markdown(side_rows(t)), "",
           "### Paired differences (same seed: same init, batches and faults)", "",
           "| X | Y | val loss X − Y (mean ± 95%) | seeds where X is better |",
           "| --- | --- | --- | --- |"] + paired_rows(t) + ["",
           "### Monitor overhead (clean LC run, monitor on in every other block of 10 steps)",
           "", "| mode | seed | ms/step without | ms/step with | overhead |",
           "| --- | --- | --- | --- | --- |"]
    md += overhead_rows(results, seeds[:3])
    text = "\n".join(md) + "\n"
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(text)
    return text
