"""Fixtures for the Python tests: the real gnmrd binary (path in $GNMRD) on a
private Unix socket and state directory, and a small deterministic model."""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from gnmrd_process import Gnmrd  # noqa: E402,F401

torch.set_num_threads(1)


@pytest.fixture
def gnmrd():
    d = Gnmrd()
    d.start()
    yield d
    d.cleanup()


@pytest.fixture
def gnmrd_factory():
    made = []

    def make(config_yaml: str = "") -> Gnmrd:
        d = Gnmrd(config_yaml)
        d.start()
        made.append(d)
        return d

    yield make
    for d in made:
        d.cleanup()
