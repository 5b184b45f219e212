"""gnmr.integrations.te: Transformer Engine is not installable here (it
needs CUDA), so the adapter's own test skips; what runs everywhere is that
the module says what it needs when TE is missing."""
from __future__ import annotations

import importlib.util

import pytest
import torch


def _have_te() -> bool:
    try:
        return importlib.util.find_spec("transformer_engine.pytorch") is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.skipif(_have_te(), reason="Transformer Engine is installed")
def test_import_without_te_names_what_is_missing():
    with pytest.raises(ImportError, match="needs Transformer Engine"):
        import gnmr.integrations.te  # noqa: F401


@pytest.mark.skipif(not _have_te() or not torch.cuda.is_available(),
                    reason="Transformer Engine (CUDA only) is not installable on this machine")
def test_promoted_te_linear_runs_without_fp8():
    import transformer_engine.pytorch as te

    import gnmr.torch as gt
    from gnmr.integrations import te as gnmr_te

    torch.manual_seed(0)
    model = torch.nn.Sequential(te.Linear(64, 64), torch.nn.GELU(), te.Linear(64, 64)).cuda()
    assert gnmr_te.wrap_te_modules(model) == 2
    mon = gt.Monitor(model, target="local", job_id="te", strict=True,
                     **gnmr_te.monitor_kwargs())
    assert mon.unit_names == ["0", "2"]
    x = torch.randn(32, 64, device="cuda")
    with te.fp8_autocast(enabled=True):
        low = model(x)
        mon._promote_callback("0", model[0], True)
        high = model(x)
        mon._promote_callback("0", model[0], False)
        again = model(x)
    assert not torch.equal(low, high)
    assert torch.equal(low, again)
    mon.close()
