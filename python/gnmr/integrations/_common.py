"""What the trainer callbacks share: a skipped optimizer step that is a
real skip, and the Monitor's state in a file next to a checkpoint."""
from __future__ import annotations

import os
from typing import Any, Optional

import torch as _torch

STATE_FILE = "gnmr_state.pt"


def inner_optimizer(optimizer: Any) -> Any:
    """The torch optimizer under a wrapper (accelerate's AcceleratedOptimizer,
    Lightning's LightningOptimizer keep it in ``.optimizer``)."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, _torch.optim.Optimizer) else optimizer


def drop_grads(optimizer: Any) -> None:
    """Sets every gradient the optimizer would apply to ``None``. PyTorch's
    own optimizers then skip those parameters altogether: no update, no
    weight decay, no moment or step-count change (the documented meaning
    of ``zero_grad(set_to_none=True)``; a zero gradient would still move
    Adam's moments and apply weight decay)."""
    for group in inner_optimizer(optimizer).param_groups:
        for p in group["params"]:
            p.grad = None


class OneShotSkip:
    """Makes the next ``optimizer.step()`` of one object a no-op, then
    puts the original method back. For trainers that call ``step()``
    themselves right after a callback (the transformers Trainer); an
    instance attribute shadows the class's method, so the object's own
    ``step`` (and whatever an LR scheduler wrapped around it) is restored
    exactly."""

    def __init__(self) -> None:
        self._target: Optional[Any] = None
        self._saved: Any = None
        self._had_attr = False

    @property
    def armed(self) -> bool:
        return self._target is not None

    def arm(self, optimizer: Any, on_skip=None) -> None:
        self.disarm()
        self._target = optimizer
        self._had_attr = "step" in vars(optimizer)
        self._saved = vars(optimizer).get("step")

        def skipped_step(*args, **kwargs):
            self.disarm()
            if on_skip is not None:
                on_skip()
            return None

        optimizer.step = skipped_step

    def disarm(self) -> None:
        if self._target is None:
            return
        if self._had_attr:
            self._target.step = self._saved
        else:
            vars(self._target).pop("step", None)
        self._target, self._saved, self._had_attr = None, None, False


def save_state(monitor: Any, folder: str, name: str = STATE_FILE) -> Optional[str]:
    """Writes ``monitor.state_dict()`` to ``folder/name``; returns the path,
    or None (with a warning) when it could not be written: a checkpoint
    without GNMR state still resumes, with a fresh controller."""
    try:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        _torch.save(monitor.state_dict(), path + ".tmp")
        os.replace(path + ".tmp", path)  # never a half-written state
        return path
    except (OSError, RuntimeError) as e:
        monitor._fail(f"controller state not saved in {folder}", e)
        return None


def load_state(monitor: Any, path: str) -> bool:
    """Restores a state written by ``save_state``; False (with a warning)
    when it cannot be read or does not fit this model."""
    try:
        sd = _torch.load(path, map_location="cpu", weights_only=True)  # plain data only
        monitor.load_state_dict(sd)
        return True
    except (OSError, RuntimeError, ValueError, EOFError) as e:
        monitor._fail(f"controller state not restored from {path}", e)
        return False

