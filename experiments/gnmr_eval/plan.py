"""The runs of the evaluation, phase by phase, and how tuning picks settings.

Tuning seeds (101, 102, ...) choose the thresholds; evaluation seeds (1, 2,
...) are never used for a choice. Chosen a priori (not tuned): the headline
GNMR configuration is lag 0 (the mode that can treat a fault's first step),
max_o 2 and lock_steps 20 (the default, longer than the longest fault);
every other configuration of the grid is reported too. clip_min_scale is
0.01 (the default 0.1 would leave an x16 spike at 1.6x its mean after the
entry clip); everything else is the default.
"""
from __future__ import annotations

import statistics
from typing import Dict, List

TAU_GRID = [(2.5, 1.0), (4.0, 2.0), (6.0, 4.0), (8.0, 6.0)]  # (tau, tau_delta)
GCLIP_GRID = [0.75, 1.0, 1.5]  # x the median HF gradient norm of the tuning seeds
ZCLIP_GRID = [2.0, 2.5, 3.0]
MAX_O = [1, 2, 4]
LOCKS = [5, 20]
HEADLINE = dict(lag=0, max_o=2, lock_steps=20)
BASE_CONFIG = dict(warmup=50, clip_min_scale=0.01)
RECOVERY_LIMIT = 0.05


def gnmr_label(lag: int, max_o: int, lock: int, group: str = "") -> str:
    return f"GNMR-L{lag}-o{max_o}-k{lock}" + (f"-{group}" if group else "")


def name(label: str, faults: str, seed: int) -> str:
    return f"{label}__{faults}__s{seed}"


def spec(label: str, arm: str, faults: str, seed: int, **kw) -> Dict:
    s = dict(name=name(label, faults, seed), label=label, arm=arm, faults=faults, seed=seed)
    s.update(kw)
    return s


def gnmr_spec(label, faults, seed, lag, max_o, lock, tau, tau_delta, **kw) -> Dict:
    cfg = dict(BASE_CONFIG, lag=lag, max_o=max_o, lock_steps=lock, tau=tau, tau_delta=tau_delta)
    return spec(label, "gnmr", faults, seed, config=cfg, job_id=name(label, faults, seed), **kw)


def tuning_specs(seeds: List[int]) -> List[Dict]:
    out = []
    for s in seeds:
        out += [spec("HF", "hf", "amp", s), spec("LC", "lc", "amp", s),
                spec("LC-clean", "lc", "none", s)]
        for lag in (0, 1):
            for tau, td in TAU_GRID:
                out.append(gnmr_spec(f"tune-L{lag}-tau{tau:g}", "amp", s, lag,
                                     HEADLINE["max_o"], HEADLINE["lock_steps"], tau, td))
        for z in ZCLIP_GRID:
            out.append(spec(f"tune-zclip{z:g}", "zclip", "amp", s, z=z))
    return out


# The follow-up mechanism (added after the first evaluation, from its
# analysis): q, k and v of each attention block as one GNMR unit. Its
# thresholds are tuned on the tuning seeds like the others; its grid is lag 0.
GROUP = "qkv"


def group_tuning_specs(seeds: List[int]) -> List[Dict]:
    return [gnmr_spec(f"tune-L0-tau{tau:g}-{GROUP}", "amp", s, 0, HEADLINE["max_o"],
                      HEADLINE["lock_steps"], tau, td, group=GROUP)
            for s in seeds for tau, td in TAU_GRID]


def choose_group(results: Dict[str, Dict], seeds: List[int], gap_closed, recovery) -> Dict:
    rows = []
    for tau, td in TAU_GRID:
        label = f"tune-L0-tau{tau:g}-{GROUP}"
        runs = [(results[name(label, "amp", s)], s) for s in seeds]
        rec = statistics.mean(recovery(x) for x, _ in runs)
        gap = statistics.mean(gap_closed(x, s) for x, s in runs)
        rows.append((rec <= RECOVERY_LIMIT, gap, tau, td))
    ok = [r for r in rows if r[0]] or rows
    best = max(ok, key=lambda r: r[1])
    return {"tau": best[2], "tau_delta": best[3], "table": rows}


def group_eval_specs(seeds: List[int], chosen: Dict) -> List[Dict]:
    t = chosen[f"lag0-{GROUP}"]
    return [gnmr_spec(gnmr_label(0, o, k, GROUP), "amp", s, 0, o, k, t["tau"], t["tau_delta"],
                      group=GROUP)
            for s in seeds for o in MAX_O for k in LOCKS]


def gclip_tuning_specs(seeds: List[int], median_norm: float) -> List[Dict]:
    return [spec(f"tune-gclip{m:g}", "gclip", "amp", s, max_norm=m * median_norm)
            for s in seeds for m in GCLIP_GRID]


def choose(results: Dict[str, Dict], seeds: List[int], gap_closed, recovery) -> Dict:
    """Best setting per family on the tuning seeds: highest mean gap closed,
    among those with mean recovery fraction <= RECOVERY_LIMIT (GNMR)."""
    def mean_over(label, f):
        return statistics.mean(f(results[name(label, "amp", s)], s) for s in seeds)

    chosen = {}
    for lag in (0, 1):
        rows = []
        for tau, td in TAU_GRID:
            label = f"tune-L{lag}-tau{tau:g}"
            rows.append((mean_over(label, recovery) <= RECOVERY_LIMIT,
                         mean_over(label, gap_closed), tau, td))
        ok = [r for r in rows if r[0]] or rows
        best = max(ok, key=lambda r: r[1])
        chosen[f"lag{lag}"] = {"tau": best[2], "tau_delta": best[3], "table": rows}
    zrows = [(mean_over(f"tune-zclip{z:g}", gap_closed), z) for z in ZCLIP_GRID]
    chosen["zclip"] = {"z": max(zrows)[1], "table": zrows}
    grows = [(mean_over(f"tune-gclip{m:g}", gap_closed), m) for m in GCLIP_GRID]
    chosen["gclip"] = {"multiple": max(grows)[1], "table": grows}
    return chosen


def eval_specs(seeds: List[int], chosen: Dict, median_norm: float) -> List[Dict]:
    out = []
    for s in seeds:
        out += [spec("HF", "hf", "amp", s), spec("LC", "lc", "amp", s),
                spec("LC-clean", "lc", "none", s)]
        for lag in (0, 1):
            t = chosen[f"lag{lag}"]
            for o in MAX_O:
                for k in LOCKS:
                    out.append(gnmr_spec(gnmr_label(lag, o, k), "amp", s, lag, o, k,
                                         t["tau"], t["tau_delta"]))
        out += [spec("Oracle-L0", "oracle", "amp", s, lag=0),
                spec("Oracle-L1", "oracle", "amp", s, lag=1),
                spec("GlobalClip", "gclip", "amp", s,
                     max_norm=chosen["gclip"]["multiple"] * median_norm),
                spec("ZClip", "zclip", "amp", s, z=chosen["zclip"]["z"])]
        h, t = HEADLINE, chosen["lag0"]
        hl = gnmr_label(h["lag"], h["max_o"], h["lock_steps"])
        out += [gnmr_spec(hl, "none", s, h["lag"], h["max_o"], h["lock_steps"],
                          t["tau"], t["tau_delta"]),
                spec("LC", "lc", "att", s),
                gnmr_spec(hl, "att", s, h["lag"], h["max_o"], h["lock_steps"],
                          t["tau"], t["tau_delta"]),
                spec("Oracle-L0", "oracle", "att", s, lag=0)]
    return out


def forward_specs(seeds: List[int], chosen: Dict) -> List[Dict]:
    """The forward channel: the headline configuration with each low-cost
    unit's quantized input as its forward tensors (gnmr_eval/fp8.py,
    quantizer_tensors). tau and tau_delta as the headline's; the forward
    rules' thresholds at their defaults (not tuned yet)."""
    h, t = HEADLINE, chosen["lag0"]
    return [gnmr_spec(forward_label(), faults, s, h["lag"], h["max_o"], h["lock_steps"],
                      t["tau"], t["tau_delta"], forward=True)
            for s in seeds for faults in ("amp", "att", "none")]


def forward_label() -> str:
    return headline_label() + "-fwd"


def headline_label() -> str:
    return gnmr_label(HEADLINE["lag"], HEADLINE["max_o"], HEADLINE["lock_steps"])


def random_specs(seeds: List[int], results: Dict[str, Dict]) -> List[Dict]:
    out = []
    for s in seeds:
        ref = results[name(headline_label(), "amp", s)]
        budget = sum(len(x) for x in ref["in_force"])
        out.append(spec("Random", "random", "amp", s, budget=budget,
                        lock=HEADLINE["lock_steps"]))
    return out


def dp_specs(seeds: List[int], chosen: Dict) -> List[Dict]:
    h, t = HEADLINE, chosen["lag0"]
    return [gnmr_spec(headline_label() + "-DP2", "amp", s, h["lag"], h["max_o"],
                      h["lock_steps"], t["tau"], t["tau_delta"], world_size=2)
            for s in seeds]


def overhead_specs(seeds: List[int]) -> List[Dict]:
    """The monitor's cost: clean LC runs (per seed and lag) in which the Monitor runs in
    every other block of 10 steps; thresholds so high nothing is admitted (a
    promoted unit takes the cheaper fp32 path and would skew the timing).
    Lag 1 as deployed (decision_wait 0); lag 0 waits for each decision."""
    out = []
    for seed in seeds:
        for lag, wait in ((1, 0.0), (0, 1000.0)):
            out.append(gnmr_spec(f"Overhead-L{lag}", "none", seed, lag, 2, 20, 1e9, 1e9,
                                 alternate=10, decision_wait_ms=wait))
    return out
