"""torch.compile (default inductor backend, CPU) with forward tensors and
promotions over 300 steps: the graphs compiled and the graph breaks are
counted (torch._dynamo's counters) and bounded, as docs/integrations.md,
"torch.compile", states; a whole-model graph that runs out of recompiles
is warned about, not silently slowed."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import gnmr.torch as gt

if not hasattr(torch, "compile"):
    pytest.skip("torch.compile needs PyTorch 2.x (this is %s)" % torch.__version__,
                allow_module_level=True)

UNITS = 8
STEPS = 300
CFG = {"warmup": 5, "lock_steps": 3, "max_o": 2, "lag": 1,
       "actions": [{"pattern": "*", "action": "promote"}]}


class LowPrecisionLinear(torch.nn.Linear):
    """bf16 round trip of input and weight (the low-precision path) unless
    the default promote callback set ``gnmr_promoted``."""

    def forward(self, x):
        if getattr(self, "gnmr_promoted", False):
            return F.linear(x, self.weight, self.bias)
        return F.linear(x.bfloat16().float(), self.weight.bfloat16().float(), self.bias)


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(LowPrecisionLinear(16, 16) for _ in range(UNITS))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class CountingActivation:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, name, module, inputs, output):
        self.calls += 1
        return [output]


def _train(compile_mode: str, forward):
    """300 steps; a spike every 7 steps in a rotating unit makes many
    distinct sets of promoted units. Returns (promoted sets, graphs, graph
    breaks, recompile-limit hits)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = Stack()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    mon = gt.Monitor(model, target="local", job_id="compile", config=CFG, strict=True,
                     forward_tensors=forward)
    if compile_mode == "per_unit":
        for layer in model.layers:
            layer.compile()
        run = model
    else:
        run = torch.compile(model)
    sets = set()
    for step in range(STEPS):
        mon.before_forward(step)
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g)
        loss = F.mse_loss(run(x), y)
        opt.zero_grad()
        loss.backward()
        if step > 10 and step % 7 == 0:
            for p in model.layers[(step // 7) % UNITS].parameters():
                p.grad.mul_(50.0)
        mon.after_backward(step)
        sets.add(tuple(mon.apply(step, opt).promoted))
    mon.close()
    breaks = sum(counters["graph_break"].values()) + sum(
        n for reason, n in counters["unimplemented"].items() if "disable" in reason)
    limit = sum(n for reason, n in counters["unimplemented"].items()
                if "recompile limit" in reason.lower())
    return sets, counters["stats"]["unique_graphs"], breaks, limit


def test_per_unit_compile_with_forward_tensors_compiles_a_bounded_number_of_graphs():
    fwd = CountingActivation()
    sets, graphs, breaks, limit = _train("per_unit", fwd)
    assert len(sets) > 8, sets  # more distinct promoted sets than recompile_limit
    # Every forward pass of every unit reached the client, from eager code.
    assert fwd.calls == STEPS * UNITS
    # Bound: each unit's frame guards on its own flag only, and all units
    # share one code object: promoted or not, before and after the hook's
    # break (plus the first call's shapes) - not one per promoted set.
    assert graphs <= 8, graphs
    assert breaks <= 2, breaks  # one per distinct hook frame, not per step
    assert limit == 0


def test_whole_model_compile_with_forward_tensors_breaks_once_per_unit_not_per_set():
    fwd = CountingActivation()
    sets, graphs, breaks, limit = _train("whole", fwd)
    assert len(sets) > 8
    assert fwd.calls == STEPS * UNITS
    assert graphs <= 2 * UNITS, graphs
    assert limit == 0


def test_a_whole_model_graph_out_of_recompiles_is_warned_about():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sets, graphs, _, limit = _train("whole", None)
    assert len(sets) > 8
    assert limit >= 1 and graphs <= 8  # Dynamo stopped recompiling: eager from there on
    msgs = [str(w.message) for w in caught if "recompile limit" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "Compile per unit" in msgs[0]
