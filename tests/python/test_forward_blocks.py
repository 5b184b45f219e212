"""Block-scaled forward tensors from PyTorch: ``forward_tensors`` returning
torchao's ``MXTensor`` / ``NVFP4Tensor`` or ``gnmr.blocks.describe``
descriptors, read in place (docs/statistics.md, "Block columns").

The scenario of test_forward.py in MXFP8: unit b's quantizer stores its
codes with scales 8x too small at one step (a scale desync), so most codes
clamp at E4M3's maximum, while backpropagation raises a's gradient far more
than b's. With one recovery slot, b is admitted by the saturation rule from
its block-scaled codes. With gnmrd's trace on, the recorded row of b holds
exactly what ``gnmr.block_stats`` computes of the same tensors. Observed
with its source (the input before quantization), the same fault is seen by
the relative-error rule alone, and the source figures reach the trace.
"""
from __future__ import annotations

import csv
import json
import time
import warnings

import pytest
import torch

import gnmr
import gnmr.torch as gt
from gnmr import blocks
from block_testlib import needs_torchao

pytestmark = pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"),
                                reason=f"torch {torch.__version__} has no float8 dtypes")

CFG = {"warmup": 5, "max_o": 1, "lock_steps": 5, "lag": 1, "ema_decay": 0.9}
STEPS = 14
FAULT = 9


class Net(torch.nn.Module):
    """Inputs of b are [16, 64]: two 32-element blocks per row."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 64)
        self.c = torch.nn.Linear(64, 4)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def _batch(step: int):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)


def mxfp8_codes(x: torch.Tensor, desync: float = 1.0):
    """E4M3 codes and E8M0 scales of x per 32 elements, OCP's floor rule
    (scale 2^(floor(log2 amax) - 8)); ``desync`` multiplies the values
    before they are clamped and stored, as a scale out of step does."""
    blocks_ = x.detach().float().reshape(x.shape[0], -1, 32)
    amax = blocks_.abs().amax(dim=-1, keepdim=True).clamp_min(2.0 ** -100)
    exp = torch.floor(torch.log2(amax)) - 8
    codes = (blocks_ / torch.pow(2.0, exp) * desync).clamp(-448, 448)
    codes = codes.to(torch.float8_e4m3fn).reshape(x.shape)
    scales = (exp + 127).to(torch.uint8).reshape(x.shape[0], -1)
    return codes, scales


class Quantizer:
    """b's input as MXFP8 (a descriptor of plain codes, or torchao's
    MXTensor); the statistics of every call, by gnmr.block_stats."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.fault = False
        self.seen = []  # block_stats of each observed call

    def __call__(self, name, module, inputs, output):
        if name != "b":
            return None
        x = inputs[0].detach()
        if self.kind == "torchao":
            from torchao.prototype.mx_formats.mx_tensor import MXTensor
            item = MXTensor.to_mx(x * (8.0 if self.fault else 1.0), torch.float8_e4m3fn, 32)
        else:
            codes, scales = mxfp8_codes(x, 8.0 if self.fault else 1.0)
            item = blocks.describe(codes, scales, format="mxfp8_e4m3")
        self.seen.append(gnmr.block_stats(item))
        return [gt.ForwardTensor(item)] if self.kind == "wrapped" else item


def _run(target, job, quant, events="", faulty_gradients=True, config=None):
    torch.manual_seed(5)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    # Declared: Net's plain Linears stand for promotable units (test_presets.py).
    mon = gt.Monitor(model, target=target, job_id=job, config=config or CFG, strict=True,
                     local_events_path=events, forward_tensors=quant, high_precision=True)
    promoted = []
    for step in range(STEPS):
        x, y = _batch(step)
        if quant is not None:
            quant.fault = step == FAULT
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if step == FAULT and faulty_gradients:  # coupled: the neighbour's gradient spikes most
            for p in model.a.parameters():
                p.grad.mul_(20.0)
            for p in model.b.parameters():
                p.grad.mul_(1.5)
        mon.after_backward(step)
        promoted.append(tuple(mon.apply(step, opt).promoted))
    # At lag 1 no plan waits for the last step's decision: wait for it (a
    # trace then holds every step), bounded.
    deadline = time.monotonic() + 10
    while mon.counters().last_decided_step < STEPS - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    mon.close()
    return promoted


def _admissions(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [(e["unit"], e["trigger"], e["observed_step"]) for e in lines
            if e["kind"] == "admission"]


@pytest.mark.parametrize("kind", ["describe", "wrapped"])
def test_block_scaled_forward_tensors_admit_the_root(tmp_path, kind):
    off, on = tmp_path / "off.jsonl", tmp_path / "on.jsonl"
    _run("local", "blk-off", None, str(off))
    quant = Quantizer(kind)
    promoted = _run("local", "blk-on", quant, str(on))
    assert _admissions(off) == [("a", "gnmr", FAULT)]
    assert _admissions(on) == [("b", "saturation", FAULT)]
    assert promoted[FAULT + 1] == ("b",)
    # The desync clamps most codes; a normal step only those at the top of
    # the floor rule's range (here about 6% of them).
    normal, fault = quant.seen[FAULT - 1], quant.seen[FAULT]
    assert fault["saturated"] > 0.8 * fault["numel"]
    assert fault["saturated"] > 10 * max(normal["saturated"], 1)
    assert fault["saturated_blocks"] > normal["saturated_blocks"]
    assert fault["blocks"] == normal["blocks"] == 32


def _trace_rows(traces, job):
    with open(f"{traces}/{job}.csv") as f:  # gnmrd's trace of the job
        return [r for r in csv.DictReader(f) if r["unit"] == "b"]


@needs_torchao
def test_torchao_mxtensors_are_read_in_place_and_reach_the_trace(gnmrd_factory, tmp_path):
    traces = tmp_path / "traces"
    d = gnmrd_factory(f"trace:\n  dir: {traces}\n")
    quant = Quantizer("torchao")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the channel stays on: no warning
        _run(d.target, "blk-ao", quant, faulty_gradients=False)
    d.stop()
    rows = _trace_rows(traces, "blk-ao")
    assert len(rows) == STEPS
    for row, want in zip(rows, quant.seen):
        assert int(row["fwd_numel"]) == want["numel"]
        assert float(row["fwd_sumsq"]) == want["sumsq"]
        assert int(row["fwd_saturated"] or 0) == want["saturated"]
        assert int(row["fwd_zeros"] or 0) == want["zero_codes"]
        assert int(row["fwd_blocks"]) == want["blocks"] == 32
        assert int(row["fwd_saturated_blocks"] or 0) == want["saturated_blocks"]
        assert int(row["fwd_dead_blocks"] or 0) == want["dead_blocks"]
        assert int(row["fwd_scale_clamps"] or 0) == want["scale_clamps"]


def test_a_block_scaled_forward_tensor_with_its_own_scale_inv_is_refused():
    quant = Quantizer("describe")

    def fn(name, module, inputs, output):
        item = quant(name, module, inputs, output)
        return None if item is None else [gt.ForwardTensor(item, scale_inv=2.0)]

    model = Net()
    mon = gt.Monitor(model, target="local", job_id="blk-bad", config=CFG, forward_tensors=fn)
    mon.start()
    with pytest.warns(RuntimeWarning, match="carries its own scales"):
        model(_batch(0)[0]).sum().backward()
    mon.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_block_scaled_tensor_turns_the_channel_off_loudly():
    model = Net().cuda()

    def fn(name, module, inputs, output):
        if name != "b":
            return None
        codes, scales = mxfp8_codes(inputs[0])
        return blocks.describe(codes, scales, format="mxfp8_e4m3")

    mon = gt.Monitor(model, target="local", job_id="blk-cuda", config=CFG, forward_tensors=fn)
    mon.start()
    with pytest.warns(RuntimeWarning, match="forward channel is off"):
        model(_batch(0)[0].cuda()).sum().backward()
    mon.close()



# Only the relative-error rule: the desync also trips the forward norm and
# saturation rules, which this scenario keeps out of the way.
SOURCE_CFG = dict(CFG, tau_forward=1e9, tau_saturation=1e9, underflow_fraction=0.999,
                  tau_relative_error=4.0)


class SourcedQuantizer(Quantizer):
    """b's input as MXFP8 with the input itself as the source, so the
    report carries the source figures (docs/statistics.md, "Source
    columns"): plain codes through ``describe(..., source=)``, or torchao's
    MXTensor through ``ForwardTensor(source=)``."""

    def __call__(self, name, module, inputs, output):
        if name != "b":
            return None
        x = inputs[0].detach().contiguous()
        if self.kind == "torchao":
            from torchao.prototype.mx_formats.mx_tensor import MXTensor
            mx = MXTensor.to_mx(x * (8.0 if self.fault else 1.0), torch.float8_e4m3fn, 32)
            self.seen.append(gnmr.block_stats(blocks.describe(mx, source=x)))
            return [gt.ForwardTensor(mx, source=x)]
        codes, scales = mxfp8_codes(x, 8.0 if self.fault else 1.0)
        item = blocks.describe(codes, scales, format="mxfp8_e4m3", source=x)
        self.seen.append(gnmr.block_stats(item))
        return item


def _run_sourced(target, job, quant, config, events=""):
    return _run(target, job, quant, events, faulty_gradients=False, config=config)


def test_the_relative_error_rule_admits_a_unit_whose_source_says_so(tmp_path):
    off, on = tmp_path / "off.jsonl", tmp_path / "on.jsonl"
    quiet = dict(SOURCE_CFG, tau_relative_error=0)  # the rule off: nothing else fires
    _run_sourced("local", "src-off", SourcedQuantizer("describe"), quiet, str(off))
    quant = SourcedQuantizer("describe")
    promoted = _run_sourced("local", "src-on", quant, SOURCE_CFG, str(on))
    assert _admissions(off) == []
    assert _admissions(on) == [("b", "relative_error", FAULT)]
    assert promoted[FAULT + 1] == ("b",)
    normal, fault = quant.seen[FAULT - 1], quant.seen[FAULT]
    relative = [s["error_sumsq"] / s["source_sumsq"] for s in (normal, fault)]
    assert relative[0] < 1e-2  # MXFP8's own rounding
    assert relative[1] > 100 * relative[0]  # values 8x, most clamped at 448


@needs_torchao
def test_source_figures_reach_gnmrds_trace(gnmrd_factory, tmp_path):
    traces = tmp_path / "traces"
    d = gnmrd_factory(f"trace:\n  dir: {traces}\n")
    quant = SourcedQuantizer("torchao")
    _run_sourced(d.target, "src-ao", quant, SOURCE_CFG)
    d.stop()
    rows = _trace_rows(traces, "src-ao")
    assert len(rows) == STEPS
    for row, want in zip(rows, quant.seen):
        assert int(row["fwd_source_numel"]) == want["numel"]
        assert int(row["fwd_underflow"] or 0) == want["underflow"]
        assert float(row["fwd_error_sumsq"]) == want["error_sumsq"]
        assert float(row["fwd_source_sumsq"]) == want["source_sumsq"]


def test_a_source_for_a_tensor_that_is_not_block_scaled_is_refused():
    def fn(name, module, inputs, output):
        return [gt.ForwardTensor(output, source=output)] if name == "b" else None

    model = Net()
    mon = gt.Monitor(model, target="local", job_id="src-bad", config=CFG, forward_tensors=fn)
    mon.start()
    with pytest.warns(RuntimeWarning, match="source is for block-scaled tensors"):
        model(_batch(0)[0]).sum().backward()
    mon.close()
