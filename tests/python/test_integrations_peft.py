"""gnmr.integrations.peft: a LoRA model (peft.get_peft_model on a tiny
Llama from a config) has one unit per adapted module, made of lora_A and
lora_B, none for the frozen base layers; a spiked adapter is promoted and
its float8 base layer (torchao) runs its high-precision path while it is,
then float8 again."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft", reason="peft is not installed (scripts/python_env.sh's venv has it)")
pytest.importorskip("transformers", reason="transformers is not installed")

from peft import LoraConfig, get_peft_model  # noqa: E402

import gnmr.torch as gt  # noqa: E402
from gnmr.integrations import peft as gnmr_peft  # noqa: E402
from integ_models import SEQ, VOCAB, tiny_llama  # noqa: E402

TARGETS = ["q_proj", "v_proj", "up_proj"]
PREFIX = "base_model.model.model.layers"


def _lora(float8=False):
    model = tiny_llama(0)
    if float8:
        ao = pytest.importorskip("torchao.float8", reason="torchao is not installed")
        ao.convert_to_float8_training(
            model, module_filter_fn=lambda m, fqn: any(fqn.endswith(t) for t in TARGETS))
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS,
                                            lora_dropout=0.0))


def test_one_unit_per_adapted_module_adapters_only():
    model = _lora()
    mon = gt.Monitor(model, target="local", job_id="lora-units", strict=True,
                     **gnmr_peft.lora_units(model))
    want = [f"{PREFIX}.{i}.{m}" for i in range(2)
            for m in ("self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj")]
    assert sorted(mon.unit_names) == sorted(want)
    q = model.get_submodule(f"{PREFIX}.0.self_attn.q_proj")
    unit = next(u for u in mon._units if u.name == f"{PREFIX}.0.self_attn.q_proj")
    assert {id(p) for p in unit.params} == {id(q.lora_A["default"].weight),
                                            id(q.lora_B["default"].weight)}
    assert not q.get_base_layer().weight.requires_grad  # the base layer: frozen, no unit
    mon.close()


def test_spiked_adapter_promotes_its_float8_base_layer():
    gao = pytest.importorskip("gnmr.integrations.torchao", reason="torchao is not installed")
    model = _lora(float8=True)
    name = f"{PREFIX}.1.mlp.up_proj"
    lora = model.get_submodule(name)
    base = lora.get_base_layer()
    assert gao.is_float8(base)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    mon = gt.Monitor(model, target="local", job_id="lora-promote", strict=True,
                     config={"warmup": 3, "lag": 1, "max_o": 1, "lock_steps": 3},
                     **gnmr_peft.lora_units(model, base_promote=gao.promote))
    g = torch.Generator().manual_seed(5)
    promoted = {}
    for step in range(11):
        mon.before_forward(step)
        promoted[step] = "forward" in vars(base)  # the high-precision path in force
        ids = torch.randint(0, VOCAB, (4, SEQ), generator=g)
        model(input_ids=ids, labels=ids).loss.backward()
        assert base.weight.grad is None  # frozen base: nothing to observe there
        if step == 6:
            lora.lora_B["default"].weight.grad.mul_(1000.0)
        mon.after_backward(step)
        mon.apply(step, opt)
        opt.zero_grad(set_to_none=True)
    assert not any(promoted[s] for s in range(7)), promoted
    assert promoted[7] and promoted[8], promoted  # lag 1: from the next forward on
    assert not promoted[10] and "forward" not in vars(base)  # released: float8 again
    assert mon.errors == 0
    mon.close()


def test_lora_units_through_the_hf_trainer(tmp_path):
    """docs/integrations.md's ``GNMRCallback(**gnmr_peft.lora_units(model))``:
    the Trainer trains the adapters only, GNMR watches exactly them."""
    pytest.importorskip("accelerate", reason="the transformers Trainer needs accelerate")
    from transformers import Trainer, TrainingArguments

    from gnmr.integrations.hf import GNMRCallback
    from integ_models import TokenData, params

    model = _lora()
    before = params(model)
    cb = GNMRCallback(target="local", job_id="lora-hf", **gnmr_peft.lora_units(model))
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4,
                             learning_rate=1e-2, save_strategy="no", report_to="none",
                             use_cpu=True, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=TokenData(), callbacks=[cb]).train()
    assert len(cb.monitor.unit_names) == 6
    assert all(".lora_" not in n for n in cb.monitor.unit_names)
    assert [i.step for i in cb.history] == [0, 1, 2, 3]
    after = params(model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all(".lora_" in n for n in changed)  # the base stayed frozen
    cb.close()
