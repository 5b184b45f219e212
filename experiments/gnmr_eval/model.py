"""A small byte-level decoder-only transformer whose Linears are GNMR units."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

from .fp8 import LowPrecisionLinear


@dataclass
class ModelConfig:
    layers: int = 2
    width: int = 128
    heads: int = 4
    ctx: int = 64
    vocab: int = 256
    mlp: int = 4


class Attention(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.heads = c.heads
        self.q = LowPrecisionLinear(c.width, c.width)
        self.k = LowPrecisionLinear(c.width, c.width)
        self.v = LowPrecisionLinear(c.width, c.width)
        self.o = LowPrecisionLinear(c.width, c.width)
        mask = torch.full((c.ctx, c.ctx), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, t, w = x.shape
        h, d = self.heads, w // self.heads
        q = self.q(x).view(b, t, h, d).transpose(1, 2)
        k = self.k(x).view(b, t, h, d).transpose(1, 2)
        v = self.v(x).view(b, t, h, d).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d) + self.mask[:t, :t]
        y = F.softmax(att, dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, t, w))


class Block(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.width)
        self.attn = Attention(c)
        self.ln2 = nn.LayerNorm(c.width)
        self.fc1 = LowPrecisionLinear(c.width, c.mlp * c.width)
        self.fc2 = LowPrecisionLinear(c.mlp * c.width, c.width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ByteTransformer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab, c.width)
        self.pos = nn.Embedding(c.ctx, c.width)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.width)
        self.head = LowPrecisionLinear(c.width, c.vocab)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def units(self) -> List[LowPrecisionLinear]:
        """The GNMR units in named_modules() order (= gnmr.torch.Monitor's)."""
        return [m for m in self.modules() if isinstance(m, LowPrecisionLinear)]

    def unit_names(self) -> List[str]:
        return [n for n, m in self.named_modules() if isinstance(m, LowPrecisionLinear)]

    def set_low_cost(self, on: bool) -> None:
        for m in self.units():
            m.low_cost = on
