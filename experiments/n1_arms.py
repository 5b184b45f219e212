"""The arms of setting N1 (docs/evaluation.md, "Setting N1"), each a
mx_proxy.Arm: what it does around a training step of the MX proxy.

- ``GnmrArm``: the real stack (gnmr.torch.Monitor, the client library,
  gnmrd); a unit in recovery runs in fp32, forward and backward.
- ``StaticHP``: named units always in fp32 (Megatron's first / last layers
  in BF16; the paper's static fix, LayerNorm affine parameters unquantized,
  is the cell's ``ln: fp32`` instead).
- ``AutoswitchGemm``: Transformer Engine's debug rule per GEMM in the same
  iteration: a GEMM whose input's underflow passes 5% or whose relative
  error passes 1e-4 runs in high precision (here: its unit, that step).
- ``GlobalClip``, ``ZClip`` (z-score clipping of the total norm),
  ``SkipBatch`` (no optimizer step on a loss spike: loss above k times its
  running mean), ``Spam`` (SPAM: Adam moments reset every 500 steps and
  spike-aware elementwise clipping at theta = 5000 times the second moment).

Every arm counts ``hp_unit_steps``: units run off the low-cost path, summed
over steps (GNMR's recovery, the static and per-GEMM rules' fp32 units).
"""
from __future__ import annotations

import mx_proxy as P


class GnmrArm(P.Arm):
    name = "gnmr"

    def __init__(self, target, job_id, config):
        self.target, self.job_id, self.config = target, job_id, dict(config)

    def setup(self, model, opt, cell):
        super().setup(model, opt, cell)
        import gnmr.torch as gt
        kinds = tuple({type(m) for _, m in model.unit_items()})
        self.monitor = gt.Monitor(model, target=self.target, job_id=self.job_id,
                                  config=self.config, strict=True,
                                  unit_filter=lambda n, m: isinstance(m, kinds),
                                  decision_wait_ms=10000.0)
        if not self.monitor.wait_connected(30):
            raise RuntimeError(f"gnmrd at {self.target} did not accept job {self.job_id}")
        self.admissions, self.prev, self.without_decision = [], set(), 0

    def before_forward(self, step):
        self.monitor.before_forward(step)

    def after_backward(self, step, loss):
        self.monitor.after_backward(step)
        applied = self.monitor.apply(step, None, step_optimizer=False)
        if step > 0 and not applied.has_decision:
            self.without_decision += 1
        now = set(applied.promoted)
        self.admissions += [(step, u) for u in sorted(now - self.prev)]
        self.prev = now
        self.hp_unit_steps += len(now)
        return not applied.skip_step

    def close(self):
        counters = self.monitor.counters().as_dict()
        self.monitor.close()
        return {"admissions": self.admissions[:200], "admission_count": len(self.admissions),
                "steps_without_decision": self.without_decision,
                "missed_decisions": counters.get("missed_decisions")}


class StaticHP(P.Arm):
    def __init__(self, name, units):
        self.name, self.units = name, units

    def setup(self, model, opt, cell):
        super().setup(model, opt, cell)
        items = dict(model.unit_items())
        missing = [u for u in self.units if u not in items]
        if missing:
            raise ValueError(f"static arm {self.name}: no unit {missing} (units: {list(items)})")
        for u in self.units:
            items[u].high_precision = True

    def after_backward(self, step, loss):
        self.hp_unit_steps += len(self.units)
        return True


class AutoswitchGemm(P.Arm):
    """Decided per GEMM from its own operands in the same forward pass: the
    QLinear observer measures the input activation and the weight as MX
    stores them and, past either threshold, reruns that GEMM in fp32."""
    name = "autoswitch"

    def __init__(self, underflow=0.05, rel_error=1e-4):
        self.underflow, self.rel_error = underflow, rel_error

    def setup(self, model, opt, cell):
        super().setup(model, opt, cell)
        self.linears = [m for _, m in model.unit_items() if hasattr(m, "force_hp")]
        for m in self.linears:
            m.observer = self._observe

    def _observe(self, m, x):
        import torch
        with torch.no_grad():
            for t in (x, m.weight):
                q = P.mx_quantize(t, m.fmt)
                under = float(((t != 0) & (q == 0)).float().mean())
                err = float(((t - q) ** 2).sum() / (t ** 2).sum().clamp_min(1e-30))
                if under > self.underflow or err > self.rel_error:
                    m.force_hp = True
                    return

    def before_forward(self, step):
        for m in self.linears:
            m.force_hp = False

    def after_backward(self, step, loss):
        self.hp_unit_steps += sum(m.force_hp for m in self.linears)
        return True


class GlobalClip(P.Arm):
    def __init__(self, max_norm):
        self.name, self.max_norm = f"clip{max_norm:g}", max_norm

    def after_backward(self, step, loss):
        import torch
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        return True


class ZClip(P.Arm):
    """The main evaluation's ZClip (gnmr_eval/arms.py, ``ZClipArm``) on the
    proxy: EMA mean and variance of the total gradient norm, a norm whose
    z-score passes ``z`` scaled to mean + z * std."""

    def __init__(self, z=2.5):
        self.name, self.z = f"zclip{z:g}", z

    def setup(self, model, opt, cell):
        super().setup(model, opt, cell)
        from gnmr_eval.arms import ZClipArm
        self.inner = ZClipArm(self.z)
        self.inner.model = model

    def after_backward(self, step, loss):
        return self.inner.after_backward(step)

    def close(self):
        return {"clipped_steps": self.inner.clipped}


class SkipBatch(P.Arm):
    """No optimizer step on a loss spike (gnmr_eval.metrics.LossSpikes: above
    ``factor`` times the loss's running mean, after 100 steps), as
    llm-foundry's and Lightning users' loss-spike callbacks skip the
    batch."""

    def __init__(self, factor=2.0):
        self.name, self.factor = f"skip{factor:g}", factor

    def setup(self, model, opt, cell):
        super().setup(model, opt, cell)
        self.spikes = P.LossSpikes(self.factor)

    def after_backward(self, step, loss):
        return not self.spikes.is_spike(step, loss)


class Spam(P.Arm):
    """SPAM (Huang et al. 2025) on Adam: both moments reset every
    ``interval`` steps, and before each step an element whose squared
    gradient passes ``theta`` times its second moment is clipped to
    sign(g) * sqrt(theta * v)."""

    def __init__(self, interval=500, theta=5000.0):
        self.name, self.interval, self.theta = "spam", interval, theta

    def after_backward(self, step, loss):
        from gnmr_eval.peers import spam_treat
        spam_treat(self.model.parameters(), self.opt, step, self.interval, self.theta)
        return True
