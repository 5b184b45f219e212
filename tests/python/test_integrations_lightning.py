"""gnmr.integrations.lightning: GNMRCallback in a real Lightning Trainer
(CPU, no logger, no progress bar): a spiked unit clipped before Lightning's
own gradient clip, a NaN step skipped under AdamW with weight decay (the
step LR schedule held), and a run resumed from a Lightning checkpoint
bit-identical to an uninterrupted one."""
from __future__ import annotations

import math

import pytest
import torch

L = pytest.importorskip("lightning.pytorch", reason="lightning is not installed "
                        "(scripts/python_env.sh's venv has it)")

from gnmr.integrations.lightning import GNMRCallback  # noqa: E402
from gnmr_testlib import Net, batch  # noqa: E402

CFG = {"warmup": 3, "lag": 0, "max_o": 2, "lock_steps": 3,
       "actions": [{"pattern": "net.b", "action": "clip", "clip_min_scale": 0.01}]}


class Module(L.LightningModule):
    """The tests' four-Linear Net; each step's data comes from the global
    step (so a resumed run sees the same data whatever the loader does);
    spikes and a NaN enter through a tensor hook on unit b's weight."""

    def __init__(self, spikes=None, nan_at=None):
        super().__init__()
        torch.manual_seed(0)
        self.net = Net()
        self.spikes, self.nan_at = spikes or {}, nan_at
        self.net.b.weight.register_hook(self._hook)
        self.before, self.after, self.lr, self.grads = {}, {}, {}, {}

    def _hook(self, g):
        s = self.trainer.global_step
        if s in self.spikes:
            g = g * self.spikes[s]
        if s == self.nan_at:
            g = g.clone()
            g[0, 0] = math.nan
        return g

    def training_step(self, _, batch_idx):
        x, y = batch(self.trainer.global_step)
        s = self.trainer.global_step
        self.before[s] = [p.detach().clone() for p in self.parameters()]
        self.lr[s] = self.trainer.optimizers[0].param_groups[0]["lr"]
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_end(self, outputs, b, batch_idx):
        self.after[self.trainer.global_step - 1] = [p.detach().clone() for p in self.parameters()]

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Grads(L.Callback):
    """After GNMR (it comes later in the list): unit b's gradient."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        g = pl_module.net.b.weight.grad
        pl_module.grads[trainer.global_step] = None if g is None else g.clone()


def _fit(tmp_path, steps, module, callbacks, ckpt=None, **kw):
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=str(tmp_path),
                        callbacks=callbacks, **kw)
    loader = torch.utils.data.DataLoader(range(64), batch_size=1)
    trainer.fit(module, loader, ckpt_path=ckpt)
    return trainer


def test_spike_clipped_before_lightnings_clip(tmp_path):
    mod = Module(spikes={6: 1000.0})
    cb = GNMRCallback(target="local", job_id="pl-clip", config=CFG)
    seen = {}
    cb_info = L.Callback()
    cb_info.on_train_batch_end = lambda tr, pm, o, b, i: seen.__setitem__(
        tr.global_step - 1, cb.monitor.last_step_info())
    _fit(tmp_path, 9, mod, [cb, Grads(), cb_info], gradient_clip_val=1.0)
    info = seen[6]
    assert info.has_decision and info.digest != 0
    assert info.clipped.get("net.b", 1.0) <= 0.01 + 1e-9, info.clipped
    assert info.norms["net.b"] > 10.0  # measured before Lightning's norm-1 clip
    assert "net.b" not in seen[5].clipped
    assert cb.monitor.errors == 0


def test_nan_step_skipped_under_adamw(tmp_path):
    mod = Module(nan_at=5)
    cb = GNMRCallback(target="local", job_id="pl-nan", config=CFG)
    trainer = _fit(tmp_path, 8, mod, [cb])
    assert cb.skipped_steps == 1
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b))  # noqa: E731
    assert same(mod.before[5], mod.after[5])  # AdamW + weight decay did not touch them
    assert not same(mod.before[4], mod.after[4]) and not same(mod.before[6], mod.after[6])
    assert mod.lr[6] == mod.lr[5] and mod.lr[5] != mod.lr[4]  # the schedule held once
    opt = trainer.optimizers[0]
    assert {float(opt.state[p]["step"]) for p in mod.parameters()} == {7.0}


def test_resume_from_lightning_checkpoint_bit_identical(tmp_path):
    # high_precision=True: the Linears stand for promotable units (test_presets.py)
    cfg = {"warmup": 3, "lag": 1, "max_o": 1, "lock_steps": 4}
    spikes = {4: 50.0, 7: 50.0}

    def digests(cb, into):
        c = L.Callback()
        c.on_train_batch_end = lambda tr, pm, o, b, i: into.__setitem__(
            tr.global_step - 1, (cb.monitor.last_step_info().digest,
                                 tuple(cb.monitor.last_step_info().promoted)))
        return c

    full, full_d = Module(spikes=spikes), {}
    cb = GNMRCallback(target="local", job_id="pl-full", config=cfg, high_precision=True)
    _fit(tmp_path / "full", 10, full, [cb, digests(cb, full_d)])
    assert any(full_d[s][1] for s in range(5, 10)), full_d  # a unit in recovery

    part = Module(spikes=spikes)
    cb1 = GNMRCallback(target="local", job_id="pl-part", config=cfg, high_precision=True)
    t1 = _fit(tmp_path / "part", 5, part, [cb1])
    ckpt = str(tmp_path / "part.ckpt")
    t1.save_checkpoint(ckpt)
    cb1.close()

    res, res_d = Module(spikes=spikes), {}
    cb2 = GNMRCallback(target="local", job_id="pl-part", config=cfg, high_precision=True)
    _fit(tmp_path / "part", 10, res, [cb2, digests(cb2, res_d)], ckpt=ckpt)
    assert cb2.restored
    assert res_d == {s: full_d[s] for s in range(5, 10)}
    assert all(torch.equal(a, b) for a, b in zip(full.parameters(), res.parameters()))
