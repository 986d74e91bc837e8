"""Bad input is refused with the field named, before anything compiles."""

import math

import pytest

import jaxpareto as jp
from jaxpareto.mapper import evaluate_block
from jaxpareto.definitions.spec import parse_spec
from jaxpareto.measure.validation_set import load_validation_set

GOOD = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=16, think_time_s=1.0,
            context_tokens=8192, hit_rate=0.5)


@pytest.mark.parametrize("override, field, allowed", [
    ({"gpu": "h100"}, "gpu", "h100-sxm"),
    ({"model": "llama-70b"}, "model", "llama-3.1-70b"),
    ({"tp": 0}, "tp", None),
    ({"tp": [1, 2.5]}, "tp", None),
    ({"concurrency": [-1]}, "concurrency", None),
    ({"concurrency": []}, "concurrency", None),
    ({"hit_rate": 1.5}, "hit_rate", "[0, 1]"),
    ({"hit_rate": -0.1}, "hit_rate", None),
    ({"think_time_s": math.nan}, "think_time_s", None),
    ({"think_time_s": -1.0}, "think_time_s", None),
    ({"context_tokens": 0}, "context_tokens", None),
    ({"tp": "8"}, "tp", None),
    ({"tp": [2, 2]}, "tp", None),
    ({"osl": 0}, "osl", None),
    ({"osl": math.inf}, "osl", None),
    ({"delta_tokens": -5}, "delta_tokens", None),
    ({"eta_decode": 1.5}, "eta_decode", None),
    ({"damping": 0.0}, "damping", None),
    ({"max_iter": 0}, "max_iter", None),
    ({"dtype": "float16"}, "dtype", "float64"),
])
def test_bad_sweep_arguments(override, field, allowed):
    before = evaluate_block._cache_size()
    with pytest.raises(jp.JaxparetoError) as info:
        jp.sweep(**{**GOOD, **override})
    assert info.value.field == field
    assert str(info.value).startswith(field)
    if allowed:
        assert allowed in str(info.value)
    assert evaluate_block._cache_size() == before  # nothing compiled


def test_bad_definitions():
    with pytest.raises(ValueError, match="memory_gb"):
        jp.Hardware(name="x", memory_gb=-1, bandwidth_gbs=1000, tflops_fp16=100)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        jp.Hardware(name="x", memory_gb=80, bandwidth_gbs=math.nan, tflops_fp16=100)
    with pytest.raises(ValueError, match="weight_dtype"):
        jp.Model(name="m", params_total_b=7, weight_dtype="fp7", layers=32, kv_heads=8, head_dim=128)
    with pytest.raises(ValueError, match="kv_heads and head_dim"):
        jp.Model(name="m", params_total_b=7, layers=32)
    with pytest.raises(ValueError, match="Extra inputs"):
        jp.Model(name="m", params_total_b=7, layers=32, kv_heads=8, head_dim=128, hidden=4096)
    # a misspelt required field: both the missing field and the typo are named, with the allowed keys
    with pytest.raises(ValueError, match=r"bandwidth_gbs: Field required; Hardware\.bandwith_gbs: Extra inputs "
                                         r"are not permitted \(allowed keys: .*bandwidth_gbs"):
        jp.Hardware(name="x", memory_gb=80, bandwith_gbs=1000, tflops_fp16=100)
    with pytest.raises(ValueError, match="experts_per_token"):
        jp.Model(name="m", params_total_b=7, layers=32, kv_heads=8, head_dim=128, experts=8)
    with pytest.raises(ValueError, match="disagrees"):
        jp.Model(name="m", params_total_b=100, layers=32, kv_heads=8, head_dim=128, experts=8, experts_per_token=2,
                 expert_params_b=5.0, nonmoe_params_b=2.0)


def test_moe_split_is_derived_either_way():
    a = jp.Model(name="a", layers=32, kv_heads=8, head_dim=128, experts=8, experts_per_token=2,
                 expert_params_b=5.0, nonmoe_params_b=2.0)
    assert a.params_total_b == pytest.approx(42.0) and a.params_active_b == pytest.approx(12.0)
    b = jp.Model(name="b", layers=32, kv_heads=8, head_dim=128, experts=8, experts_per_token=2,
                 params_total_b=42.0, params_active_b=12.0)
    assert b.expert_params_b == pytest.approx(5.0) and b.nonmoe_params_b == pytest.approx(2.0)


BASE_SPEC = {"grid": {"gpu": "h100-sxm", "model": "llama-3.1-70b", "tp": [1], "concurrency": [1], "context_tokens": [1024]}}


@pytest.mark.parametrize("patch, message", [
    ({"grid": {**BASE_SPEC["grid"], "hitrate": [0.1]}}, "grid.hitrate"),
    ({"workload": {"osl": "128"}}, "workload.osl"),
    ({"solver": {"tol": 1e-6, "maxiter": 3}}, "solver.maxiter"),
    ({"efficiency": {"eta_prefil": 0.5}}, "allowed keys: eta_prefill"),
    ({"hardware": [{"name": "g", "memory_gb": 80, "bandwidth_gbs": 1000}]}, "Hardware.tflops_fp16"),
    ({"grid": {**BASE_SPEC["grid"], "concurrency": {"start": 1, "stop": 8, "num": 4, "scale": "cubic"}}}, "scale"),
    ({"unknown_table": {}}, "unknown_table"),
])
def test_bad_spec(patch, message):
    with pytest.raises(jp.JaxparetoError, match=message.replace(".", r"\.")):
        parse_spec({**BASE_SPEC, **patch})


def test_spec_custom_definitions_and_ranges():
    spec = parse_spec({
        "grid": {"gpu": ["my-gpu", "h100-sxm"], "model": "my-34b", "tp": [1, 2],
                 "concurrency": {"start": 1, "stop": 1024, "num": 12, "scale": "log"},
                 "context_tokens": 4096, "hit_rate": {"start": 0.0, "stop": 1.0, "num": 3}},
        "hardware": [{"name": "my-gpu", "memory_gb": 96, "bandwidth_gbs": 4000, "tflops_fp16": 1200, "tflops_fp8": 2400}],
        "model": [{"name": "my-34b", "params_total_b": 34, "weight_dtype": "fp16", "layers": 48, "kv_heads": 8, "head_dim": 128}],
    })
    kwargs = spec.sweep_kwargs()
    assert kwargs["concurrency"][0] == 1 and kwargs["concurrency"][-1] == 1024
    assert kwargs["hit_rate"] == [0.0, 0.5, 1.0]
    ds = jp.sweep(**kwargs)
    assert list(ds.gpu.values) == ["my-gpu", "h100-sxm"] and list(ds.model.values) == ["my-34b"]
    assert ds.feasible.any()


def test_an_infeasible_row_says_the_models_reason():
    """A context beyond the model's maximum is flagged so, not as weights that do not fit."""
    rows = load_validation_set()
    row = rows[rows.metric.eq("ttft_ms") & rows.load.eq("concurrency")].head(1).assign(isl=10_000_000.0)
    assert jp.validate(row).flag.iloc[0] == "infeasible: context beyond model maximum"
