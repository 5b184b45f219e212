"""gnmrd as a child process for the Python tests and scripts (like
tests/daemon/gnmrd_process.h): the real binary ($GNMRD) on a private Unix
socket and state directory. Needs only the gnmr package, not pytest."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import gnmr


class Gnmrd:
    """gnmrd as a child process (like tests/daemon/gnmrd_process.h)."""

    def __init__(self, config_yaml: str = "") -> None:
        self.dir = tempfile.mkdtemp(prefix="gnmrd-py-")
        self.target = f"unix:{self.dir}/gnmrd.sock"
        self.proc = None
        self.config_yaml = config_yaml

    def start(self) -> None:
        binary = os.environ["GNMRD"]
        self.log = open(os.path.join(self.dir, "gnmrd.log"), "ab")
        args = [binary, "--listen", self.target, "--state-dir", os.path.join(self.dir, "state"),
                "--metrics", "off", "--log-level", "warn"]
        if self.config_yaml:
            path = os.path.join(self.dir, "gnmrd.yaml")
            with open(path, "w") as f:
                f.write(self.config_yaml)
            args[1:1] = ["--config", path]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        # Ready when an RPC is answered: NOT_FOUND for an unknown job.
        probe = gnmr.Client(gnmr.ClientOptions(target=self.target, job_id="ready-probe"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                probe.export_state(200)
            except gnmr.UnavailableError:
                time.sleep(0.02)
                continue
            except gnmr.Error:
                return
        raise RuntimeError("gnmrd did not start: " + self.read_log())

    def kill(self) -> None:
        """kill -9: no shutdown, no final snapshot."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def read_log(self) -> str:
        with open(os.path.join(self.dir, "gnmrd.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
