"""gnmr.integrations.torchao on CPU: float8 (Float8Linear) and MXFP8
(emulated kernels) linears as units; promote switches a module to its
high-precision path and back bit for bit; forward tensors are torchao's
own quantized input (fp8 codes and scale); a Monitor trains through a
spike with a promotion in force."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torchao", reason="torchao is not installed (scripts/python_env.sh's "
                    "venv has it)")

import torchao.float8.float8_linear as f8mod  # noqa: E402
from torchao.float8 import convert_to_float8_training  # noqa: E402

import gnmr.torch as gt  # noqa: E402
from gnmr.integrations import torchao as gao  # noqa: E402


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 32))


def _float8(seed=0):
    m = _mlp(seed)
    convert_to_float8_training(m)
    return m


def _mx(seed=0):
    cfgmod = pytest.importorskip("torchao.prototype.moe_training.config",
                                 reason="torchao without MXFP8 training")
    from torchao.quantization import quantize_
    m = _mlp(seed)
    quantize_(m, cfgmod.MXFP8TrainingOpConfig(
        kernel_preference=cfgmod.KernelPreference.EMULATED))  # CPU: emulated MX matmul
    return m


@pytest.mark.parametrize("make", [_float8, _mx], ids=["float8", "mx"])
def test_promote_is_the_high_precision_path_and_back_bit_exact(make):
    m = make()
    lin = m[2]
    assert gao.is_low_precision("2", lin)
    x = torch.randn(32, 64)
    low = lin(x)
    with torch._C.DisableTorchFunctionSubclass():  # the reference fp32 matmul
        ref = F.linear(x, lin.weight, lin.bias).as_subclass(torch.Tensor)
    gao.promote("2", lin, True)
    high = lin(x)
    assert torch.equal(high, ref)
    assert not torch.equal(high, low)  # the low-precision path really differs
    high.sum().backward()  # the promoted path trains the same parameter
    assert lin.weight.grad is not None and torch.isfinite(lin.weight.grad).all()
    gao.promote("2", lin, False)
    assert torch.equal(lin(x), low)  # back to float8 / MX, bit for bit
    assert "forward" not in vars(lin)


def test_float8_forward_tensors_are_torchaos_own_cast(monkeypatch):
    m = _float8()
    lin = m[0]
    seen = []
    orig = f8mod.hp_tensor_to_float8_dynamic

    def spy(hp, *a, **kw):
        t = orig(hp, *a, **kw)
        if kw.get("gemm_input_role") == f8mod.GemmInputRole.INPUT:
            seen.append(t)
        return t

    monkeypatch.setattr(f8mod, "hp_tensor_to_float8_dynamic", spy)
    x = torch.randn(16, 32) * 3
    lin(x)
    (item,) = gao.forward_tensors("0", lin, (x,), None)
    theirs = seen[-1]
    assert item.tensor.dtype == torch.float8_e4m3fn
    assert torch.equal(item.tensor.view(torch.uint8), theirs._data.view(torch.uint8))
    assert item.scale_inv == pytest.approx(1.0 / float(theirs._scale), rel=1e-7)
    assert math.isinf(item.saturation_magnitude)
    # the codes times scale_inv are the input (to fp8 precision)
    assert torch.allclose(item.tensor.float() * item.scale_inv, x, rtol=0.07, atol=1e-2)
    gao.promote("0", lin, True)
    assert gao.forward_tensors("0", lin, (x,), None) is None  # promoted: nothing is cast


def test_mx_forward_tensors_are_torchaos_dequantized_input():
    m = _mx()
    x = torch.randn(16, 32)
    (item,) = gao.forward_tensors("0", m[0], (x,), None)
    assert item.tensor.dtype == torch.float32 and item.saturation_magnitude == 0.0
    assert not torch.equal(item.tensor, x)  # quantized...
    assert torch.allclose(item.tensor, x, rtol=0.07, atol=1e-2)  # ...to MXFP8 precision


@pytest.mark.parametrize("make", [_float8, _mx], ids=["float8", "mx"])
def test_monitor_promotes_a_spiked_unit_and_trains(make):
    m = make()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
    cfg = {"warmup": 3, "lag": 1, "max_o": 1, "lock_steps": 3}
    mon = gt.Monitor(m, target="local", job_id="ao", config=cfg, strict=True,
                     **gao.monitor_kwargs())
    assert mon.unit_names == ["0", "2", "4"]
    g = torch.Generator().manual_seed(3)
    promoted_at = {}
    for step in range(12):
        mon.before_forward(step)
        promoted_at[step] = [n for n in mon.unit_names
                             if getattr(mon.unit_module(n), "gnmr_promoted", False)]
        x = torch.randn(32, 32, generator=g)
        loss = F.mse_loss(m(x).float(), torch.zeros(32, 32))
        loss.backward()
        if step == 6:
            m[2].weight.grad.mul_(1000.0)
        mon.after_backward(step)
        mon.apply(step, opt)
        opt.zero_grad(set_to_none=True)
    assert promoted_at[7] == ["2"], promoted_at  # lag 1: in force from the next forward
    assert promoted_at[5] == []
    assert "2" not in promoted_at[11] and "forward" not in vars(m[2])  # released
    assert mon.errors == 0 and mon.forward_enabled
    assert all(bool(torch.isfinite(p.detach()).all()) for p in m.parameters())
    mon.close()
