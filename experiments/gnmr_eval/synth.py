"""gnmr-synth jobs against a real gnmrd under a given controller config.

gnmr-synth registers its units without a config, so a job gets the
daemon's `controller:` section: one private gnmrd per candidate config,
started from a YAML file written here. What the daemon decided is read back
from `gnmrctl jobs --json` (admissions, recovery fraction) and the job's
events.jsonl (admissions with their steps; the peak in recovery).
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from .runner import Gnmrd


STEP_MS = 5


@dataclass
class SynthJob:
    admissions: int
    recovery_fraction: float
    peak: int
    steps: int
    units: int
    # Reports that did not count: dropped by a rank's client, late, or
    # missing from a step the daemon closed without every rank.
    lost: int
    admitted: List[Tuple[str, int, str]] = field(default_factory=list)  # unit, step, trigger


def _config_yaml(path: str, settings: Dict[str, object]) -> None:
    with open(path, "w") as f:
        f.write("controller:\n")
        for k, v in settings.items():
            f.write(f"  {k}: {v}\n")


class SynthDaemon:
    """A private gnmrd whose default job config is `settings`."""

    def __init__(self, gnmrd: str, gnmrctl: str, synth: str, settings: Dict[str, object]):
        self.cfg_dir = tempfile.mkdtemp(prefix="gnmr-defaults-")
        cfg = os.path.join(self.cfg_dir, "gnmrd.yaml")
        _config_yaml(cfg, settings)
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            self.metrics = f"127.0.0.1:{sk.getsockname()[1]}"
        self.daemon = Gnmrd(gnmrd, config=cfg, metrics=self.metrics)
        self.gnmrctl, self.synth = gnmrctl, synth

    def close(self) -> None:
        self.daemon.stop()
        os.remove(os.path.join(self.cfg_dir, "gnmrd.yaml"))
        os.rmdir(self.cfg_dir)

    def run(self, job: str, steps: int, world_size: int = 2,
            injections: Sequence[str] = (), step_ms: int = STEP_MS) -> SynthJob:
        """Runs one job (one gnmr-synth process per rank) to its end. Steps
        are paced (step_ms) to keep the ranks together: unpaced ranks on a
        loaded machine drift more than the daemon's 64 open steps apart, and
        a step closed without a rank leaves its sharded units unevaluated."""
        procs = []
        for rank in range(world_size):
            cmd = [self.synth, "--target", self.daemon.target, "--job", job, "--rank", str(rank),
                   "--world-size", str(world_size), "--steps", str(steps),
                   "--step-ms", str(step_ms), "--json", *injections]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        dropped = 0
        for p in procs:
            out, err = p.communicate()
            if p.returncode != 0:
                raise SystemExit(f"gnmr-synth failed ({p.returncode}): {err.strip()}")
            dropped += int(json.loads(out)["dropped_reports"])
        info = self._job(job, steps)
        events = os.path.join(self.daemon.dir, "state", "jobs", job, "events.jsonl")
        admitted, peak, now = [], 0, set()
        lines = []
        if os.path.exists(events):  # created with the job's first event
            with open(events) as f:
                lines = f.read().splitlines()
        for line in lines:
            e = json.loads(line)
            if e["kind"] == "admission":
                admitted.append((e["unit"], int(e["observed_step"]), e["trigger"]))
                now.add(e["unit"])
                peak = max(peak, len(now))
            elif e["kind"] == "release":
                now.discard(e["unit"])
        metrics = self._metrics(job)
        return SynthJob(admissions=int(info["admissions"]),
                        recovery_fraction=float(info["recovery_fraction"]), peak=peak,
                        steps=int(info["last_step"]) + 1, units=int(info["units"]),
                        lost=dropped + metrics["gnmr_incomplete_steps_total"] +
                        metrics["gnmr_late_reports_total"], admitted=admitted)

    def _metrics(self, job: str) -> Dict[str, int]:
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for name in ("gnmr_incomplete_steps_total", "gnmr_late_reports_total"):
            m = re.search(r"^" + name + r'\{[^}]*job_id="' + re.escape(job) + r'"[^}]*\} (\S+)$',
                          text, re.M)
            if not m:
                raise SystemExit(f"gnmrd /metrics has no {name} of job {job}")
            out[name] = int(float(m.group(1)))
        return out

    def _job(self, job: str, steps: int) -> Dict:
        """The job's row once the daemon has decided its last step, or once
        nothing has changed for twice the step deadline (a rank whose last
        reports were dropped: the steps it did send are all decided)."""
        last, since = None, time.time()
        while True:
            out = subprocess.run([self.gnmrctl, "jobs", "--target", self.daemon.target, "--json"],
                                 capture_output=True, text=True, check=True).stdout
            row = next((j for j in json.loads(out)["jobs"] if j["job_id"] == job), None)
            if row is not None and int(row["last_step"]) == steps - 1:
                return row
            if row != last:
                last, since = row, time.time()
            elif time.time() - since > 4.0:
                if row is None:
                    raise SystemExit(f"gnmrd never registered job {job}")
                return row
            time.sleep(0.1)
