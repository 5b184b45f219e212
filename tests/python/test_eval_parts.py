"""Pieces of the evaluation (experiments/gnmr_eval) that its results rest on:
the FP8 E4M3 rounding, the faults' effect, the seeded schedules, the metrics."""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "experiments"))

from gnmr_eval import faults as F  # noqa: E402
from gnmr_eval import metrics as M  # noqa: E402
from gnmr_eval.fp8 import (E4M3_MAX, E5M2_MAX, LowPrecisionLinear,  # noqa: E402
                           _round_to_e4m3_reference, _round_to_e5m2_reference, fake_quant_e4m3,
                           quantizer_tensors, round_to_e4m3, round_to_e5m2)


def e4m3_values():
    """Every finite E4M3 value, decoded from its 8-bit code."""
    vals = []
    for code in range(256):
        s, e, m = code >> 7, (code >> 3) & 0xF, code & 7
        if e == 0xF and m == 7:
            continue  # NaN
        v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        vals.append(-v if s else v)
    return torch.tensor(sorted(set(vals)), dtype=torch.float32)


def test_e4m3_values_are_fixed_points_and_max_is_448():
    v = e4m3_values()
    assert float(v.max()) == E4M3_MAX
    assert torch.equal(round_to_e4m3(v), v)


def test_rounding_is_nearest_even_and_matches_the_reference():
    v = e4m3_values()
    pos = v[v >= 0]
    mids = (pos[1:] + pos[:-1]) / 2  # exact ties between neighbours
    r = round_to_e4m3(mids)
    lo, hi = pos[:-1], pos[1:]
    # A tie goes to the neighbour with an even code (even mantissa).
    codes = {float(x): i for i, x in enumerate(pos)}
    even = torch.tensor([float(a) if codes[float(a)] % 2 == 0 else float(b)
                         for a, b in zip(lo, hi)])
    assert torch.equal(r, even)
    g = torch.Generator().manual_seed(3)
    for scale in (1e-5, 1e-2, 1.0, 300.0, 1e4):
        x = torch.randn(100_000, generator=g) * scale
        assert torch.equal(round_to_e4m3(x), _round_to_e4m3_reference(x))
    assert float(round_to_e4m3(torch.tensor([1e9]))) == E4M3_MAX


def test_amplifying_fault_scales_the_weight_gradient_by_exactly_16():
    torch.manual_seed(0)
    lin = LowPrecisionLinear(16, 8)
    x = torch.randn(4, 16)
    grads = []
    for fault in (None, ("amp", 16.0)):
        lin.fault = fault
        lin.zero_grad()
        lin(x).sum().backward()
        grads.append(lin.weight.grad.clone())
    assert torch.equal(grads[1], grads[0] * 16)
    # The high-fidelity path ignores the quantizer and its fault.
    lin.gnmr_promoted = True
    assert torch.equal(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))


def test_attenuating_fault_saturates_at_the_stale_amax():
    x = torch.linspace(-4, 4, 101)
    y = fake_quant_e4m3(x, ("att", 16.0))
    assert float(y.abs().max()) == 0.25  # amax / 16
    assert torch.equal(fake_quant_e4m3(x, None).abs().max(), torch.tensor(4.0))


def test_e5m2_rounding_matches_the_reference_and_saturates_at_57344():
    g = torch.Generator().manual_seed(4)
    for scale in (1e-7, 1e-3, 1.0, 1e3, 3e4):
        x = torch.randn(100_000, generator=g) * scale
        assert torch.equal(round_to_e5m2(x), _round_to_e5m2_reference(x))
    assert float(round_to_e5m2(torch.tensor([1e9]))) == E5M2_MAX
    assert float(round_to_e5m2(torch.tensor([1.25]))) == 1.25  # 1.01b: 2 mantissa bits
    assert float(round_to_e5m2(torch.tensor([1.125]))) == 1.0  # a tie: to even


def test_grad_fault_scales_gradients_by_16_and_leaves_the_forward_pass_alone():
    torch.manual_seed(0)
    lin = LowPrecisionLinear(16, 8)
    lin.grad_quant = True
    x = torch.randn(4, 16, requires_grad=True)
    grads, outs = [], []
    for fault in (None, ("grad", 16.0)):
        lin.fault = fault
        lin.zero_grad()
        x.grad = None
        y = lin(x)
        outs.append(y.detach().clone())
        y.sum().backward()
        grads.append((lin.weight.grad.clone(), x.grad.clone()))
    assert torch.equal(outs[0], outs[1])
    assert torch.equal(grads[1][0], grads[0][0] * 16)  # the weight's gradient
    assert torch.equal(grads[1][1], grads[0][1] * 16)  # and the one passed upstream
    assert F.make_schedule(1, "grad", 13, 320) != F.make_schedule(1, "amp", 13, 320)


def test_quantizer_tensors_count_saturated_codes_at_the_dequantized_maximum():
    lin = LowPrecisionLinear(4, 2)
    x = torch.linspace(-4, 4, 64).reshape(16, 4)
    assert quantizer_tensors("l", lin, (x,), lin(x)) is None  # not recorded unless asked
    lin.record_quantized = True
    lin.fault = ("att", 16.0)
    out = lin(x)
    (ft,) = quantizer_tensors("l", lin, (x,), out)
    # 448 * scale_inv = amax / 16, what the saturated codes dequantize to.
    assert ft.saturation_magnitude == float(ft.tensor.abs().max()) == 0.25
    assert int((ft.tensor.abs() >= ft.saturation_magnitude).sum()) > 40
    lin.gnmr_promoted = True  # the high-fidelity path has no quantizer
    lin(x)
    assert quantizer_tensors("l", lin, (x,), None) is None


def test_schedules_are_seeded_and_within_bounds():
    a = F.make_schedule(1, "amp", 13, 320)
    assert a == F.make_schedule(1, "amp", 13, 320)
    assert a != F.make_schedule(2, "amp", 13, 320)
    assert len(a) == F.EVENTS and F.make_schedule(1, "none", 13, 320) == []
    for e in a:
        assert 0 <= e.unit < 13 and F.FIRST_STEP <= e.first <= e.last < 320
        assert 1 <= e.last - e.first + 1 <= F.MAX_DURATION and e.factor == 16.0


def test_metrics_on_a_hand_made_run():
    run = {"units": ["a", "b"], "steps": 10,
           "schedule": [{"unit": 1, "first": 3, "last": 4}, {"unit": 0, "first": 7, "last": 7}],
           "in_force": [[], [], [], [1], [1], [1], [], [], [], []],
           "admissions": [[1, 3], [0, 5]]}
    total, faulty, fp = M.recovery(run)
    assert (total, faulty, fp) == (3 / 20, 2 / 20, 1 / 20)
    assert M.admissions(run) == (2, 1, 2, 1)
    assert M.gap_closed({"val_loss": 2.5}, {"val_loss": 3.0}, {"val_loss": 2.0}) == 0.5
    m, h = M.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and abs(h - 4.303 * 1.0 / 3 ** 0.5) < 1e-9
