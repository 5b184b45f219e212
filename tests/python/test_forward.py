"""The forward channel from PyTorch: ``Monitor(..., forward_tensors=...)``.

Unit b's quantizer saturates at one step (its scale jumps), while
backpropagation raises a's gradient far more than b's (the coupled
neighbour). With one recovery slot, gradient norms alone admit a; with b's
quantized input observed through a forward hook, b is admitted by the
saturation rule. gnmrd and the local target decide identically; forward
passes under ``torch.no_grad()`` are not observed; on a CUDA model the
forward tensors are read on the device; a forward tensor off the Monitor's
device (here: meta) turns the channel off loudly.
"""
from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch

import gnmr.torch as gt
from gnmr_testlib import Net, batch

CFG = {"warmup": 5, "max_o": 1, "lock_steps": 5, "lag": 1, "ema_decay": 0.9}
STEPS = 14
FAULT = 9
E4M3_MAX = 448.0


class Quantizer:
    """Fake E4M3 quantization of b's input with current scaling (one
    element at the maximum), except while ``fault`` is set: the scale is 8x
    too large, so many elements clamp at the maximum."""

    def __init__(self) -> None:
        self.fault = False
        self.calls = 0
        self.with_empty = False  # add an empty second tensor: the several-tensor path

    def __call__(self, name, module, inputs, output):
        if name != "b":
            return None
        self.calls += 1
        x = inputs[0].detach()
        scale = E4M3_MAX / x.abs().max().clamp_min(1e-12)
        if self.fault:
            scale = scale * 8.0
        codes = (x * scale).clamp(-E4M3_MAX, E4M3_MAX)
        items = [gt.ForwardTensor(codes, saturation_magnitude=E4M3_MAX)]
        if self.with_empty:
            items.append(gt.ForwardTensor(codes[:0], saturation_magnitude=E4M3_MAX))
        return items


def _run(target, job, forward, events="", eval_fault_at=None, pause_at=None, config=None,
         with_empty=False, device="cpu"):
    torch.manual_seed(5)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    quant = Quantizer()
    quant.with_empty = with_empty
    # Net's plain Linears stand for units with a high-precision path: declared,
    # so they are promoted (the safe default would clip them; test_presets.py).
    mon = gt.Monitor(model, target=target, job_id=job, config=config or CFG, strict=True,
                     local_events_path=events, forward_tensors=quant if forward else None,
                     high_precision=True)
    plans = []
    for step in range(STEPS):
        x, y = (t.to(device) for t in batch(step))
        if step == eval_fault_at:  # an evaluation pass with a faulty quantizer
            quant.fault = True
            with torch.no_grad():
                model(x)
            quant.fault = False
        quant.fault = step == FAULT
        mon.forward_enabled = step != pause_at
        loss = torch.nn.functional.mse_loss(model(x), y)
        quant.fault = False
        opt.zero_grad()
        loss.backward()
        if step == FAULT:  # coupled: the neighbour's gradient spikes most
            for p in model.a.parameters():
                p.grad.mul_(20.0)
            for p in model.b.parameters():
                p.grad.mul_(1.5)
        mon.after_backward(step)
        applied = mon.apply(step, opt)
        plans.append((step, applied.has_decision, applied.digest, tuple(applied.promoted)))
    counters = mon.counters().as_dict()
    mon.close()
    return plans, counters, quant.calls


def _admissions(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [(e["unit"], e["trigger"], e["observed_step"]) for e in lines
            if e["kind"] == "admission"]


def test_forward_tensors_admit_the_root_first(tmp_path):
    off = tmp_path / "off.jsonl"
    on = tmp_path / "on.jsonl"
    plans_off, _, _ = _run("local", "fwd-off", False, str(off))
    plans_on, counters, calls = _run("local", "fwd-on", True, str(on), eval_fault_at=4)
    assert _admissions(off) == [("a", "gnmr", FAULT)]
    # The no_grad pass at step 4 saturated too, but was not observed.
    assert _admissions(on) == [("b", "saturation", FAULT)]
    assert calls == STEPS  # the no_grad pass never reached forward_tensors
    assert plans_off[FAULT + 1][3] == ("a",)
    assert plans_on[FAULT + 1][3] == ("b",)
    assert counters["missed_decisions"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_forward_tensors_admit_the_root_first(tmp_path):
    """The same on a CUDA model: the forward tensors are read on the device,
    enqueued on the current stream at the hook."""
    on = tmp_path / "cuda.jsonl"
    _, counters, calls = _run("local", "fwd-cuda", True, str(on), device="cuda")
    assert _admissions(on) == [("b", "saturation", FAULT)]
    assert calls == STEPS
    assert counters["forward_calls_dropped"] == 0


def test_one_forward_tensor_and_a_list_of_tensors_give_the_same_statistics(tmp_path):
    """The hooks send one tensor as plain numbers (observe_forward_tensor)
    and several as TensorRefs (observe_forward): with an empty second
    tensor, which adds nothing, every event (forward evidence included)
    must be the same."""
    found = []
    for with_empty in (False, True):
        events = tmp_path / f"empty{int(with_empty)}.jsonl"
        _run("local", "fwd-paths", True, str(events), with_empty=with_empty)
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        found.append([{k: v for k, v in e.items() if k != "time_unix"} for e in lines])
    assert found[0] == found[1]
    assert any(e["kind"] == "admission" and e["trigger"] == "saturation"
               and e["saturation_ratio"] > 1 for e in found[0])


def test_exclusive_attribution_keeps_the_neighbour_out_of_a_free_slot(tmp_path):
    """With room for two, the neighbour a is admitted next to the root b
    under attribution: rank; under exclusive it is denied as coupled."""
    found = {}
    for mode in ("rank", "exclusive"):
        events = tmp_path / f"{mode}.jsonl"
        _run("local", f"fwd-{mode}", True, str(events),
             config={**CFG, "max_o": 2, "attribution": mode})
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        found[mode] = sorted((e["kind"], e["unit"], e.get("detail", "")) for e in lines
                             if e["kind"] in ("admission", "denial")
                             and e["observed_step"] == FAULT)
    assert found["rank"] == [("admission", "a", ""), ("admission", "b", "")]
    assert found["exclusive"] == [("admission", "b", ""),
                                  ("denial", "a", "coupled to this step's forward root")]


def test_an_unknown_attribution_is_refused_by_name():
    with pytest.raises(Exception, match="attribution"):
        gt.Monitor(Net(), target="local", job_id="fwd-bad-attr",
                   config={**CFG, "attribution": "sideways"}, strict=True)


def test_paused_forward_hooks_observe_nothing(tmp_path):
    events = tmp_path / "paused.jsonl"
    _, _, calls = _run("local", "fwd-paused", True, str(events), pause_at=FAULT)
    assert _admissions(events) == [("a", "gnmr", FAULT)]  # as without forward tensors
    assert calls == STEPS - 1


def test_gnmrd_and_local_decide_alike_with_forward_tensors(gnmrd):
    daemon, _, _ = _run(gnmrd.target, "fwd-cmp", True)
    local, _, _ = _run("local", "fwd-cmp", True)
    assert daemon == local
    assert daemon[FAULT + 1][3] == ("b",)


def test_a_forward_tensor_off_the_monitors_device_turns_the_channel_off_loudly():
    model = Net()
    meta = lambda name, module, inputs, output: [torch.empty(4, device="meta")]  # noqa: E731
    mon = gt.Monitor(model, target="local", job_id="fwd-meta", config=CFG, forward_tensors=meta)
    assert mon.forward_enabled
    with pytest.warns(RuntimeWarning, match="has no CUDA units"):
        model(batch(0)[0])
    assert not mon.forward_enabled
    mon.forward_enabled = True  # off for good: the reason stands
    assert not mon.forward_enabled
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the hooks are gone
        model(batch(1)[0])
    mon.close()
    strict = gt.Monitor(Net(), target="local", job_id="fwd-meta-strict", config=CFG,
                        forward_tensors=meta, strict=True)
    with pytest.raises(Exception, match="has no CUDA units"):
        strict._units[0].modules[0][1](batch(0)[0])
    strict.close()


def test_a_wrong_return_is_warned_about_and_training_goes_on():
    model = Net()
    bad = lambda name, module, inputs, output: ["not a tensor"]  # noqa: E731
    mon = gt.Monitor(model, target="local", job_id="fwd-bad", config=CFG, forward_tensors=bad)
    with pytest.warns(RuntimeWarning, match="expected torch.Tensor"):
        model(batch(0)[0])
    assert mon.errors >= 1
    mon.close()


def _scale_as_tensor(items):
    return [dataclasses.replace(i, scale_inv=torch.tensor(float(i.scale_inv))) for i in items]


@pytest.mark.parametrize("shape", ["bare", "generator", "tensor_scale"])
def test_a_bare_tensor_or_a_generator_is_taken_as_its_items(tmp_path, shape):
    """forward_tensors may return one item without a list, or a generator,
    and a ForwardTensor's scale_inv may be a tensor (a host one is read as
    its value): the same events as the list."""
    found = []
    wraps = {"bare": lambda items: items[0], "generator": iter, "tensor_scale": _scale_as_tensor}
    for wrap in (list, wraps[shape]):
        events = tmp_path / f"{shape}-{len(found)}.jsonl"
        quant = Quantizer()

        def fn(*a, quant=quant, wrap=wrap):
            items = quant(*a)
            return None if items is None else wrap(items)
        torch.manual_seed(5)
        model = Net()
        mon = gt.Monitor(model, target="local", job_id="fwd-shape", config=CFG, strict=True,
                         local_events_path=str(events), forward_tensors=fn)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        for step in range(STEPS):
            x, y = batch(step)
            quant.fault = step == FAULT
            loss = torch.nn.functional.mse_loss(model(x), y)
            quant.fault = False
            opt.zero_grad()
            loss.backward()
            mon.after_backward(step)
            mon.apply(step, opt)
        mon.close()
        found.append([{k: v for k, v in json.loads(line).items() if k != "time_unix"}
                      for line in events.read_text().splitlines()])
    assert found[0] == found[1]
    assert any(e["trigger"] == "saturation" for e in found[0] if e["kind"] == "admission")


def test_output_activation_observes_every_unit():
    model = Net()
    mon = gt.Monitor(model, target="local", job_id="fwd-out", config=CFG,
                     forward_tensors=gt.output_activation, strict=True)
    for step in range(3):
        x, y = batch(step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        mon.after_backward(step)
        mon.apply(step)
    assert mon.errors == 0
    mon.close()
