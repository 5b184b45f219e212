"""Tiny models and data for the integration tests (tests/python/test_integrations_*.py):
a transformers Llama built from a config with random weights (no download)
and a synthetic token dataset, small enough for a 2-core CPU."""
from __future__ import annotations

import torch

VOCAB, SEQ = 64, 16


def tiny_llama(seed: int = 0):
    """A 2-layer Llama, hidden 32, random weights from ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=SEQ, attention_dropout=0.0,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg)


class TokenData(torch.utils.data.Dataset):
    """``n`` random sequences (fixed by ``seed``), labels = inputs."""

    def __init__(self, n: int = 64, seed: int = 1):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def params(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def same(a: dict, b: dict) -> bool:
    """Bit-identical parameter dicts."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
