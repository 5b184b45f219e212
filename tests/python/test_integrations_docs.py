"""The examples of docs/integrations.md, run verbatim (each in its own
process, in a temporary folder): a block that starts with
``# gnmr-doc-example: NAME`` must run to the end without a gnmr warning,
where its library is installed."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import torch

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "integrations.md")
BLOCK = re.compile(r"```python\n(# gnmr-doc-example: (\w+)\n.*?)```", re.S)
NEEDS = {"hf": ["transformers", "accelerate"], "lightning": ["lightning"],
         "peft": ["peft", "transformers"], "torchao": ["torchao"],
         "te": ["transformer_engine"], "main_grad": []}
# what each example leaves behind when it ran through
LEAVES = {"hf": os.path.join("gnmr-hf-demo", "checkpoint-20", "gnmr_state.pt")}


def _examples():
    with open(DOC) as f:
        return {m.group(2): m.group(1) for m in BLOCK.finditer(f.read())}


def test_every_integration_has_an_example():
    assert sorted(_examples()) == sorted(NEEDS)


def _have(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_example_runs(name, tmp_path):
    missing = [m for m in NEEDS[name] if not _have(m)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (the {name} example needs it)")
    if name == "main_grad" and not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        pytest.skip(f"torch {torch.__version__}: the main_grad example's hook needs PyTorch 2.1 "
                    "(as Megatron and TE do)")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               OPENBLAS_NUM_THREADS="1", PYTHONWARNINGS="default")
    r = subprocess.run([sys.executable, "-c", _examples()[name]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # gnmr's warnings read "...Warning: gnmr...: <problem>"
    assert not re.search(r"Warning: gnmr", r.stderr), r.stderr[-3000:]
    if name in LEAVES:
        assert (tmp_path / LEAVES[name]).is_file()
