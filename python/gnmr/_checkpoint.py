"""Checkpoints for gnmr.torch.Monitor: the daemon's controller state of the
job inside a training checkpoint (docs/checkpoint.md). A mixin so torch.py stays
about the per-step work; it uses the Monitor's client, options and units."""
from __future__ import annotations

import time
import warnings
from typing import Any, Dict, Optional

import torch as _torch

from gnmr import _gnmr

STATE_FORMAT = 1


class CheckpointMixin:
    """``state_dict()`` / ``load_state_dict()`` of gnmr.torch.Monitor."""


    def state_dict(self) -> Dict[str, Any]:
        """The controller state for a training checkpoint (after the daemon
        has decided the last observed step, waiting at most
        ``state_timeout_ms``); ``controller_state`` is ``None`` (with a
        warning) when the daemon cannot be reached."""
        state = None
        try:
            self._wait_decided()
            state = self.client.export_state(self._state_timeout_ms)
        except (_gnmr.Error, ValueError) as e:
            warnings.warn(f"gnmr.torch: controller state not saved: {e}", RuntimeWarning,
                          stacklevel=2)
        return {"format": STATE_FORMAT, "job_id": self.options.job_id,
                "units": self.unit_names, "controller_state": state,
                "last_observed_step": self._last_observed}

    def _wait_decided(self) -> None:
        """Waits (bounded, only while connected) until the daemon has decided
        the last observed step, so an exported state includes it."""
        if self._last_observed is None:
            return
        deadline = time.monotonic() + self._state_timeout_ms / 1000.0
        self.client.flush(self._state_timeout_ms)
        while time.monotonic() < deadline:
            k = self.client.counters()
            if not k.connected or k.last_decided_step >= self._last_observed:
                return
            time.sleep(0.005)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> bool:
        """Restores the controller state saved by ``state_dict()``. Rank 0
        imports it once registered (waits up to ``state_timeout_ms``); every
        rank then meets at a barrier when torch.distributed is initialised.
        Returns whether this rank imported. Fail-open: a daemon that cannot
        be reached gives a warning (raised with ``strict=True``); a malformed
        ``state_dict`` raises ValueError. With ``target="local"`` every rank
        imports into its own controller (no barrier needed)."""
        if not isinstance(state_dict, dict) or state_dict.get("format") != STATE_FORMAT:
            raise ValueError("gnmr.torch: not a Monitor state_dict (format "
                             f"{STATE_FORMAT} expected)")
        units = list(state_dict.get("units", []))
        if units != self.unit_names:
            raise ValueError("gnmr.torch: the checkpoint's units differ from this model's "
                             f"({len(units)} vs {len(self._units)} units)")
        state = state_dict.get("controller_state")
        imported = False
        generation = 0  # the generation the import started (0: none)
        # gnmrd: one controller for the job, imported once (rank 0). Local
        # mode: one controller per rank, each imports its own copy.
        local = getattr(self, "local", False)
        if state is not None and (self.options.rank == 0 or local):
            try:
                ok, reason = self.client.wait_connected(self._state_timeout_ms)
                if not ok:
                    raise _gnmr.UnavailableError(f"not registered with gnmrd: {reason}")
                generation = int(self.client.import_state(bytes(state), self._state_timeout_ms))
                imported = True
            except _gnmr.Error as e:
                if self._strict:
                    raise
                warnings.warn(f"gnmr.torch: controller state not restored: {e}",
                              RuntimeWarning, stacklevel=2)
        dist = _torch.distributed
        if (not local and dist.is_available() and dist.is_initialized()
                and dist.get_world_size() > 1):
            # Every rank waits for the same generation, rank 0's.
            shared = [generation]
            dist.broadcast_object_list(shared, src=0)
            generation = int(shared[0])
        if generation:
            self._wait_restored_decision(generation, state_dict.get("last_observed_step"))
        return imported

    def _wait_restored_decision(self, generation: int, last_step: Optional[int]) -> None:
        """The import starts a generation whose first decision is the
        imported state's newest; waits (bounded, only while connected) until
        this rank holds it, so the first resumed step already has its plan
        and no decision of the killed run can be applied."""
        deadline = time.monotonic() + self._state_timeout_ms / 1000.0
        while time.monotonic() < deadline:
            k = self.client.counters()
            if not k.connected:
                return
            if k.generation >= generation and (last_step is None or
                                               k.last_decided_step >= last_step):
                return
            time.sleep(0.002)
