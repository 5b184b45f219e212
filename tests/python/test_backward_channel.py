"""The backward channel from PyTorch: ``Monitor.observe_backward`` called
from a backward quantizer (docs/controller.md, "Backward channel").

The evaluation's gradient-quantizer fault in small: every Linear's output
gradient is quantized to E5M2 with per-tensor current scaling before its
dgrad / wgrad (a custom autograd Function); at one step b's quantizer uses
a scale_inv 16x too large, so b's gradients and the gradient it passes to
a are 16x too large while the forward pass is healthy. a's quantizer then
sees the 16x gradient too. With the quantized gradients handed over and
``attribution: upstream``, b (the first of the two that backward reached)
is admitted by the backward rule and a is coupled; through gnmrd the
trace records each unit's backward figures.
"""
from __future__ import annotations

import csv
import json
import math
import time

import pytest
import torch

import gnmr.torch as gt

pytestmark = pytest.mark.skipif(not hasattr(torch, "float8_e5m2"),
                                reason=f"torch {torch.__version__} has no float8 dtypes")

CFG = {"warmup": 5, "max_o": 1, "lock_steps": 5, "lag": 1, "ema_decay": 0.9,
       "attribution": "upstream"}
STEPS = 14
FAULT = 9
E5M2_MAX = 57344.0


class GradQuant(torch.autograd.Function):
    """Identity forward; backward quantizes the gradient to E5M2 (current
    scaling), hands the codes to ``sink(name, codes, scale_inv)`` and
    returns them dequantized: what the unit's GEMMs then use."""

    @staticmethod
    def forward(ctx, x, name, sink, desync):
        ctx.name, ctx.sink, ctx.desync = name, sink, desync
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        amax = float(g.abs().max())
        scale = E5M2_MAX / amax if amax > 0 else 1.0
        codes = (g * scale).to(torch.float8_e5m2)
        scale_inv = ctx.desync() / scale
        ctx.sink(ctx.name, codes, scale_inv)
        return codes.float() * scale_inv, None, None, None


class Net(torch.nn.Module):
    def __init__(self, sink, desync) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 64)
        self.c = torch.nn.Linear(64, 4)
        self.sink, self.desync = sink, desync

    def _q(self, name, y):
        return GradQuant.apply(y, name, self.sink, lambda: self.desync(name))

    def forward(self, x):
        h = torch.tanh(self._q("a", self.a(x)))
        h = torch.tanh(self._q("b", self.b(h)))
        return self._q("c", self.c(h))


def _run(target, job, observe, events="", config=CFG):
    torch.manual_seed(5)
    step_now = [0]
    sent = []  # (step, unit, numel) of every observed gradient

    def sink(name, codes, scale_inv):
        sent.append((step_now[0], name, codes.numel()))
        if observe:
            mon.observe_backward(name, gt.ForwardTensor(codes, saturation_magnitude=math.inf,
                                                        scale_inv=scale_inv))

    def desync(name):
        return 16.0 if name == "b" and step_now[0] == FAULT else 1.0

    model = Net(sink, desync)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    mon = gt.Monitor(model, target=target, job_id=job, config=config, strict=True,
                     local_events_path=events, high_precision=True)
    for step in range(STEPS):
        step_now[0] = step
        g = torch.Generator().manual_seed(100 + step)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        mon.after_backward(step)
        mon.apply(step, opt)
    deadline = time.monotonic() + 10
    while mon.counters().last_decided_step < STEPS - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    mon.close()
    return sent


def _admissions(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [(e["unit"], e["trigger"], e["observed_step"]) for e in lines
            if e["kind"] == "admission"]


def _denials(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in lines if e["kind"] == "denial"]


def test_the_backward_rule_admits_the_root_of_a_gradient_quantizer_fault(tmp_path):
    off, on = tmp_path / "off.jsonl", tmp_path / "on.jsonl"
    _run("local", "bwd-off", observe=False, events=str(off))
    _run("local", "bwd-on", observe=True, events=str(on))
    # Without the channel the gradient rules see a and b alike (both x16)
    # and nothing names a backward trigger.
    assert all(t != "backward" for _, t, _ in _admissions(off))
    assert _admissions(on) == [("b", "backward", FAULT)]
    admitted = [json.loads(x) for x in on.read_text().splitlines()
                if json.loads(x)["kind"] == "admission"]
    assert admitted[0]["bwd_ratio"] > 6  # B, as the backward rule compared it
    assert all("bwd_ratio" not in json.loads(x) for x in off.read_text().splitlines())
    coupled = [d for d in _denials(on) if d["observed_step"] == FAULT]
    assert [d["unit"] for d in coupled] == ["a"]


def test_backward_figures_reach_gnmrds_trace(gnmrd_factory, tmp_path):
    traces = tmp_path / "traces"
    d = gnmrd_factory(f"trace:\n  dir: {traces}\n")
    sent = _run(d.target, "bwd-trace", observe=True)
    d.stop()
    with open(f"{traces}/bwd-trace.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * STEPS
    for row in rows:
        want = [n for s, u, n in sent if s == int(row["step"]) and u == row["unit"]]
        assert int(row["bwd_numel"]) == sum(want) > 0
        # Backward reaches c first, then b, then a.
        assert int(row["bwd_order"]) == {"c": 1, "b": 2, "a": 3}[row["unit"]] + (
            (65535 << 32))
        assert float(row["bwd_sumsq"]) > 0
    fault_b = next(r for r in rows if r["unit"] == "b" and int(r["step"]) == FAULT)
    normal_b = next(r for r in rows if r["unit"] == "b" and int(r["step"]) == FAULT - 1)
    assert float(fault_b["bwd_sumsq"]) > 100 * float(normal_b["bwd_sumsq"])


def test_bad_backward_calls_are_refused_clearly():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    mon = gt.Monitor(model, target="local", job_id="bwd-bad", config=CFG, high_precision=False)
    mon.start()
    with pytest.raises(KeyError, match="no unit named 'nope'"):
        mon.observe_backward("nope", torch.ones(4))
    with pytest.warns(RuntimeWarning, match="expected torch.Tensor or gnmr.torch.ForwardTensor"):
        mon.observe_backward("0", [object()])
    with pytest.warns(RuntimeWarning, match="takes no source"):
        mon.observe_backward("0", gt.ForwardTensor(torch.ones(4), source=torch.ones(4)))
    mon.observe_backward("0", torch.ones(4))  # a plain host tensor: fine
    assert mon.errors == 2
    mon.close()
