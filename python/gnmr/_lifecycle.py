"""The lifecycle of a ``gnmr.torch.Monitor`` and how it reports problems:
``start`` (the background thread and the first connection attempt),
``close`` and the context manager, pausing the forward hooks,
``counters``, ``wait_connected``, and the one rule every part of a step
follows for an error: raised with ``strict``, else warned about once per
distinct problem in a row and counted in ``errors``.

A mixin (as gnmr/_observe.py, gnmr/_apply.py ...) so that torch.py holds
the Monitor's documentation and its construction; the state it reads is
set up in ``Monitor.__init__``.
"""
from __future__ import annotations

import warnings
from typing import TypeVar

from gnmr import _gnmr

_Self = TypeVar("_Self", bound="LifecycleMixin")


class LifecycleMixin:
    """Starting, stopping and error reporting of a Monitor (see torch.py)."""

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Starts the background thread and waits (up to
        ``connect_timeout_s``) for the outcome of the first connection
        attempt, so set-up problems surface here (raised with strict)."""
        if self._started:
            return
        self.client.start()
        self._started = True
        if self._forward is not None:
            self._forward.enabled = True
        if self._backward_hooks is not None:
            self._backward_hooks.enabled = True
        ok, reason = self.client.wait_connected(self._connect_timeout_s * 1000.0)
        self.last_connect_error = reason
        self._problems.report(at_start=True)
        if not ok and self._strict:
            raise _gnmr.Error(f"gnmr.torch: not connected to {self.options.target}: {reason}")

    def close(self) -> None:
        """Stops the background thread (queued reports are discarded) and
        removes the forward hooks."""
        if self._forward is not None:
            self._forward.remove()
        if self._backward_hooks is not None:
            self._backward_hooks.remove()
        self.client.stop()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def forward_enabled(self) -> bool:
        """Whether the forward hooks observe forward passes (``forward_tensors``
        given, started, and not paused or turned off). Set False to pause
        them (e.g. around extra forward passes that build a graph but are not
        training steps), True to resume."""
        return self._forward is not None and self._forward.enabled

    @forward_enabled.setter
    def forward_enabled(self, on: bool) -> None:
        if self._forward is not None and self._started and not self._forward.off_reason:
            self._forward.enabled = bool(on)

    def counters(self) -> _gnmr.Counters:
        return self.client.counters()

    def wait_connected(self, timeout_s: float = 5.0) -> bool:
        """Waits until this rank is registered with the daemon, or its first
        connection attempt failed, or the timeout. On False the reason is in
        ``last_connect_error`` and in a warning."""
        ok, reason = self.client.wait_connected(timeout_s * 1000.0)
        self.last_connect_error = reason
        if not ok:
            warnings.warn(f"gnmr.torch: not connected to {self.options.target}: {reason}",
                          RuntimeWarning, stacklevel=2)
        return ok

    # ------------------------------------------------------------ problems

    def _misuse(self, msg: str) -> None:
        """A call out of order: raised with strict, else warned about."""
        if self._strict:
            raise RuntimeError(msg)
        self.errors += 1
        if msg != self._last_warning:
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            self._last_warning = msg

    def _fail(self, what: str, e: Exception) -> None:
        if self._strict:
            raise e
        self.errors += 1
        msg = f"gnmr.torch: {what}: {e}"
        if msg != self._last_warning:  # one warning per distinct problem in a row
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            self._last_warning = msg
