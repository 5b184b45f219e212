#!/usr/bin/env python3
"""The soak of the relay path under faults (docs/relay.md, docs/safety.md).

Real processes: gnmrd, two gnmr-relay (one per simulated node) and
gnmr-synth ranks on the real client library, 4 behind each relay, plus one
rank in a crash loop (a new process, a new instance, every few seconds)
straight to gnmrd. During the first part of the run, on a schedule:

- gnmrd is killed with -9 and started again (it restores its snapshot);
- a relay is killed with -9 and started again;
- an honest rank (the reporter first) is stopped with SIGSTOP and resumed;
- the crash-loop rank is killed and started again.

The last part (--quiet, a fraction of the run) has no faults: there the
resident memory of gnmrd and of the relays must stay flat.

Checks (a failure is printed and the exit status is 1):
- plans: at every step, the honest ranks that planned it with a decision
  hold the same (generation, digest); a rank that planned without one
  while another had one did so for a counted reason (not no_decision_yet);
- misses: each honest rank's plans without a decision for a counted
  reason equal its missed_decisions counter;
- liveness: in the quiet part every honest rank plans at least 90% of its
  steps with a decision, and every rank ran all its steps;
- memory: over the quiet part gnmrd's and each relay's RSS grow by at most
  max(8 MiB, 10%).

Usage: relay_soak.py --gnmrd G --relay R --synth S --gnmrctl C
                     [--duration 1200] [--quiet 0.3] [--keep] [--report FILE]
"""
import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STEP_MS = 50
HONEST = 8          # ranks 0-3 behind relay a, 4-7 behind relay b
WORLD = HONEST + 1  # rank 8: the crash loop, straight to gnmrd


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Soak:
    def __init__(self, a):
        self.a = a
        self.dir = tempfile.mkdtemp(prefix="gnmr-relay-soak-")
        self.gnmrd = None
        self.relays = {}
        self.ranks = {}
        self.loop = None
        self.loop_runs = 0
        self.samples = []  # (t, gnmrd rss, relay a rss, relay b rss)
        self.log = []
        self.t0 = time.monotonic()
        self.failures = []

    def now(self):
        return time.monotonic() - self.t0

    def say(self, what):
        line = f"[{self.now():7.1f}s] {what}"
        self.log.append(line)
        print(line, flush=True)

    def sock(self, name):
        return f"unix:{self.dir}/{name}.sock"

    def start_gnmrd(self):
        log = open(f"{self.dir}/gnmrd.log", "a")
        self.gnmrd = subprocess.Popen(
            [self.a.gnmrd, "--listen", self.sock("gnmrd"), "--state-dir", f"{self.dir}/state",
             "--metrics", "off", "--log-level", "info"], stdout=log, stderr=log)
        for _ in range(200):
            if subprocess.run([self.a.gnmrctl, "status", "--target", self.sock("gnmrd")],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.05)
        self.failures.append("gnmrd did not start")

    def start_relay(self, name):
        log = open(f"{self.dir}/relay-{name}.log", "a")
        self.relays[name] = subprocess.Popen(
            [self.a.relay, "--listen", self.sock(f"relay-{name}"), "--upstream",
             self.sock("gnmrd")], stdout=log, stderr=log)
        for _ in range(200):
            if os.path.exists(f"{self.dir}/relay-{name}.sock"):
                return
            time.sleep(0.05)
        self.failures.append(f"relay {name} did not start")

    def synth(self, rank, target, steps, plans=True):
        args = [self.a.synth, "--target", target, "--job", "soak", "--rank", str(rank),
                "--world-size", str(WORLD), "--steps", str(steps), "--units", "16",
                "--step-ms", str(STEP_MS), "--decision-wait-ms", "8000", "--json"]
        # Spikes now and then, so that admissions change the digests.
        for s in range(150, steps, 400):
            args += ["--spike", f"{s}:{(s // 400) % 16}:25"]
        if plans:
            args += ["--plans-out", f"{self.dir}/plans-{rank}.csv"]
        out = open(f"{self.dir}/rank{rank}.json", "w")
        err = open(f"{self.dir}/rank{rank}.log", "a")
        return subprocess.Popen(args, stdout=out, stderr=err)

    def restart_loop_rank(self):
        if self.loop is not None:
            self.loop.kill()
            self.loop.wait()
        self.loop = self.synth(HONEST, self.sock("gnmrd"), 100000, plans=False)
        self.loop_runs += 1

    def sample(self):
        self.samples.append((self.now(), rss_kib(self.gnmrd.pid),
                             rss_kib(self.relays["a"].pid), rss_kib(self.relays["b"].pid)))

    def run(self):
        a = self.a
        steps = int(a.duration * 1000 / STEP_MS)
        quiet_from = a.duration * (1 - a.quiet)
        self.start_gnmrd()
        self.start_relay("a")
        self.start_relay("b")
        for r in range(HONEST):
            self.ranks[r] = self.synth(r, self.sock("relay-a" if r < 4 else "relay-b"), steps)
        self.restart_loop_rank()
        self.say(f"{HONEST} honest ranks x {steps} steps ({STEP_MS} ms), 2 relays, a crash-loop "
                 f"rank; faults until {quiet_from:.0f} s, then quiet")
        # The fault schedule, as periods in seconds (scaled to the run).
        period = {"gnmrd": a.duration / 8, "relay": a.duration / 10, "stop": a.duration / 12,
                  "loop": a.duration / 30}
        nxt = {"gnmrd": period["gnmrd"] * 0.6, "relay": period["relay"] * 0.4,
               "stop": period["stop"] * 0.5, "loop": period["loop"]}
        relay_turn = 0
        stop_turn = 0
        stopped = None  # (rank, resume at)
        last_sample = -10.0
        while any(p.poll() is None for p in self.ranks.values()):
            t = self.now()
            if t - last_sample >= 5:
                self.sample()
                last_sample = t
            if stopped and t >= stopped[1]:
                os.kill(self.ranks[stopped[0]].pid, signal.SIGCONT)
                self.say(f"rank {stopped[0]} resumed")
                stopped = None
            if t < quiet_from:
                if t >= nxt["gnmrd"]:
                    self.say("kill -9 gnmrd")
                    self.gnmrd.kill()
                    self.gnmrd.wait()
                    time.sleep(1)
                    self.start_gnmrd()
                    self.say("gnmrd started again")
                    nxt["gnmrd"] += period["gnmrd"]
                if t >= nxt["relay"]:
                    name = "ab"[relay_turn % 2]
                    relay_turn += 1
                    self.say(f"kill -9 relay {name}")
                    self.relays[name].kill()
                    self.relays[name].wait()
                    time.sleep(0.5)
                    self.start_relay(name)
                    nxt["relay"] += period["relay"]
                if t >= nxt["stop"] and stopped is None:
                    # The reporter (the lowest live rank) first, then others.
                    rank = [0, 5, 1, 6][stop_turn % 4]
                    stop_turn += 1
                    os.kill(self.ranks[rank].pid, signal.SIGSTOP)
                    stopped = (rank, t + min(8.0, period["stop"] / 2))
                    self.say(f"SIGSTOP rank {rank}")
                    nxt["stop"] += period["stop"]
                if t >= nxt["loop"]:
                    self.restart_loop_rank()
                    nxt["loop"] += period["loop"]
            time.sleep(0.1)
        if stopped:
            os.kill(self.ranks[stopped[0]].pid, signal.SIGCONT)
        self.sample()
        self.say(f"honest ranks done; the crash-loop rank ran {self.loop_runs} times")
        for p in self.ranks.values():
            p.wait()
        return quiet_from, steps

    def stop(self):
        procs = [self.loop, self.gnmrd] + list(self.relays.values())
        for p in procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            if p is not None:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()

    def check(self, quiet_from, steps):
        plans = {}
        for r in range(HONEST):
            rows = {}
            with open(f"{self.dir}/plans-{r}.csv") as f:
                for step, has, gen, digest, reason in csv.reader(f):
                    rows[int(step)] = (has == "1", int(gen), digest, reason)
            plans[r] = rows
        summaries = {}
        for r in range(HONEST):
            with open(f"{self.dir}/rank{r}.json") as f:
                text = f.read().strip()
            summaries[r] = json.loads(text) if text else None
        compared = split = silent = 0
        for s in range(steps):
            held = [plans[r][s] for r in range(HONEST) if s in plans[r]]
            # The plan is the digest (apply step, set, global_skip): a decision
            # rebuilt by a restored gnmrd carries another generation and the
            # same digest, and is the same plan.
            decided = {d for has, _, d, _ in held if has}
            if not decided:
                continue
            compared += 1
            if len(decided) > 1:
                split += 1
                if split <= 5:
                    self.failures.append(f"step {s}: honest ranks planned with different "
                                         f"decisions {sorted(decided)}")
            for has, _, _, reason in held:
                if not has and reason == "no_decision_yet":
                    silent += 1
                    if silent <= 5:
                        self.failures.append(f"step {s}: a rank had no decision, uncounted "
                                             "(no_decision_yet), while another had one")
        counted = {}
        for r in range(HONEST):
            n = sum(1 for has, _, _, reason in plans[r].values()
                    if not has and reason not in ("none", "no_decision_yet"))
            counted[r] = n
            k = summaries[r]
            if k is None:
                self.failures.append(f"rank {r} printed no summary")
                continue
            if k["steps"] != steps:
                self.failures.append(f"rank {r} ran {k['steps']} of {steps} steps")
            if k["missed_decisions"] != n:
                self.failures.append(f"rank {r}: {n} plans missed a decision for a counted "
                                     f"reason, its counter says {k['missed_decisions']}")
        quiet_step = int(quiet_from * 1000 / STEP_MS) + 200  # past the last fault's effects
        tail = {}
        for r in range(HONEST):
            rows = [plans[r][s] for s in range(quiet_step, steps) if s in plans[r]]
            tail[r] = sum(1 for has, *_ in rows if has) / max(1, len(rows))
            if tail[r] < 0.9:
                self.failures.append(f"rank {r}: only {tail[r]:.0%} of its quiet steps had a "
                                     "decision")
        quiet = [x for x in self.samples if x[0] >= quiet_from + 20]
        growth = {}
        if len(quiet) >= 2:
            for i, name in ((1, "gnmrd"), (2, "relay a"), (3, "relay b")):
                first, last = quiet[0][i], max(x[i] for x in quiet)
                growth[name] = (first, last)
                if last - first > max(8 * 1024, first // 10):
                    self.failures.append(f"{name} RSS grew from {first} to {last} KiB in the "
                                         "quiet part")
        return compared, split, silent, counted, summaries, tail, growth

    def report(self, quiet_from, steps, results):
        compared, split, silent, counted, summaries, tail, growth = results
        lines = [f"## relay soak: {HONEST} honest ranks behind 2 relays + 1 crash-loop rank, "
                 f"{self.a.duration:.0f} s, {steps} steps of {STEP_MS} ms", ""]
        lines += ["| t (s) | gnmrd RSS (MB) | relay a RSS (MB) | relay b RSS (MB) |",
                  "| --- | --- | --- | --- |"]
        for t, g, ra, rb in self.samples[::max(1, len(self.samples) // 40)]:
            lines.append(f"| {t:.0f} | {g / 1024:.1f} | {ra / 1024:.1f} | {rb / 1024:.1f} |")
        lines += ["", "| rank | steps | decisions received | missed (counted) | plans missing "
                  "for a counted reason | quiet part with a decision |", "| --- | --- | --- | "
                  "--- | --- | --- |"]
        for r in range(HONEST):
            k = summaries.get(r) or {}
            lines.append(f"| {r} | {k.get('steps', '?')} | {k.get('decisions_received', '?')} | "
                         f"{k.get('missed_decisions', '?')} | {counted.get(r, '?')} | "
                         f"{tail.get(r, 0):.1%} |")
        lines += ["", f"steps compared: {compared}; planned with different decisions: {split}; "
                  f"uncounted misses beside a decision: {silent}; crash-loop restarts: "
                  f"{self.loop_runs}"]
        for name, (first, last) in growth.items():
            lines.append(f"{name} RSS over the quiet part: {first / 1024:.1f} -> "
                         f"{last / 1024:.1f} MB")
        lines += ["", "faults:"] + [f"  {x}" for x in self.log]
        lines += ["", "PASS" if not self.failures else "FAIL"]
        lines += [f"  - {f}" for f in self.failures]
        text = "\n".join(lines) + "\n"
        print(text)
        if self.a.report:
            with open(self.a.report, "w") as f:
                f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gnmrd", required=True)
    p.add_argument("--relay", required=True)
    p.add_argument("--synth", required=True)
    p.add_argument("--gnmrctl", required=True)
    p.add_argument("--duration", type=float, default=1200, help="seconds (default 1200)")
    p.add_argument("--quiet", type=float, default=0.3,
                   help="last fraction of the run without faults (default 0.3)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--report", help="also write the report to this file")
    a = p.parse_args()
    soak = Soak(a)
    try:
        quiet_from, steps = soak.run()
    finally:
        soak.stop()
    results = soak.check(quiet_from, steps)
    soak.report(quiet_from, steps, results)
    if a.keep or soak.failures:
        print(f"work directory: {soak.dir}")
    else:
        shutil.rmtree(soak.dir, ignore_errors=True)
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
