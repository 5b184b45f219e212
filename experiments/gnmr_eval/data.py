"""The corpus: Debian's ``fortunes`` cookie files, read as bytes.

Each file is a list of cookies separated by lines holding only ``%``. Every
10th cookie (in file order) goes to the validation split, the rest to the
training split, so both see every file's style. Bytes are the vocabulary
(256 symbols).
"""
from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass

import torch

FORTUNES_DIR = "/usr/share/games/fortunes"
# Pictures, not language.
EXCLUDED = {"art", "ascii-art"}


@dataclass
class Corpus:
    train: torch.Tensor  # uint8
    val: torch.Tensor
    files: int
    cookies: int
    sha256: str

    def describe(self) -> str:
        return (f"Debian package `fortunes` ({self.files} cookie files, {self.cookies} cookies, "
                f"{len(self.train) + len(self.val):,} bytes; train {len(self.train):,} bytes, "
                f"validation {len(self.val):,} bytes = every 10th cookie; sha256 {self.sha256[:12]})")


def load_corpus(directory: str = FORTUNES_DIR) -> Corpus:
    paths = sorted(p for p in glob.glob(os.path.join(directory, "*"))
                   if os.path.isfile(p) and not os.path.islink(p) and not p.endswith(".dat")
                   and os.path.basename(p) not in EXCLUDED)
    if not paths:
        raise FileNotFoundError(
            f"no cookie files in {directory}: install the Debian package `fortunes` "
            "(scripts/install_deps.sh does)")
    train, val = bytearray(), bytearray()
    digest = hashlib.sha256()
    n = 0
    for path in paths:
        with open(path, "rb") as f:
            raw = f.read()
        digest.update(raw)
        for cookie in raw.split(b"\n%\n"):
            cookie = cookie.strip(b"%\n")
            if not cookie:
                continue
            (val if n % 10 == 9 else train).extend(cookie + b"\n\n")
            n += 1
    return Corpus(torch.frombuffer(train, dtype=torch.uint8).clone(),
                  torch.frombuffer(val, dtype=torch.uint8).clone(),
                  len(paths), n, digest.hexdigest())


class Batches:
    """Seeded random windows of ``ctx + 1`` bytes: identical batches for every
    arm of a seed (the comparisons are paired)."""

    def __init__(self, data: torch.Tensor, batch: int, ctx: int, seed: int):
        self.data, self.batch, self.ctx = data, batch, ctx
        self.gen = torch.Generator().manual_seed(seed)

    def next(self):
        starts = torch.randint(0, len(self.data) - self.ctx - 1, (self.batch,), generator=self.gen)
        idx = starts[:, None] + torch.arange(self.ctx + 1)[None, :]
        w = self.data[idx].long()
        return w[:, :-1], w[:, 1:]


def validation_windows(data: torch.Tensor, ctx: int, count: int):
    """``count`` evenly spaced, fixed windows of the validation split."""
    stride = max(1, (len(data) - ctx - 1) // count)
    starts = torch.arange(count) * stride
    idx = starts[:, None] + torch.arange(ctx + 1)[None, :]
    w = data[idx].long()
    return w[:, :-1], w[:, 1:]
