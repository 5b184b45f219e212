"""Runs specs on a pool of single-thread worker processes next to one gnmrd.

Results are cached as ``<out>/runs/<name>.json``: a run already there is not
repeated (an interrupted evaluation resumes; delete the folder to start
over). The tree keeps no raw run, only each run's summary line
(summary.py), which the commands write after their runs. A failed run is reported and stops the evaluation (no silent gaps).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Dict, List, Optional


def _init_worker(paths: List[str]) -> None:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    for p in paths:
        if p not in sys.path:
            sys.path.insert(0, p)
    import torch
    torch.set_num_threads(1)


def _run_one(spec: Dict) -> Dict:
    from gnmr_eval.train import run
    t0 = time.time()
    r = run(spec)
    r["wall_s"] = time.time() - t0
    return r


def _dp_rank(rank: int, spec: Dict, port: int, out_path: str, paths: List[str]) -> None:
    _init_worker(paths)
    import torch
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                         rank=rank, world_size=spec["world_size"])
    try:
        s = dict(spec, rank=rank)
        r = _run_one(s)
        with open(f"{out_path}.rank{rank}", "w") as f:
            json.dump(r, f)
    finally:
        torch.distributed.destroy_process_group()


class Gnmrd:
    """gnmrd on a private Unix socket (admin over the socket: no token);
    `config`: a gnmrd YAML file (e.g. a `controller:` section); `metrics`:
    the /metrics address (ip:port) or off."""

    def __init__(self, binary: str, config: Optional[str] = None, metrics: str = "off") -> None:
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"run_eval: gnmrd not found at {binary} (build first: "
                             "./scripts/build.sh, or pass --gnmrd)")
        self.dir = tempfile.mkdtemp(prefix="gnmr-eval-")
        self.target = f"unix:{self.dir}/gnmrd.sock"
        self.log = open(os.path.join(self.dir, "gnmrd.log"), "wb")
        cmd = [binary, *(["--config", config] if config else []), "--listen", self.target,
               "--state-dir", os.path.join(self.dir, "state"), "--metrics", metrics,
               "--log-level", "warn"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while not os.path.exists(f"{self.dir}/gnmrd.sock"):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"run_eval: gnmrd did not start (log: {self.dir}/gnmrd.log)")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Runner:
    def __init__(self, out_dir: str, jobs: int, target: str, paths: List[str],
                 overrides: Dict) -> None:
        self.dir = os.path.join(out_dir, "runs")
        os.makedirs(self.dir, exist_ok=True)
        self.jobs, self.target, self.paths, self.overrides = jobs, target, paths, overrides
        self.results: Dict[str, Dict] = {}
        self.started = time.time()

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name + ".json")

    def _load(self, name: str):
        p = self._path(name)
        if os.path.exists(p):
            with open(p) as f:
                return json.load(f)
        return None

    def _save(self, r: Dict) -> None:
        tmp = self._path(r["name"]) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(r, f)
        os.replace(tmp, self._path(r["name"]))
        self.results[r["name"]] = r

    def _prepare(self, spec: Dict) -> Dict:
        s = dict(spec, target=self.target)
        s.update(self.overrides)
        if s["arm"] == "gnmr":  # a fresh job per attempt: a resumed run starts clean
            s["job_id"] = f"{spec['job_id']}-{os.getpid()}-{int(time.time() * 1000)}"
        return s

    def run(self, specs: List[Dict], phase: str) -> None:
        todo = []
        for s in specs:
            r = self._load(s["name"])
            if r is not None:
                self.results[s["name"]] = r
            elif s["name"] not in [t["name"] for t in todo]:
                todo.append(s)
        print(f"[{self._elapsed()}] {phase}: {len(todo)} runs "
              f"({len(specs) - len(todo)} cached)", flush=True)
        dp = [s for s in todo if s.get("world_size", 1) > 1]
        single = [s for s in todo if s.get("world_size", 1) == 1]
        if single:
            # "spawn", not the default fork: this process has threads (the
            # pool's own, torch's), and a child forked while one of them held
            # an allocator lock can hang for good (seen with ASan's
            # allocator in eval_smoke: a worker stuck in malloc).
            with ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                     initializer=_init_worker,
                                     initargs=(self.paths,)) as pool:
                futures = {pool.submit(_run_one, self._prepare(s)): s for s in single}
                for i, fut in enumerate(as_completed(futures), 1):
                    s = futures[fut]
                    try:
                        r = fut.result()
                    except Exception as e:  # report and stop: no silent gaps
                        pool.shutdown(cancel_futures=True)
                        raise SystemExit(f"run_eval: run {s['name']} failed: {e!r}")
                    self._save(r)
                    print(f"[{self._elapsed()}] {phase} {i}/{len(single)} {s['name']}: "
                          f"val {r['val_loss']:.4f}, {r['wall_s']:.0f} s", flush=True)
        for s in dp:
            self._run_dp(s)
            r = self.results[s["name"]]
            print(f"[{self._elapsed()}] {phase} {s['name']} (2 ranks): val {r['val_loss']:.4f}, "
                  f"identical plans on both ranks: {r['dp_identical']}", flush=True)

    def _run_dp(self, spec: Dict) -> None:
        import torch.multiprocessing as mp
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        base = self._path(spec["name"])
        mp.spawn(_dp_rank, args=(self._prepare(spec), port, base, self.paths),
                 nprocs=spec["world_size"], join=True)
        ranks = []
        for k in range(spec["world_size"]):
            with open(f"{base}.rank{k}") as f:
                ranks.append(json.load(f))
            os.remove(f"{base}.rank{k}")
        r = ranks[0]
        r["dp_identical"] = all(x["in_force"] == r["in_force"] and
                                x["extra"]["digests"] == r["extra"]["digests"]
                                for x in ranks[1:])
        r["dp_rank_val"] = [x["val_loss"] for x in ranks]
        self._save(r)

    def _elapsed(self) -> str:
        s = int(time.time() - self.started)
        return f"{s // 60:02d}:{s % 60:02d}"
