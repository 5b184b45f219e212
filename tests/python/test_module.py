"""The _gnmr extension without the adapter: config validation, tensor refs,
errors as exceptions, a client against the real gnmrd."""
from __future__ import annotations

import time

import pytest
import torch

import gnmr


def test_config_defaults_and_validation():
    d = gnmr.default_config()
    assert d["warmup"] == 50 and d["lag"] == 1 and d["entry"] == "clip" and d["max_o"] == 4
    v = gnmr.validate_config({"lag": 0, "actions": [{"pattern": "fc*", "action": "clip",
                                                     "clip_min_scale": 0.2}]})
    assert v["lag"] == 0 and v["actions"] == [{"pattern": "fc*", "action": "clip",
                                               "clip_min_scale": 0.2}]
    with pytest.raises(ValueError, match="unknown config key 'tua'"):
        gnmr.validate_config({"tua": 3})
    with pytest.raises(ValueError, match="'tau' must be a finite number > 1"):
        gnmr.validate_config({"tau": 0.5})
    with pytest.raises(ValueError, match="'warmup' must be an integer"):
        gnmr.validate_config({"warmup": 2.5})
    with pytest.raises(ValueError, match="'entry' must be one of none, clip, skip"):
        gnmr.validate_config({"entry": "zero"})
    with pytest.raises(ValueError, match=r"actions\[0\].action' must be one of"):
        gnmr.validate_config({"actions": [{"pattern": "x", "action": "boost"}]})
    with pytest.raises(ValueError, match=r"actions\[0\]' needs a 'pattern'"):
        gnmr.validate_config({"actions": [{"action": "clip"}]})


def test_tensor_ref_dtypes():
    for dt, name in [(torch.float32, "fp32"), (torch.bfloat16, "bf16"), (torch.float16, "fp16")]:
        t = torch.ones(10, dtype=dt)
        r = gnmr.tensor_ref(t)
        assert (r.data_ptr, r.numel, r.dtype, r.device) == (t.data_ptr(), 10, name, -1)
    with pytest.raises(ValueError, match="unsupported tensor dtype"):
        gnmr.tensor_ref(torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="contiguous"):
        gnmr.tensor_ref(torch.ones(4, 4).t())


def test_fp8_scale_inv_pointer():
    data = torch.full((64,), 0x38, dtype=torch.uint8)  # fp8 e4m3fn 1.0
    scale = torch.tensor([0.5], dtype=torch.float32)
    r = gnmr.TensorRef(data.data_ptr(), 64, "fp8_e4m3fn", -1, 1.0, scale.data_ptr())
    assert r.scale_inv_ptr == scale.data_ptr()
    assert gnmr.TensorRef(data.data_ptr(), 64, "fp8_e4m3fn").scale_inv_ptr == 0
    with pytest.raises(ValueError, match="fp8 tensors only"):
        gnmr.tensor_ref(torch.ones(3), scale_inv_tensor=scale)
    # A live scale stands in for a (NaN) static one; observe reads it each step.
    c = gnmr.Client(gnmr.ClientOptions(target="unix:/nonexistent/gnmrd.sock", job_id="j"))
    nan_static = gnmr.TensorRef(data.data_ptr(), 64, "fp8_e4m3fn", -1, float("nan"))
    with pytest.raises(ValueError, match="scale_inv is not finite"):
        c.add_unit("static", [nan_static])
    c.add_unit("live", [r])
    c.start()
    c.observe(0)
    scale[0] = float("inf")  # data, not an error: the unit's sumsq becomes NaN
    c.observe(1)
    c.stop()


def test_client_errors_are_exceptions():
    with pytest.raises(ValueError, match="target"):
        gnmr.Client(gnmr.ClientOptions(target="", job_id="j"))
    with pytest.raises(ValueError, match="rank"):
        gnmr.Client(gnmr.ClientOptions(target="unix:/nonexistent", job_id="j", rank=2,
                                       world_size=2))
    with pytest.raises(ValueError, match="pipeline_stage 2 must be < world_size 2"):
        gnmr.Client(gnmr.ClientOptions(target="unix:/nonexistent", job_id="j", world_size=2,
                                       pipeline_stage=2))
    assert gnmr.ClientOptions(target="t", job_id="j", pipeline_stage=1).pipeline_stage == 1
    assert gnmr.ClientOptions(target="t", job_id="j").attach_timeout_ms == 5000  # C++ default
    with pytest.raises(ValueError, match="attach_timeout must be > 0"):
        gnmr.Client(gnmr.ClientOptions(target="unix:/nonexistent", job_id="j",
                                       attach_timeout_ms=0))
    c = gnmr.Client(gnmr.ClientOptions(target="unix:/nonexistent/gnmrd.sock", job_id="j"))
    with pytest.raises(gnmr.Error, match="FAILED_PRECONDITION"):
        c.start()  # no units
    t = torch.ones(8)
    u = c.add_unit("u", [gnmr.tensor_ref(t)])
    with pytest.raises(ValueError, match="numel"):
        c.set_tensors(u, [gnmr.tensor_ref(torch.ones(3))])
    c.start()
    c.observe(0)
    with pytest.raises(ValueError):
        c.observe(0)  # steps must increase
    plan = c.plan_for(0)  # fail-open: no decision, no waiting
    assert not plan.has_decision and plan.entries == []
    with pytest.raises(gnmr.UnavailableError):
        c.export_state(300)
    c.stop()


def test_client_decides_against_gnmrd(gnmrd):
    opts = gnmr.ClientOptions(target=gnmrd.target, job_id="raw", decision_wait_ms=2000)
    cfg = {"warmup": 3, "lag": 1, "lock_steps": 3}
    c = gnmr.Client(opts, cfg)
    g = torch.ones(64)
    u = c.add_unit("layer", [gnmr.tensor_ref(g[:32]), gnmr.tensor_ref(g[32:])])
    assert c.num_units == 1 and c.unit_name(u) == "layer"
    c.start()
    deadline = time.monotonic() + 10
    while not c.counters().connected and time.monotonic() < deadline:
        time.sleep(0.01)
    for step in range(10):
        g.fill_(100.0 if step == 6 else 1.0)
        c.observe(step)
        plan = c.plan_for(step)
        if step >= 1:
            assert plan.has_decision, step
        e = plan.find(u)
        if 7 <= step < 10:
            assert e is not None and e.action == gnmr.Action.PROMOTE
            assert (e.since, e.until, e.first_step) == (7, 10, step == 7)
        else:
            assert e is None, (step, plan)
        c.ack(plan)
    assert c.flush(2000)
    k = c.counters()
    assert k.connected and k.acks_sent >= 9 and k.reports_sent == 10
    assert k.as_dict()["decisions_received"] == k.decisions_received
    # gnmrd attached the stream at once; the last plan had its decision.
    assert k.attach_failures == 0 and k.steps_without_decision == 0
    assert k.as_dict()["steps_without_decision"] == 0
    state = c.export_state()
    assert isinstance(state, bytes) and len(state) > 0
    c.import_state(state)
    with pytest.raises(ValueError, match="ControllerState"):
        c.import_state(b"\xff\xff\xff")
    c.stop()


def test_device_units_without_a_gpu_are_refused_and_host_units_keep_working(gnmrd):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: tests/python/test_torch_cuda.py covers it")
    c = gnmr.Client(gnmr.ClientOptions(target=gnmrd.target, job_id="dev", decision_wait_ms=2000),
                    {"warmup": 3})
    g = torch.ones(16)
    with pytest.raises(gnmr.Error, match="unit 'gpu'"):
        c.add_unit("gpu", [gnmr.TensorRef(g.data_ptr(), 16, "fp32", 0)])
    u = c.add_unit("host", [gnmr.tensor_ref(g)])
    assert c.num_units == 1 and c.unit_name(u) == "host"
    c.start()
    deadline = time.monotonic() + 10
    while not c.counters().connected and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(ValueError, match="stream"):
        c.observe(0, "not a stream")
    for step in range(3):
        c.observe(step, None)  # None: no CUDA stream, the host path
        assert c.plan_for(step).has_decision or step == 0
    k = c.counters()
    assert k.reports_enqueued == 3 and k.overhead_source == "host_wall"
    assert set(k.as_dict()) >= {"stats_gpu_seconds", "overhead_ratio", "overhead_step"}
    c.stop()
