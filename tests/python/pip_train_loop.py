"""Run by pip_install_check.py with a venv's python: gnmr must come from
that venv (no PYTHONPATH), and a 20-step loop against a real gnmrd
($GNMRD) must get its decisions and apply them.

With $GNMR_TARGET set, the gnmrd is one that already runs there (the wheel
check of scripts/deploy_check.sh: the loop runs in a clean container, gnmrd
on the host behind a mounted Unix socket)."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
assert "PYTHONPATH" not in os.environ, "the installed package must import without PYTHONPATH"
sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # gnmrd_process only

import torch  # noqa: E402

import gnmr  # noqa: E402
import gnmr.torch as gt  # noqa: E402


def main() -> int:
    venv = os.path.realpath(sys.argv[1])
    where = os.path.realpath(gnmr.__file__)
    assert where.startswith(venv + os.sep), f"gnmr imported from {where}, not the venv {venv}"
    assert os.path.realpath(gnmr._gnmr.__file__).startswith(venv + os.sep)
    assert gnmr.__version__ == sys.argv[2], (gnmr.__version__, sys.argv[2])  # project(VERSION)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    daemon = None
    target = os.environ.get("GNMR_TARGET")
    if not target:
        from gnmrd_process import Gnmrd

        daemon = Gnmrd()
        daemon.start()
        target = daemon.target
    try:
        mon = gt.Monitor(model, target=target, job_id="pip-venv",
                         config={"warmup": 5, "lag": 1}, strict=True)
        decided = stepped = 0
        for step in range(20):
            x, y = torch.randn(16, 8), torch.randn(16, 4)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            mon.after_backward(step)
            applied = mon.apply(step, opt)
            decided += applied.has_decision
            stepped += applied.optimizer_stepped
        mon.client.flush(5000)
        c = mon.counters()
        mon.close()
    finally:
        if daemon is not None:
            daemon.cleanup()
    print(f"gnmr {gnmr.__version__} from {where}: {decided}/20 plans with a decision, "
          f"{stepped} optimizer steps, {c.decisions_received} decisions received, "
          f"{c.reports_sent} reports sent")
    # lag 1: step 0 has no decision yet; every later step has one.
    assert decided == 19, decided
    assert stepped == 20, stepped
    assert c.decisions_received >= 19 and c.reports_sent == 20 and c.missed_decisions == 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
