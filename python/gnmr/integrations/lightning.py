"""GNMR for Lightning (``lightning.pytorch``): a ``Callback`` over
``gnmr.torch.Monitor`` (docs/integrations.md, "Lightning")::

    from gnmr.integrations.lightning import GNMRCallback
    trainer = L.Trainer(callbacks=[GNMRCallback(target="local", job_id="run-1")])

Where it hooks in (automatic optimization):

- ``setup`` (fit): builds the Monitor on the LightningModule (unless one
  was given).
- ``on_before_optimizer_step``: Lightning calls it after the closure's
  backward (and after gradient accumulation and AMP unscaling) and before
  its own ``gradient_clip_val`` clip, so GNMR sees the raw gradients:
  ``after_backward`` and the plan, with GNMR's step = ``trainer.global_step``.
  A NaN/Inf step (or the plan's ``global_skip``) is skipped: this hook runs
  inside the optimizer's ``step`` (the closure), so the skip is every
  gradient set to ``None``, which PyTorch's optimizers skip altogether (no
  update, no weight decay, no moment or step-count change); the step-interval
  LR schedulers do not advance on that step (their next ``step()`` is a
  no-op), as docs/recipes.md asks. With a GradScaler (16-mixed) the
  gradients are left alone: the scaler finds the inf itself and skips.
- Checkpoints: the callback's ``state_dict`` is the Monitor's, saved in
  every Lightning checkpoint under the callback's key and restored by
  ``trainer.fit(..., ckpt_path=...)`` (imported once the Monitor exists).

Manual optimization (``automatic_optimization = False``) does not call
``on_before_optimizer_step`` unless the module steps through
``self.optimizers()``; use ``gnmr.torch.Monitor`` directly there.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import lightning.pytorch as _pl

import gnmr.torch as _gt
from gnmr.integrations._common import OneShotSkip, drop_grads

__all__ = ["GNMRCallback"]


class GNMRCallback(_pl.Callback):
    """GNMR inside a Lightning ``Trainer``; see the module docstring.

    Args:
      monitor: a ready ``gnmr.torch.Monitor`` on the LightningModule;
        default: one is built at ``setup`` from the arguments below.
      target, job_id, config, strict: as ``gnmr.torch.Monitor`` (``job_id``
        defaults to the name of the Trainer's ``default_root_dir``).
      **monitor_kwargs: anything else ``gnmr.torch.Monitor`` takes.
    """

    def __init__(self, monitor: Optional[_gt.Monitor] = None, *, target: str = "local",
                 job_id: Optional[str] = None, config: Optional[Dict[str, Any]] = None,
                 strict: bool = False, **monitor_kwargs: Any):
        self.monitor = monitor
        self._target, self._job_id, self._config = target, job_id, config
        self._strict = strict
        self._monitor_kwargs = monitor_kwargs
        self._pending: Optional[Dict[str, Any]] = None  # a state loaded before the Monitor
        self._sched_skips: List[OneShotSkip] = []
        self.skipped_steps = 0
        self.restored = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self.monitor is not None:
            return
        job = self._job_id or os.path.basename(
            os.path.normpath(trainer.default_root_dir or "lightning"))
        self.monitor = _gt.Monitor(pl_module, target=self._target, job_id=job,
                                   config=self._config, strict=self._strict,
                                   **self._monitor_kwargs)
        self._import_pending()

    def on_fit_start(self, trainer, pl_module) -> None:
        self._import_pending()  # strategies that restore after setup

    def on_train_start(self, trainer, pl_module) -> None:
        self._import_pending()

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close()

    # ------------------------------------------------------------ per step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.monitor is None:
            return
        step = trainer.global_step
        self.monitor.after_backward(step)
        applied = self.monitor.apply(step, optimizer, step_optimizer=False)
        if not applied.skip_step:
            return
        self.skipped_steps += 1
        if getattr(trainer.precision_plugin, "scaler", None) is None:
            drop_grads(optimizer)  # with a scaler: its own inf check skips the step
        for cfg in trainer.lr_scheduler_configs:
            if cfg.interval == "step":
                skip = OneShotSkip()
                skip.arm(cfg.scheduler)
                self._sched_skips.append(skip)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # The step-interval schedulers ran (or were not due) by now: a skip
        # must never reach a later step.
        for skip in self._sched_skips:
            skip.disarm()
        self._sched_skips = []

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> Dict[str, Any]:
        if self.monitor is None:
            return {}
        return {"gnmr": self.monitor.state_dict()}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        if state_dict.get("gnmr") is None:
            return
        self._pending = state_dict["gnmr"]
        self._import_pending()

    def _import_pending(self) -> None:
        if self._pending is None or self.monitor is None:
            return
        state, self._pending = self._pending, None
        try:
            self.monitor.load_state_dict(state)
            self.restored = True
        except ValueError as e:  # a checkpoint of another model
            self.monitor._fail("controller state not restored", e)
