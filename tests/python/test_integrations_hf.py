"""gnmr.integrations.hf: GNMRCallback inside a real transformers Trainer
(tiny Llama from a config, CPU): plans applied (a spiked unit clipped,
digests recorded), a NaN step skipped for real under AdamW with weight
decay, the LR schedule held on that step, and a run resumed from a
Trainer checkpoint bit-identical to an uninterrupted one, in local mode
and against gnmrd."""
from __future__ import annotations

import math
import os

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed "
                    "(scripts/python_env.sh's venv has it)")
pytest.importorskip("accelerate", reason="the transformers Trainer needs accelerate")

from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from gnmr.integrations.hf import GNMRCallback  # noqa: E402
from integ_models import TokenData, params, same, tiny_llama  # noqa: E402

SPIKED = "model.layers.0.mlp.up_proj"
CFG = {"warmup": 3, "lag": 0, "max_o": 2, "lock_steps": 3,
       "actions": [{"pattern": SPIKED, "action": "clip", "clip_min_scale": 0.01}]}


def _args(out, steps, **kw):
    base = dict(output_dir=str(out), per_device_train_batch_size=4, max_steps=steps,
                learning_rate=1e-3, weight_decay=0.1, logging_strategy="no",
                save_strategy="no", report_to="none", use_cpu=True, seed=0,
                disable_tqdm=True, dataloader_num_workers=0)
    base.update(kw)
    return TrainingArguments(**base)


class Inject(TrainerCallback):
    """Multiplies a unit's gradient at some steps, or poisons it with a
    NaN, inside backward (a tensor hook: before anything the Trainer does
    to the gradients, its global clip included); records the parameters
    and learning rate around every optimizer step."""

    def __init__(self, spikes=None, nan_at=None):
        self.spikes = spikes or {}
        self.nan_at = nan_at
        self.step = -1
        self.before, self.after, self.lr = {}, {}, {}

    def on_train_begin(self, args, state, control, model=None, **kw):
        model.get_submodule(SPIKED).weight.register_hook(self._hook)

    def _hook(self, g):
        if self.step in self.spikes:
            g = g * self.spikes[self.step]
        if self.step == self.nan_at:
            g = g.clone()
            g[0, 0] = math.nan
        return g

    def on_step_begin(self, args, state, control, **kw):
        self.step = state.global_step

    def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kw):
        self.before[state.global_step] = params(model)
        self.lr[state.global_step] = optimizer.param_groups[0]["lr"]

    def on_step_end(self, args, state, control, model=None, **kw):
        self.after[state.global_step - 1] = params(model)


class After(TrainerCallback):
    """After GNMR: the spiked unit's gradient as the optimizer gets it."""

    def __init__(self):
        self.grads = {}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        g = model.get_submodule(SPIKED).weight.grad
        self.grads[state.global_step] = None if g is None else g.clone()


def _train(out, steps, callbacks, seed=0, resume=None, stop_at=None, **kw):
    model = tiny_llama(seed)
    cbs = list(callbacks)
    if stop_at is not None:
        cbs.append(_StopAt(stop_at))
    trainer = Trainer(model=model, args=_args(out, steps, **kw), train_dataset=TokenData(),
                      callbacks=cbs)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, model


class _StopAt(TrainerCallback):
    """Ends training after optimizer step ``n`` (the checkpoint at ``n`` is
    written first): an interrupted run."""

    def __init__(self, n):
        self.n = n

    def on_step_end(self, args, state, control, **kw):
        if state.global_step >= self.n:
            control.should_training_stop = True


def test_spike_is_clipped_and_digests_recorded(tmp_path):
    inject, after = Inject(spikes={6: 1000.0}), After()
    gnmr_cb = GNMRCallback(target="local", job_id="hf-clip", config=CFG)
    before_gnmr = {}

    class Raw(TrainerCallback):  # just before GNMR: the gradient it observes
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            before_gnmr[state.global_step] = model.get_submodule(SPIKED).weight.grad.clone()

    _train(tmp_path, 9, [inject, Raw(), gnmr_cb, after])
    mon = gnmr_cb.monitor
    infos = {i.step: i for i in gnmr_cb.history}
    assert sorted(infos) == list(range(9))
    assert all(i.has_decision and i.digest != 0 for i in infos.values())
    scale = infos[6].clipped.get(SPIKED)
    assert scale is not None and scale < 0.01 + 1e-9, infos[6].clipped
    # GNMR's clip is what the optimizer got (the Trainer's global clip was
    # taken over: it runs after, and a norm-1 clip would shrink every unit).
    assert gnmr_cb._max_grad_norm == 0.0  # put back at on_train_end
    assert mon.errors == 0
    raw, got = before_gnmr[6], after.grads[6]
    # GNMR measured the spike unclipped: the Trainer's own clip (norm 1.0)
    # runs before on_pre_optimizer_step unless the callback takes it over
    assert infos[6].norms[SPIKED] == pytest.approx(float(raw.norm()), rel=1e-5)
    assert float(raw.norm()) > 10.0
    # the global clip (max_grad_norm=1.0) applies one factor <= 1 to every
    # gradient after GNMR's unit clip
    factor = float(got.norm() / (raw * scale).norm())
    assert 0 < factor <= 1.0
    assert torch.allclose(got, raw * scale * factor, rtol=1e-5, atol=1e-12)
    # no clip on the other steps of that unit
    assert SPIKED not in infos[5].clipped


def test_nan_step_is_skipped_under_adamw(tmp_path):
    inject = Inject(nan_at=5)
    gnmr_cb = GNMRCallback(target="local", job_id="hf-nan", config=CFG)
    trainer, model = _train(tmp_path, 8, [inject, gnmr_cb], lr_scheduler_type="linear")
    infos = {i.step: i for i in gnmr_cb.history}
    assert infos[5].skip_step and infos[5].nonfinite
    assert gnmr_cb.skipped_steps == 1
    # AdamW with weight decay 0.1: any update would move every parameter.
    assert same(inject.before[5], inject.after[5])
    assert not same(inject.before[4], inject.after[4])
    assert not same(inject.before[6], inject.after[6])
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # the schedule did not advance on the skipped step: step 6 runs at the
    # LR step 5 would have had
    assert inject.lr[6] == inject.lr[5]
    assert inject.lr[5] != inject.lr[4]
    # Adam's step counter: 7 updates taken out of 8 steps
    opt = trainer.optimizer.optimizer
    steps = {float(opt.state[p]["step"]) for p in model.parameters() if p in opt.state}
    assert steps == {7.0}


def _resume_case(tmp_path, target, job, spikes):
    # high_precision=True: the Linears stand for promotable units (test_presets.py)
    cfg = {"warmup": 3, "lag": 1, "max_o": 1, "lock_steps": 4}
    inject_full = Inject(spikes=spikes)
    full_cb = GNMRCallback(target=target, job_id=job + "-full", config=cfg, high_precision=True)
    _, full = _train(tmp_path / "full", 10, [inject_full, full_cb])
    full_digests = {i.step: i.digest for i in full_cb.history}
    full_promoted = {i.step: tuple(i.promoted) for i in full_cb.history}
    assert any(full_promoted[s] for s in range(4, 10)), full_promoted  # a unit in recovery

    part_cb = GNMRCallback(target=target, job_id=job, config=cfg, high_precision=True)
    _train(tmp_path / "part", 10, [Inject(spikes=spikes), part_cb], stop_at=5,
           save_strategy="steps", save_steps=5)
    assert os.path.isfile(tmp_path / "part" / "checkpoint-5" / "gnmr_state.pt")
    part_cb.close()

    res_cb = GNMRCallback(target=target, job_id=job, config=cfg, high_precision=True)
    _, resumed = _train(tmp_path / "part", 10, [Inject(spikes=spikes), res_cb],
                        resume=str(tmp_path / "part" / "checkpoint-5"))
    assert res_cb.restored_from == str(tmp_path / "part" / "checkpoint-5")
    res = {i.step: i for i in res_cb.history}
    assert sorted(res) == list(range(5, 10))
    assert {s: i.digest for s, i in res.items()} == {s: full_digests[s] for s in range(5, 10)}
    assert {s: tuple(i.promoted) for s, i in res.items()} == \
        {s: full_promoted[s] for s in range(5, 10)}
    assert same(params(full), params(resumed))
    full_cb.close()
    res_cb.close()


def test_resume_from_trainer_checkpoint_local(tmp_path):
    _resume_case(tmp_path, "local", "hf-resume", {4: 50.0, 7: 50.0})


def test_resume_from_trainer_checkpoint_gnmrd(tmp_path, gnmrd):
    _resume_case(tmp_path, gnmrd.target, "hf-resume-d", {4: 50.0, 7: 50.0})
