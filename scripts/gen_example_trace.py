#!/usr/bin/python3
"""Generates examples/traces/example.csv, the bundled replay trace.

A synthetic but realistic per-unit gradient-statistics trace of a small
decoder (embed, 6 layers x {attn.qkv, attn.out, mlp.fc1, mlp.fc2}, lm_head):
norms follow a slow decay with autocorrelated log-normal noise, the
embedding is frozen for the first steps (sumsq 0: inactive), one unit now
and then sees no tokens, and a few faults are injected after warmup:
short x5..x20 spikes at a few units (one burst hitting five units at once,
so the max_o budget denies some), a moderate x2.2 jump that only Delta-GNMR
catches, and one NaN gradient.

Stdlib only and seeded, so the output is byte-identical on every run:
    /usr/bin/python3 scripts/gen_example_trace.py > examples/traces/example.csv
"""

import argparse
import math
import random
import sys

D_MODEL = 512
D_FF = 2048
VOCAB = 32000
LAYERS = 6

# (name, numel, base gradient norm)
def units():
    out = [("embed", VOCAB * D_MODEL, 0.9)]
    for layer in range(LAYERS):
        depth = 1.0 + 0.12 * layer  # deeper layers: slightly larger grads
        p = "layers.%d." % layer
        out += [
            (p + "attn.qkv", D_MODEL * 3 * D_MODEL, 0.35 * depth),
            (p + "attn.out", D_MODEL * D_MODEL, 0.22 * depth),
            (p + "mlp.fc1", D_MODEL * D_FF, 0.48 * depth),
            (p + "mlp.fc2", D_FF * D_MODEL, 0.41 * depth),
        ]
    out.append(("lm_head", D_MODEL * VOCAB, 1.6))
    return out


# Injected faults: step -> {unit: norm multiplier}. Multi-step spikes are
# listed step by step.
SPIKES = {
    95: {"layers.2.mlp.fc1": 8.0},
    96: {"layers.2.mlp.fc1": 6.0},
    140: {"layers.4.attn.qkv": 15.0},
    # Moderate jump: GNMR ~2.2 < tau, but ~1.2 above its short window.
    165: {"layers.1.attn.out": 2.2},
    215: {"layers.1.mlp.fc2": 5.0},
    216: {"layers.1.mlp.fc2": 5.5},
    217: {"layers.1.mlp.fc2": 5.0},
    # A burst: five units at once, more than the example budget allows.
    250: {"layers.0.attn.out": 10.0, "layers.3.mlp.fc1": 12.0,
          "layers.5.attn.qkv": 9.0, "layers.3.attn.qkv": 7.0,
          "layers.5.mlp.fc1": 11.0},
    290: {"lm_head": 20.0},
}
NAN_AT = (190, "layers.3.mlp.fc2")  # one non-finite gradient
FROZEN_EMBED_STEPS = 20             # embed frozen at first: sumsq 0
IDLE_UNIT = "layers.5.mlp.fc2"      # sees no tokens on a few steps
IDLE_STEPS = {60, 61, 230}


def fmt(x):
    if math.isnan(x):
        return "nan"
    return "%.7g" % x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=320)
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    table = units()
    log_noise = {name: 0.0 for name, _, _ in table}
    w = sys.stdout.write
    w("step,unit,sumsq,amax,nonfinite,zeros,numel\n")
    for step in range(args.steps):
        # Slow decay of gradient norms as the loss comes down.
        trend = 0.55 + 0.45 * math.exp(-step / 140.0)
        spikes = SPIKES.get(step, {})
        for name, numel, base in table:
            # AR(1) log-normal noise: neighbouring steps look alike.
            log_noise[name] = 0.7 * log_noise[name] + rng.gauss(0.0, 0.07)
            norm = base * trend * math.exp(log_noise[name])
            norm *= spikes.get(name, 1.0)
            # Peak-to-RMS ratio of a gradient tensor: a few sigmas.
            rms = norm / math.sqrt(numel)
            amax = rms * rng.uniform(4.5, 7.0)
            zeros = int(numel * rng.uniform(0.0, 2e-4))
            nonfinite = 0
            sumsq = norm * norm
            if (step, name) == NAN_AT:
                sumsq, nonfinite = float("nan"), 17
            elif ((name == "embed" and step < FROZEN_EMBED_STEPS) or
                  (name == IDLE_UNIT and step in IDLE_STEPS)):
                sumsq, amax, zeros = 0.0, 0.0, numel
            w("%d,%s,%s,%s,%d,%d,%d\n" % (step, name, fmt(sumsq), fmt(amax),
                                          nonfinite, zeros, numel))


if __name__ == "__main__":
    main()
