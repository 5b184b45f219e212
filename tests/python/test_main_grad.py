"""Gradients in ``param.main_grad`` (Megatron, Transformer Engine's
``fuse_wgrad_accumulation``; docs/integrations.md, "Megatron and Transformer
Engine: main_grad"): a model that accumulates into fp32 views of one
contiguous bucket, as Megatron's DistributedDataParallel does (a
post-accumulate-grad hook adds ``.grad`` into ``main_grad`` and drops it),
gives the Monitor the same statistics, plans and parameters as the same
model with ``.grad``; the norms it reports are main_grad's; clip scales
main_grad and skip zeroes it in place (same storage); ``grad_attr="grad"``
leaves a main_grad alone; a declared ``main_grad`` that is missing is a
ValueError naming the parameter."""
from __future__ import annotations

import pytest
import torch

import gnmr.torch as gt
from gnmr_testlib import UNITS, batch, make

STEPS = 80
# step -> [(unit, factor)]: spikes on main_grad (or .grad), one pair at once
SPIKES = {20: [("a", 40.0)], 30: [("b", 40.0)], 45: [("c", 40.0), ("d", 20.0)],
          60: [("a", 40.0)]}
CONFIGS = {
    "lag1": {"warmup": 10, "lock_steps": 6, "max_o": 2, "lag": 1,
             "actions": [{"pattern": "a", "action": "clip", "clip_min_scale": 0.01},
                         {"pattern": "b", "action": "skip"}]},
    # lag 0: the promoted step's entry clip, a denied clip, an entry skip
    "lag0": {"warmup": 10, "lock_steps": 6, "max_o": 1, "lag": 0, "denied": "clip",
             "actions": [{"pattern": "b", "action": "skip"}]},
}


def megatron_buffers(model):
    """Megatron-style: one contiguous fp32 bucket, each parameter's
    ``main_grad`` a view into it; a hook moves ``.grad`` there."""
    if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        # PyTorch 2.1's hook; Megatron and TE need PyTorch 2.x too.
        pytest.skip(f"torch {torch.__version__} has no register_post_accumulate_grad_hook")
    params = list(model.parameters())
    bucket = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32)
    offset = 0
    for p in params:
        p.main_grad = bucket[offset:offset + p.numel()].view(p.shape)
        offset += p.numel()

        def move(param):
            param.main_grad.add_(param.grad)
            param.grad = None
        p.register_post_accumulate_grad_hook(move)
    return bucket


def _grads(model, attr):
    return {n: [getattr(p, attr).detach().clone() for p in getattr(model, n).parameters()]
            for n in UNITS}


def _run(kind, cfg, job):
    """kind: "grad" (plain .grad), "decoy" (.grad, grad_attr="grad", a
    main_grad that must stay untouched), "megatron" (auto) or
    "megatron_declared" (grad_attr="main_grad")."""
    model, opt = make(seed=11)
    megatron = kind.startswith("megatron")
    bucket = megatron_buffers(model) if megatron else None
    if kind == "decoy":
        for p in model.parameters():
            p.main_grad = torch.full_like(p, 7.0)
    attr = {"decoy": "grad", "megatron_declared": "main_grad"}.get(kind, "auto")
    mon = gt.Monitor(model, target="local", job_id=job, config=cfg, strict=True,
                     grad_attr=attr)
    where = "main_grad" if megatron else "grad"
    out = []
    for step in range(STEPS):
        mon.before_forward(step)
        if megatron:
            bucket.zero_()  # Megatron's zero_grad_buffer
        opt.zero_grad(set_to_none=True)
        x, y = batch(step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for unit, factor in SPIKES.get(step, []):
                for p in getattr(model, unit).parameters():
                    getattr(p, where).mul_(factor)
        before = _grads(model, where)
        ptrs = [p.main_grad.data_ptr() for p in model.parameters()] if megatron else None
        mon.after_backward(step)
        applied = mon.apply(step, opt, step_optimizer=False)
        info = mon.last_step_info()
        after = (_grads(model, where) if megatron else
                 {n: [None if p.grad is None else p.grad.clone()
                      for p in getattr(model, n).parameters()] for n in UNITS})
        if megatron:  # same storage: views of the bucket still
            assert all(p.grad is None and p.main_grad._base is bucket
                       for p in model.parameters())
            assert [p.main_grad.data_ptr() for p in model.parameters()] == ptrs
            after["<bucket>"] = bucket.clone()
        if not applied.skip_step:
            if megatron:  # Megatron copies main_grad into the (main) parameter's .grad
                for p in model.parameters():
                    p.grad = p.main_grad.clone()
            opt.step()
            if megatron:
                opt.zero_grad(set_to_none=True)
        out.append((applied, info, before, after))
    if kind == "decoy":
        assert all(torch.equal(p.main_grad, torch.full_like(p, 7.0))
                   for p in model.parameters())
    mon.close()
    return out, [p.detach().clone() for p in model.parameters()], bucket


def _plans(run):
    return [(a.step, a.digest, a.skip_step, sorted(a.clipped.items()), a.skipped, a.promoted)
            for a, _i, _b, _a in run]


def _norm(ts):
    return float(torch.sqrt(sum((t.double() ** 2).sum() for t in ts)))


@pytest.mark.parametrize("cfg", sorted(CONFIGS))
def test_main_grad_gives_the_plans_and_parameters_of_grad(cfg):
    runs = {kind: _run(kind, CONFIGS[cfg], f"mg-{cfg}-{kind}")
            for kind in ("grad", "decoy", "megatron", "megatron_declared")}
    ref, ref_params, _ = runs["grad"]
    assert any(a.clipped for a, *_r in ref), "a clip was expected"
    assert any(a.skipped for a, *_r in ref), "a skip was expected"
    for kind, (run, params, bucket) in runs.items():
        # The same spikes seen at the same steps: the same plans, the same updates
        # (SGD: a zeroed main_grad moves a parameter as little as a dropped .grad).
        assert _plans(run) == _plans(ref), kind
        for p, q in zip(params, ref_params):
            assert torch.equal(p, q), kind
        if bucket is None:
            continue
        for applied, info, before, after in run:
            for name in UNITS:
                # The norms the Monitor saw are main_grad's.
                assert info.norms[name] == pytest.approx(_norm(before[name]), rel=1e-5)
                if name in applied.skipped:  # zeroed in place
                    assert all(not t.any() for t in after[name])
                elif name in applied.clipped:
                    s = applied.clipped[name]
                    for b, a in zip(before[name], after[name]):
                        assert torch.allclose(a, b * s)
                else:
                    assert all(torch.equal(a, b) for a, b in zip(after[name], before[name]))


def test_skip_zeroes_main_grad_in_place_in_the_bucket():
    model, _ = make(seed=11)
    bucket = megatron_buffers(model)
    spans = {}  # unit -> (first, end) in the bucket
    for name in UNITS:
        ps = list(getattr(model, name).parameters())
        first = (ps[0].main_grad.data_ptr() - bucket.data_ptr()) // 4
        spans[name] = (first, first + sum(p.numel() for p in ps))
    del model
    run, _params, _bucket = _run("megatron", CONFIGS["lag1"], "mg-skip")
    skipped = [(a, bf, af) for a, _i, bf, af in run if a.skipped]
    assert skipped
    for applied, before, after in skipped:
        for name in applied.skipped:
            lo, hi = spans[name]
            assert any(t.any() for t in before[name])
            assert not after["<bucket>"][lo:hi].any()  # the framework's buffer holds the zeroes
        kept = [n for n in UNITS if n not in applied.skipped and n not in applied.clipped]
        for name in kept:
            lo, hi = spans[name]
            flat = torch.cat([t.reshape(-1) for t in before[name]])
            assert torch.equal(after["<bucket>"][lo:hi], flat)


def test_grad_mode_reads_grad_and_auto_reads_main_grad():
    for attr, want in (("grad", "grad"), ("auto", "main_grad")):
        model, _ = make(seed=1)
        for p in model.parameters():
            p.main_grad = torch.full_like(p, 0.5)
        mon = gt.Monitor(model, target="local", job_id=f"mg-{attr}", strict=True,
                         grad_attr=attr)
        x, y = batch(0)
        torch.nn.functional.mse_loss(model(x), y).backward()  # .grad and main_grad both set
        mon.after_backward(0)
        mon.apply(0)
        norms = mon.last_step_info().norms
        for name in UNITS:
            ts = [getattr(p, want) for p in getattr(model, name).parameters()]
            assert norms[name] == pytest.approx(_norm(ts), rel=1e-5), (attr, name)
        mon.close()


def test_auto_decides_per_parameter():
    model, _ = make(seed=2)
    model.b.weight.main_grad = torch.full_like(model.b.weight, 0.25)  # bias keeps .grad
    mon = gt.Monitor(model, target="local", job_id="mg-mixed", strict=True)
    x, y = batch(0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    mon.after_backward(0)
    mon.apply(0)
    want = _norm([model.b.weight.main_grad, model.b.bias.grad])
    assert mon.last_step_info().norms["b"] == pytest.approx(want, rel=1e-5)
    mon.close()


def test_declared_main_grad_missing_names_the_parameter():
    model, _ = make()
    for name in ("a", "b", "d"):
        for p in getattr(model, name).parameters():
            p.main_grad = torch.zeros_like(p)
    with pytest.raises(ValueError, match=r"grad_attr='main_grad'.*'c\.weight' of unit 'c'"):
        gt.Monitor(model, target="local", job_id="mg-missing", grad_attr="main_grad")


def test_bad_grad_attr_and_overlap_with_main_grad_are_refused():
    model, _ = make()
    with pytest.raises(ValueError, match=r"grad_attr='mian_grad'.*'auto', 'grad', 'main_grad'"):
        gt.Monitor(model, target="local", job_id="mg-bad", grad_attr="mian_grad")
    megatron_buffers(model)
    with pytest.raises(ValueError, match=r"observe_during_backward.*main_grad"):
        gt.Monitor(model, target="local", job_id="mg-overlap", observe_during_backward=True)
    # .grad declared: the hooks are fine (main_grad is not what is read)
    gt.Monitor(model, target="local", job_id="mg-overlap-grad", observe_during_backward=True,
               grad_attr="grad").close()
