"""The run-time peers of setting N2 on the evaluation GPT (docs/evaluation.md,
"Setting N2"), as arms.Arm subclasses; arms.py has the clipping arms.

- ``StaticHP``: named units always on the high-fidelity path (Megatron keeps
  the first and last layers in BF16; the NVFP4 recipe ~16% of its layers).
- ``Autoswitch``: Transformer Engine's ``AutoswitchGemm`` debug rule, per GEMM
  in the same iteration, no budget: a GEMM whose operand, as quantized, has
  an underflow above ``underflow`` (x != 0, dequantized 0) or a relative
  error sum((x - x_hat)^2) / sum(x^2) above ``rel_error`` runs in high
  precision. In the block recipe (fp8_block.py) the forward GEMM is judged on
  x and W before it runs, dgrad and wgrad on the quantized gradient in the
  backward pass; a switched GEMM takes the fp32 operands. A unit counts as
  off the low-cost path in a step if any of its GEMMs switched.
- ``SkipBatch``: no optimizer step on a loss spike (the training loss above
  ``factor`` times its running mean, an EMA the spikes do not enter), as
  llm-foundry's and Lightning users' loss-spike callbacks skip the batch.
- ``Spam``: SPAM (Huang et al. 2025) on the optimizer's Adam moments: both
  reset every ``interval`` steps, and an element whose squared gradient
  passes ``theta`` times its second moment clipped to sign(g) sqrt(theta v).

``in_force`` holds the units off the low-cost path at the step (the
recovery unit-steps of GNMR's tables are the same count for the peers).
"""
from __future__ import annotations

import math
from typing import Dict, List

import torch

from .arms import Arm
from .metrics import LossSpikes


class StaticHP(Arm):
    def __init__(self, units: List[str]) -> None:
        super().__init__()
        self.names = list(units)

    def setup(self, model, optimizer, schedule, seed, steps) -> None:
        super().setup(model, optimizer, schedule, seed, steps)
        names = model.unit_names()
        missing = [n for n in self.names if n not in names]
        if missing:
            raise ValueError(f"static arm: no unit {missing} (units: {names})")
        self.fixed = {names.index(n) for n in self.names}

    def before_forward(self, step: int) -> None:
        self._promote(self.fixed)
        self.in_force = set(self.fixed)


class Autoswitch(Arm):
    def __init__(self, underflow: float = 0.05, rel_error: float = 1e-4) -> None:
        super().__init__()
        self.underflow, self.rel_error = underflow, rel_error
        self.switched_gemms = 0

    def setup(self, model, optimizer, schedule, seed, steps) -> None:
        super().setup(model, optimizer, schedule, seed, steps)
        for i, u in enumerate(self.units):
            if u.recipe != "block":
                raise ValueError("the Autoswitch arm judges the block recipe's GEMMs "
                                 "(recipe: block)")
            u.autoswitch = self._judge(i)

    def _judge(self, index: int):
        def judge(*pairs) -> bool:
            """(source, dequantized) operands of one GEMM -> switch it?"""
            for x, q in pairs:
                under = float(((x != 0) & (q == 0)).float().mean())
                err = float(((x - q) ** 2).sum() / (x ** 2).sum().clamp_min(1e-30))
                if under > self.underflow or err > self.rel_error:
                    self.in_force.add(index)
                    self.switched_gemms += 1
                    return True
            return False
        return judge

    def before_forward(self, step: int) -> None:
        self.in_force = set()

    def extra(self) -> Dict:
        return {"switched_gemms": self.switched_gemms}


class SkipBatch(Arm):
    def __init__(self, factor: float = 1.25, alpha: float = 0.98, warmup: int = 100) -> None:
        super().__init__()
        self.spikes = LossSpikes(factor, alpha, warmup)
        self.skips = 0

    def after_backward(self, step: int) -> bool:
        loss = self.last_loss  # set by the training loop before this call
        # A non-finite loss is skipped too, as those callbacks do.
        if not math.isfinite(loss) or self.spikes.is_spike(step, loss):
            self.skips += 1
            return False
        return True

    def extra(self) -> Dict:
        return {"skipped_steps": self.skips}


def spam_treat(params, optimizer, step: int, interval: int, theta: float) -> None:
    """SPAM's treatment of one step's gradients before Adam's update (the
    module's doc); also setting N1's SPAM arm (n1_arms.py)."""
    reset = step > 0 and step % interval == 0
    for p in params:
        st = optimizer.state.get(p)
        if p.grad is None or not st:
            continue
        if reset:
            st["exp_avg"].zero_()
            st["exp_avg_sq"].zero_()
            continue
        if not bool(st["exp_avg_sq"].any()):
            continue  # just reset: nothing to compare against yet
        bound = (theta * st["exp_avg_sq"]).sqrt()
        torch.where(p.grad.abs() > bound, p.grad.sign() * bound, p.grad, out=p.grad)


class Spam(Arm):
    def __init__(self, interval: int = 500, theta: float = 5000.0) -> None:
        super().__init__()
        self.interval, self.theta = interval, theta

    def after_backward(self, step: int) -> bool:
        spam_treat(self.model.parameters(), self.optimizer, step, self.interval, self.theta)
        return True
