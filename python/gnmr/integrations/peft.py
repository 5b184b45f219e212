"""GNMR with PEFT LoRA (docs/integrations.md, "PEFT / LoRA"): one unit per
adapted module, made of its trainable adapter weights (``lora_A`` and
``lora_B`` of every adapter), named as the adapted module; the frozen base
layer has no gradient and is no part of any unit. Promoting a unit
switches its *base layer's* low-precision path (the adapters are small and
stay as they are)::

    from gnmr.integrations import peft as gnmr_peft
    model = get_peft_model(model, LoraConfig(...))
    monitor = gnmr.torch.Monitor(model, target="local", job_id="lora",
                                 **gnmr_peft.lora_units(model))

With torchao float8 base layers (``convert_to_float8_training`` before
``get_peft_model``): ``lora_units(model, base_promote=gnmr.integrations.
torchao.promote)`` runs a promoted module's base layer in high precision.

Other trainable linears (``modules_to_save``, a base layer left trainable)
are units of their own, named as in ``named_modules()``, as with the
default filter.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict

import torch as _torch
from peft.tuners.lora import LoraLayer

import gnmr.torch as _gt

__all__ = ["lora_units", "is_lora_layer"]

# "<adapted module>.lora_A.<adapter>" / lora_B: an adapter's Linear.
_ADAPTER = re.compile(r"^(?P<owner>.+)\.lora_[AB]\.[^.]+$")

PromoteFn = Callable[[str, _torch.nn.Module, bool], None]


def is_lora_layer(module: _torch.nn.Module) -> bool:
    return isinstance(module, LoraLayer)


def lora_units(model: _torch.nn.Module,
               base_promote: PromoteFn = _gt.default_promote_callback) -> Dict[str, Any]:
    """``unit_filter``, ``unit_group`` and ``promote_callback`` for a
    ``gnmr.torch.Monitor`` on a PEFT LoRA model; ``base_promote(name,
    base_layer, promoted)`` switches a base layer's path (default: sets
    ``base_layer.gnmr_promoted``)."""
    owners: Dict[int, tuple] = {}  # id(adapter module) -> (owner name, LoRA layer)
    for name, module in model.named_modules():
        m = _ADAPTER.match(name)
        if m is None:
            continue
        owner = model.get_submodule(m.group("owner"))
        if is_lora_layer(owner):
            owners[id(module)] = (m.group("owner"), owner)

    def unit_filter(name: str, module: _torch.nn.Module) -> bool:
        # Adapters and other Linears; a LoRA layer itself is not selected
        # (its parameters are reached through its adapter modules), and a
        # frozen base layer has no trainable parameter, so it is no unit.
        return id(module) in owners or (isinstance(module, _torch.nn.Linear)
                                        and not is_lora_layer(module))

    def unit_group(name: str) -> str:
        m = _ADAPTER.match(name)
        return m.group("owner") if m is not None else name

    def promote_callback(name: str, module: _torch.nn.Module, promoted: bool) -> None:
        owned = owners.get(id(module))
        if owned is None:  # a plain trainable Linear
            base_promote(name, module, promoted)
            return
        owner_name, owner = owned
        # Called for lora_A and lora_B of the unit: switch the base once.
        if getattr(owner, "gnmr_promoted", False) == promoted:
            return
        owner.gnmr_promoted = promoted
        base_promote(owner_name + ".base_layer", owner.get_base_layer(), promoted)

    return {"unit_filter": unit_filter, "unit_group": unit_group,
            "promote_callback": promote_callback}
