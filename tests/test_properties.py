"""Monotonicity properties of the model (hypothesis), in float64 with a tight solver tol."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import jaxpareto as jp

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-235b-a22b", "deepseek-v3", "mixtral-8x7b"]
SLACK = 1e-9  # relative: float64 rounding of the solved fixed point

configs = st.fixed_dictionaries(dict(
    model=st.sampled_from(MODELS),
    tp=st.sampled_from([1, 2, 4, 8]),
    concurrency=st.integers(1, 2048),
    think_time_s=st.floats(0.0, 60.0),
    context_tokens=st.integers(256, 200_000),
    hit_rate=st.floats(0.0, 1.0),
))


def _run(gpu, cfg, **override):
    args = {**cfg, **override}
    return jp.sweep(gpu=gpu, dtype="float64", tol=1e-12, **args)


def _gpu(name, bandwidth_gbs):
    return jp.Hardware(name=name, memory_gb=192.0, bandwidth_gbs=bandwidth_gbs,
                       tflops_fp16=1000.0, tflops_fp8=2000.0)


@given(cfg=configs, bw=st.floats(500.0, 10_000.0), factor=st.floats(1.0, 4.0))
def test_more_bandwidth_never_raises_tpot(cfg, bw, factor):
    ds = _run([_gpu("slow", bw), _gpu("fast", bw * factor)], cfg)
    slow, fast = ds.tpot_ms.values[0].ravel()[0], ds.tpot_ms.values[1].ravel()[0]
    if np.isfinite(slow):
        assert fast <= slow * (1 + SLACK)


@given(cfg=configs, extra=st.floats(0.001, 60.0))
def test_more_think_time_never_raises_turn_throughput(cfg, extra):
    z = cfg["think_time_s"]
    ds = _run("h200-sxm", cfg, think_time_s=[z, z + extra])
    x = ds.turns_per_s.values.ravel()
    if np.isfinite(x[0]):
        assert x[1] <= x[0] * (1 + SLACK)


@given(cfg=configs, delta=st.floats(0.0, 1.0))
def test_higher_hit_rate_never_raises_ttft(cfg, delta):
    h = cfg["hit_rate"]
    hi = min(1.0, h + delta)
    if hi == h:
        return
    ds = _run("b200", cfg, hit_rate=[h, hi])
    ttft = ds.ttft_ms.values.ravel()
    if np.isfinite(ttft[0]):
        assert ttft[1] <= ttft[0] * (1 + SLACK)
