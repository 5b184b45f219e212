"""gnmr.torch.Monitor on CUDA tensors (the client's GPU statistics path).
Skips without a CUDA device (Debian's python3-torch is CPU-only)."""
from __future__ import annotations

import pytest
import torch

import gnmr.torch as gt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

CFG = {"warmup": 4, "lag": 1, "lock_steps": 3, "max_o": 2}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(64, 256)
        self.b = torch.nn.Linear(256, 64)


def test_cuda_monitor_decides_like_the_cpu_monitor(gnmrd):
    """Identical gradients (copied to the GPU) give bit-identical statistics,
    so the CUDA job and the CPU job get identical decisions step by step."""
    torch.manual_seed(0)
    cpu = Net()
    gpu = Net().cuda()
    mons = [gt.Monitor(m, target=gnmrd.target, job_id=f"cuda-{i}", config=CFG,
                       decision_wait_ms=5000, strict=True) for i, m in enumerate((cpu, gpu))]
    assert all(m.wait_connected(10) for m in mons)
    digests = [[], []]  # per job: what apply() did at each step
    g = torch.Generator().manual_seed(1)
    for step in range(16):
        for pc, pg in zip(cpu.parameters(), gpu.parameters()):
            grad = torch.randn(pc.shape, generator=g).to(torch.bfloat16).float()
            if step == 9 and pc.dim() == 2 and pc.shape[0] == 256:
                grad *= 40.0  # a spike in unit a
            pc.grad = grad
            pg.grad = grad.cuda()  # new device memory every step: pointers refresh
        for i, mon in enumerate(mons):
            mon.before_forward(step)
            mon.after_backward(step)
            applied = mon.apply(step, None)
            digests[i].append((step, applied.has_decision, tuple(applied.promoted),
                               tuple(sorted(applied.clipped.items()))))
    assert digests[0] == digests[1]
    assert any("a" in d[2] for d in digests[1])  # the spike was acted on
    assert mons[1].client.flush(5000)
    k = mons[1].counters()
    assert k.reports_sent == 16 and k.stats_gpu_seconds > 0
    for m in mons:
        m.close()
