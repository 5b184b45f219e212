"""Loud failures for gnmr.torch.Monitor (docs/safety.md): the client's
background problems (a wrong token, a target that does not exist, a refused
registration, a config that differs from the job's) become Python warnings,
once per kind with the count so far, and ``logging`` records of the logger
``gnmr`` (at most one per kind a minute: a daemon that is down for an hour
is retried every second). With ``strict=True`` the set-up problems raise
``gnmr.Error`` instead. Fail-open covers a daemon that is down, not a
client set up wrong."""
from __future__ import annotations

import logging
import time
import warnings
from typing import Dict

from gnmr import _gnmr

log = logging.getLogger("gnmr")

# Problems of a client set up wrong: raised with strict=True.
SETUP_KINDS = ("unauthenticated", "refused", "config_differs")
LOG_INTERVAL_S = 60.0


class ProblemReporter:
    """Takes the client's problems and reports them; see the module doc."""

    def __init__(self, client: _gnmr.Client, strict: bool):
        self._client = client
        self._strict = strict
        self.counts: Dict[str, int] = {}  # kind -> occurrences so far
        self._logged: Dict[str, float] = {}  # kind -> when last logged

    def report(self, *, at_start: bool = False) -> None:
        for kind, message, count in self._client.take_problems():
            self.counts[kind] = self.counts.get(kind, 0) + int(count)
            text = f"gnmr: {kind}: {message}"
            if self._strict and (kind in SETUP_KINDS or (at_start and kind == "unreachable")):
                raise _gnmr.Error(text)
            now = time.monotonic()
            if now - self._logged.get(kind, -LOG_INTERVAL_S) >= LOG_INTERVAL_S:
                self._logged[kind] = now
                level = logging.INFO if kind == "stream" else logging.WARNING
                log.log(level, "%s (%d time(s) so far)", text, self.counts[kind])
            if self.counts[kind] == int(count) and kind != "stream":  # first of its kind
                warnings.warn(f"{text} (occurrences so far: {self.counts[kind]}; later ones "
                              "go to the 'gnmr' logger)", RuntimeWarning, stacklevel=4)
