"""Thin adapters of ``gnmr.torch.Monitor`` to training libraries
(docs/integrations.md). Each submodule imports its library only when it
is imported itself, so ``import gnmr.integrations`` costs nothing:

- ``gnmr.integrations.hf``: ``GNMRCallback``, a transformers ``TrainerCallback``
- ``gnmr.integrations.lightning``: ``GNMRCallback``, a Lightning ``Callback``
- ``gnmr.integrations.peft``: LoRA adapters as units (``lora_units``)
- ``gnmr.integrations.torchao``: float8 / MX training: promote to the
  high-precision path, forward tensors from torchao's own casts
- ``gnmr.integrations.te``: Transformer Engine modules (``PromotableTE``)

All of them keep the Monitor's rule: nothing they do raises into the
training loop unless ``strict=True``; a problem is warned about and counted
(``monitor.errors``).
"""
