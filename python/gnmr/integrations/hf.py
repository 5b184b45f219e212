"""GNMR for the Hugging Face ``transformers.Trainer``: a ``TrainerCallback``
over ``gnmr.torch.Monitor`` (docs/integrations.md, "Hugging Face
Trainer")::

    from gnmr.integrations.hf import GNMRCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[GNMRCallback(target="local", job_id="run-1")])

Where it hooks in (transformers 5.x):

- ``on_train_begin``: builds the Monitor on the Trainer's model (unless one
  was given), and on a resumed run (``global_step > 0``) restores the
  controller state saved with that checkpoint.
- ``on_pre_optimizer_step``: the gradients are complete here (after
  gradient accumulation and the DP all-reduce): ``after_backward`` and the
  plan (promote, clip, skip units, reset_state), with GNMR's step = the
  Trainer's ``global_step`` (optimizer steps). A step with a NaN/Inf
  gradient (or the plan's ``global_skip``) is skipped for real: every
  gradient is set to ``None`` and the Trainer's ``optimizer.step()`` that
  follows is a no-op, and the LR schedule does not advance (accelerate's
  ``step_was_skipped``, the flag GradScaler's skips use), as
  docs/recipes.md, "LR scheduler on a skipped step", asks.
- Global gradient clipping (``max_grad_norm``, 1.0 by default): the Trainer
  clips before ``on_pre_optimizer_step``, which would hide a spike from
  GNMR (docs/recipes.md, "clip_grad_norm_"). The callback therefore takes
  it over: it sets ``args.max_grad_norm = 0`` for the run (the Trainer then
  logs the unclipped norm, as it logs the pre-clip norm otherwise) and
  clips with ``torch.nn.utils.clip_grad_norm_`` after GNMR's plan; put back
  at ``on_train_end``. ``take_over_grad_clip=False`` leaves it to the
  Trainer (GNMR then sees clipped gradients).
- ``on_save``: ``monitor.state_dict()`` to ``checkpoint-N/gnmr_state.pt``
  (process zero), so ``trainer.train(resume_from_checkpoint=...)`` goes on
  with the plans of an uninterrupted run (docs/checkpoint.md).

Limits: fp16 with a GradScaler (GPU): accelerate's scaler unscales only in
its own clip, so the callback unscales before it observes and updates the
scale on a skipped step; not exercised (on a CPU accelerate runs fp16
without a scaler). DeepSpeed and FSDP wrap the optimizer step themselves
and are not supported here.
"""
from __future__ import annotations

import collections
import os
import warnings
from typing import Any, Deque, Dict, Optional

import torch as _torch
from transformers import TrainerCallback

import gnmr.torch as _gt
from gnmr.integrations._common import (STATE_FILE, OneShotSkip, drop_grads, inner_optimizer,
                                       load_state, save_state)

__all__ = ["GNMRCallback"]

_CHECKPOINT_PREFIX = "checkpoint"  # transformers' PREFIX_CHECKPOINT_DIR


class GNMRCallback(TrainerCallback):
    """GNMR inside a ``transformers.Trainer``; see the module docstring.

    Args:
      monitor: a ready ``gnmr.torch.Monitor`` on the Trainer's model;
        default: one is built at ``on_train_begin`` from the arguments below.
      target, job_id, config, strict: as ``gnmr.torch.Monitor`` (``job_id``
        defaults to ``args.run_name``, else the output folder's name).
      take_over_grad_clip: clip with ``args.max_grad_norm`` after GNMR instead
        of before it (default True).
      resume_from_checkpoint: where to find the state on a resumed run when
        the checkpoint is not ``args.output_dir/checkpoint-<global_step>``.
      history: how many applied steps ``self.history`` keeps (StepInfo).
      **monitor_kwargs: anything else ``gnmr.torch.Monitor`` takes
        (``unit_filter``, ``promote_callback``, ``forward_tensors``, ...).
    """

    def __init__(self, monitor: Optional[_gt.Monitor] = None, *, target: str = "local",
                 job_id: Optional[str] = None, config: Optional[Dict[str, Any]] = None,
                 strict: bool = False, take_over_grad_clip: bool = True,
                 resume_from_checkpoint: Optional[str] = None, history: int = 256,
                 **monitor_kwargs: Any):
        self.monitor = monitor
        self._target, self._job_id, self._config = target, job_id, config
        self._strict = strict
        self._monitor_kwargs = monitor_kwargs
        self._take_over = take_over_grad_clip
        self._resume_from = resume_from_checkpoint
        self._max_grad_norm = 0.0  # the clip taken over from the Trainer (0: none)
        self._skip = OneShotSkip()
        self._skipped_outer = None  # the AcceleratedOptimizer told it skipped
        self.history: Deque[_gt.StepInfo] = collections.deque(maxlen=max(1, history))
        self.skipped_steps = 0
        self.restored_from: Optional[str] = None

    # ------------------------------------------------------------ lifecycle

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.monitor is None:
            job = self._job_id or args.run_name or os.path.basename(
                os.path.normpath(args.output_dir or "hf-trainer"))
            self.monitor = _gt.Monitor(model, target=self._target, job_id=job,
                                       config=self._config, strict=self._strict,
                                       **self._monitor_kwargs)
        if self._take_over and args.max_grad_norm and args.max_grad_norm > 0:
            self._max_grad_norm = float(args.max_grad_norm)
            args.max_grad_norm = 0.0
        if state.global_step > 0:
            self._restore(args, state)

    def _restore(self, args, state) -> None:
        """A resumed run: the Trainer restored ``global_step`` from the
        checkpoint; the state saved next to it goes back into the Monitor."""
        candidates = [self._resume_from,
                      args.resume_from_checkpoint if isinstance(args.resume_from_checkpoint, str)
                      else None,
                      os.path.join(args.output_dir or "", f"{_CHECKPOINT_PREFIX}-{state.global_step}")]
        for folder in candidates:
            if folder and os.path.isfile(os.path.join(folder, STATE_FILE)):
                if load_state(self.monitor, os.path.join(folder, STATE_FILE)):
                    self.restored_from = folder
                return
        self._warn(f"resumed at step {state.global_step} without GNMR state (no {STATE_FILE} in "
                   f"{[c for c in candidates if c]}): the controller starts fresh; pass "
                   "GNMRCallback(resume_from_checkpoint=...) if the checkpoint is elsewhere")

    def on_train_end(self, args, state, control, **kwargs):
        self._skip.disarm()
        if self._max_grad_norm > 0:
            args.max_grad_norm = self._max_grad_norm  # the caller's arguments as they were
            self._max_grad_norm = 0.0

    def close(self) -> None:
        """Stops the Monitor (its background thread)."""
        if self.monitor is not None:
            self.monitor.close()

    # ------------------------------------------------------------ per step

    def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.monitor is None:
            return
        step = state.global_step
        mon = self.monitor
        self._unscale(optimizer)  # fp16: GNMR compares true gradients, not scaled ones
        mon.after_backward(step)
        torch_opt = inner_optimizer(optimizer) if optimizer is not None else None
        applied = mon.apply(step, torch_opt, step_optimizer=False)
        if applied.skip_step:
            self._skip_step(optimizer)
        elif self._max_grad_norm > 0 and model is not None:
            try:
                _torch.nn.utils.clip_grad_norm_(
                    [p for p in model.parameters() if p.grad is not None], self._max_grad_norm)
            except RuntimeError as e:
                mon._fail(f"global clip at step {step}", e)
        info = mon.last_step_info()
        if info is not None:
            self.history.append(info)

    def _skip_step(self, optimizer) -> None:
        """The step's update must not happen: no gradient reaches the
        optimizer, its ``step()`` does nothing, and accelerate reports the
        step as skipped so the LR scheduler waits too."""
        self.skipped_steps += 1
        if optimizer is None:
            return
        scaler = getattr(optimizer, "scaler", None)

        def on_skip():
            if scaler is not None:
                try:
                    scaler.update()  # an inf still lowers the loss scale
                except (RuntimeError, AssertionError):
                    pass  # nothing recorded this step (no unscale): nothing to update
            if hasattr(optimizer, "_is_overflow"):
                optimizer._is_overflow = True  # accelerate: step_was_skipped
                self._skipped_outer = optimizer

        drop_grads(optimizer)
        self._skip.arm(optimizer, on_skip)

    @staticmethod
    def _unscale(optimizer) -> None:
        """fp16 with accelerate's GradScaler: the true gradients, for GNMR
        and the global clip (accelerate unscales only in its own clip,
        which the take-over turned off; its scaler.step knows they are)."""
        scaler = getattr(optimizer, "scaler", None)
        if scaler is None:
            return
        try:
            scaler.unscale_(inner_optimizer(optimizer))
        except RuntimeError:
            pass  # already unscaled this step

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._skip.disarm()  # the Trainer stepped (or skipped): nothing may linger

    def on_step_end(self, args, state, control, **kwargs):
        # The scheduler has read step_was_skipped by now; without a scaler
        # accelerate never resets the flag itself.
        if self._skipped_outer is not None:
            if getattr(self._skipped_outer, "scaler", None) is None:
                self._skipped_outer._is_overflow = False
            self._skipped_outer = None

    # ------------------------------------------------------------ checkpoints

    def on_save(self, args, state, control, **kwargs):
        if self.monitor is None:
            return
        folder = os.path.join(args.output_dir or "", f"{_CHECKPOINT_PREFIX}-{state.global_step}")
        # One controller state per job (every rank holds the same): process
        # zero writes it, as the Trainer writes trainer_state.json.
        if state.is_world_process_zero:
            save_state(self.monitor, folder)

    def _warn(self, msg: str) -> None:
        if self._strict:
            raise RuntimeError("gnmr.integrations.hf: " + msg)
        warnings.warn("gnmr.integrations.hf: " + msg, RuntimeWarning, stacklevel=3)
