"""Presets and the safe default of gnmr.torch.Monitor (gnmr/_presets.py;
python/README.md, "Presets"): plain nn.Linear units with the default
promote callback have no high-precision path, so the default Monitor clips
them instead of a promotion that changes nothing, and says so; a declared
or detected path keeps promote; ``preset="monitor_only"`` never touches a
gradient; the user's config keys override a preset's."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import gnmr.torch as gt
from gnmr_testlib import UNITS, Net, make, train

CFG = {"warmup": 10, "lock_steps": 6, "max_o": 2}
# A x16 fault on b for 4 steps (the evaluation's faults last 1-12 steps).
FAULT = {s: ("b", 16.0) for s in range(30, 34)}
STEPS = range(40)


def _norm(ts):
    return float(torch.sqrt(sum((t.double() ** 2).sum() for t in ts if t is not None)))


def _ours(w):
    return [x for x in w if issubclass(x.category, gt.NoHighPrecisionWarning)]


def _monitor(model, **kw):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        mon = gt.Monitor(model, target="local", job_id=kw.pop("job_id", "presets"),
                         strict=True, **kw)
    return mon, _ours(w)


def _run(mon, model, opt, spikes=FAULT, steps=STEPS):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        recs = train(model, opt, mon, steps, spikes=spikes)
    mon.close()
    return {r.step: r for r in recs}, _ours(w)


def _ratio(rec, unit="b"):
    """|grad after apply| / |grad before| of `unit` at that step."""
    return _norm(rec.grads_after[unit]) / _norm(rec.grads_before[unit])


class FlagLinear(torch.nn.Linear):
    """A Linear with a high-precision path: its forward reads gnmr_promoted."""

    def forward(self, x):
        if getattr(self, "gnmr_promoted", False):
            return F.linear(x, self.weight, self.bias)
        return F.linear(x.bfloat16().float(), self.weight.bfloat16().float(), self.bias)


def test_stock_linear_units_clip_by_default_and_say_so():
    model, opt = make(seed=3)
    mon, w = _monitor(model, config=CFG)
    assert len(w) == 1 and "4 of 4 unit(s) have no high-precision path" in str(w[0].message)
    assert "torch.nn.modules.linear.Linear" in str(w[0].message)
    assert w[0].filename == __file__  # attributed to the caller of Monitor()
    assert mon._config["actions"] == [{"pattern": "*", "action": "clip"}]
    recs, later = _run(mon, model, opt)
    assert later == []  # nothing is promoted, so no promotion warning
    # Lag 1: admitted at 30, clipped from 31 on while the fault lasts.
    assert _ratio(recs[30]) == 1.0  # the admission's own step: the lag
    for s in (31, 32, 33):
        assert "b" in recs[s].applied.clipped and _ratio(recs[s]) < 0.2, s
        assert recs[s].applied.promoted == []
    assert all(not r.applied.promoted for r in recs.values())

    # The same run declaring a high-precision path: the old behaviour, a
    # promotion, and the faulty gradients reach the optimizer as they are.
    model, opt = make(seed=3)
    mon, w = _monitor(model, config=CFG, high_precision=True)
    assert w == [] and mon._config["actions"] == []
    recs_hp, later = _run(mon, model, opt)
    assert later == []  # declared: no promotion warning either
    for s in (31, 32, 33):
        assert "b" in recs_hp[s].applied.promoted and _ratio(recs_hp[s]) == 1.0, s


def test_lag0_clips_the_spikes_own_step():
    model, opt = make(seed=3)
    mon, w = _monitor(model, config=dict(CFG, lag=0))
    assert len(w) == 1 and "the spike's own step is clipped" in str(w[0].message)
    recs, _ = _run(mon, model, opt, spikes={30: ("b", 16.0)})
    assert "b" in recs[30].applied.clipped and _ratio(recs[30]) < 0.2
    # After the clip, b's gradient is back near its pre-spike size.
    assert _norm(recs[30].grads_after["b"]) < 2.0 * _norm(recs[29].grads_before["b"])


def test_monitor_only_never_touches_a_gradient():
    model, opt = make(seed=3)
    mon, w = _monitor(model, preset="monitor_only", config={"warmup": 10})
    assert w == [] and mon._config["max_o"] == 0 and mon._config["actions"] == []
    recs, later = _run(mon, model, opt, spikes={**FAULT, 35: ("a", 50.0)})
    assert later == []
    for s, r in recs.items():
        assert r.applied.has_decision or s == 0, s
        assert not (r.applied.clipped or r.applied.promoted or r.applied.skipped), s
        for u in UNITS:
            assert all(torch.equal(a, b) for a, b in zip(r.grads_before[u], r.grads_after[u]))
        assert r.applied.optimizer_stepped
    # ... and the spike was seen: its norm is in the step's info.
    assert recs[30].applied.has_decision


def test_monitor_only_keeps_the_same_step_guard():
    model, opt = make(seed=3)
    mon, _ = _monitor(model, preset="monitor_only", config={"warmup": 10})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        recs = {r.step: r for r in train(model, opt, mon, range(20), nans={12: "c"})}
    mon.close()
    assert recs[12].applied.skip_step and not recs[12].applied.optimizer_stepped
    assert all(recs[s].applied.optimizer_stepped for s in range(20) if s != 12)


def test_a_custom_promote_callback_keeps_promote_without_warnings():
    calls = []
    model, opt = make(seed=3)
    mon, w = _monitor(model, config=CFG,
                      promote_callback=lambda n, m, p: calls.append((n, p)))
    assert w == [] and mon._config["actions"] == []
    recs, later = _run(mon, model, opt)
    assert later == []
    assert ("b", True) in calls and "b" in recs[31].applied.promoted
    assert "b" not in recs[31].applied.clipped


def test_a_module_that_reads_the_flag_keeps_promote():
    torch.manual_seed(0)
    model = torch.nn.Sequential(FlagLinear(8, 8), torch.nn.Tanh(), FlagLinear(8, 4))
    mon, w = _monitor(model, config=CFG)
    assert w == [] and mon._config["actions"] == []
    mon.close()
    # Declared False: clipped, without a warning (the user said so).
    mon, w = _monitor(model, config=CFG, high_precision=False)
    assert w == [] and mon._config["actions"] == [{"pattern": "*", "action": "clip"}]
    mon.close()


def test_mixed_units_get_rules_by_name_the_same_on_every_build():
    def build():
        torch.manual_seed(0)
        net = Net()
        net.a = FlagLinear(8, 16)  # a has a path; b, c, d do not
        return net
    mon, w = _monitor(build(), config=CFG)
    assert len(w) == 1 and "3 of 4 unit(s)" in str(w[0].message)
    # The shorter list: a promotes, every other unit clips.
    assert mon._config["actions"] == [{"pattern": "a", "action": "promote"},
                                      {"pattern": "*", "action": "clip"}]
    again, _ = _monitor(build(), config=CFG, job_id="presets-2")
    assert again._config == mon._config  # from the structure only: every rank agrees
    mon.close()
    again.close()
    # Glob characters in a unit name are matched literally.
    model = build()
    mon, _ = _monitor(model, config=CFG, unit_group=lambda n: "*" if n == "a" else n + "[x]")
    assert mon._config["actions"] == [{"pattern": "[*]", "action": "promote"},
                                      {"pattern": "*", "action": "clip"}]
    mon.close()


def test_explicit_promote_of_a_stock_linear_is_warned_about_once():
    model, opt = make(seed=3)
    cfg = dict(CFG, actions=[{"pattern": "*", "action": "promote"}])
    mon, w = _monitor(model, config=cfg)
    assert w == []  # the user's actions stand
    spikes = {**FAULT, 38: ("d", 50.0), 39: ("d", 50.0)}
    recs, later = _run(mon, model, opt, spikes=spikes, steps=range(45))
    assert "b" in recs[31].applied.promoted and "d" in recs[40].applied.promoted
    assert len(later) == 1, [str(x.message) for x in later]
    assert later[0].filename.endswith("gnmr_testlib.py")  # the caller of apply()
    assert "module 'b' (torch.nn.modules.linear.Linear) was promoted" in str(later[0].message)
    assert "changes nothing" in str(later[0].message)


class Quiet(torch.nn.Linear):
    """Its own forward, which never reads gnmr_promoted (as torchao's
    Float8Linear with the default promote callback)."""

    def forward(self, x):
        return super().forward(x)


def test_a_module_that_ignores_the_flag_is_warned_about_at_its_first_promotion():
    model, opt = make(seed=3)
    for n in UNITS:
        old = getattr(model, n)
        q = Quiet(old.in_features, old.out_features, bias=old.bias is not None)
        q.load_state_dict(old.state_dict())
        setattr(model, n, q)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    mon, w = _monitor(model, config=CFG)
    assert w == [] and mon._config["actions"] == []  # not PyTorch's forward: promote stays
    recs, later = _run(mon, model, opt)
    assert "b" in recs[31].applied.promoted
    assert len(later) == 1 and "Quiet) was promoted" in str(later[0].message)


def test_user_config_overrides_the_preset():
    model, _ = make()
    before = gt.presets()
    mon, _ = _monitor(model, preset="recommended", config={"lock_steps": 3, "max_o": 1})
    c = mon._config
    assert (c["lag"], c["max_o"], c["lock_steps"]) == (0, 1, 3)
    assert (c["denied"], c["attribution"], c["entry"]) == ("clip", "upstream", "clip")
    mon.close()
    assert gt.presets() == before  # the preset itself is untouched
    rules = [{"pattern": "b", "action": "skip"}]
    mon, w = _monitor(model, preset="recommended", config={"actions": rules})
    assert w == [] and mon._config["actions"] == rules
    mon.close()


def test_presets_are_named_and_read_only():
    assert set(gt.PRESETS) == {"default", "recommended", "monitor_only"}
    r = gt.PRESETS["recommended"]
    assert (r["lag"], r["max_o"], r["lock_steps"], r["denied"], r["attribution"]) == \
        (0, 2, 10, "clip", "upstream")
    with pytest.raises(TypeError):
        r["lag"] = 1
    p = gt.presets()
    p["recommended"]["lag"] = 5
    assert gt.PRESETS["recommended"]["lag"] == 0
    model, _ = make()
    with pytest.raises(ValueError, match="unknown preset 'best'.*default, monitor_only, "
                                         "recommended"):
        gt.Monitor(model, target="local", job_id="p", preset="best")
    with pytest.raises(ValueError, match="high_precision must be"):
        gt.Monitor(model, target="local", job_id="p", high_precision="yes")
    with pytest.raises(ValueError, match="denied"):  # a preset's keys are validated too
        gt.Monitor(model, target="local", job_id="p", preset="recommended",
                   config={"lag": 1})


def test_with_gnmrd_and_no_config_the_daemons_config_stands(gnmrd):
    model, _ = make()
    with pytest.warns(gt.NoHighPrecisionWarning, match="the job's config is gnmrd's"):
        mon = gt.Monitor(model, target=gnmrd.target, job_id="presets-gnmrd")
    assert mon._config is None  # nothing sent: the daemon's default job config decides
    mon.close()
    with pytest.warns(gt.NoHighPrecisionWarning, match="they get action 'clip'"):
        mon = gt.Monitor(model, target=gnmrd.target, job_id="presets-gnmrd-2",
                         preset="default")
    assert mon._config["actions"] == [{"pattern": "*", "action": "clip"}]
    mon.close()
