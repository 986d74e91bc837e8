"""Bad input is refused by name: random values, of the right and wrong types, for the public
entry points' fields either plan (nothing is computed here) or raise a JaxparetoError whose
field names one of the keys given, never a bare ValueError, TypeError or pydantic internals."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxpareto as jp
from jaxpareto.dataset.plan import plan_sweep

values = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6), st.lists(st.integers(-3, 600), max_size=3), st.lists(st.floats(-1, 1e6), max_size=3),
    st.sampled_from(["h100-sxm", "llama-3.1-70b", "log", "vllm", "damped", "exact", "given", "lru"]),
)
SWEEP_FIELDS = ["gpu", "model", "engine", "tp", "concurrency", "think_time_s", "context_tokens", "hit_rate", "osl",
                "delta_tokens", "eta_prefill", "eta_decode", "damping", "tol", "max_iter", "dtype", "solver",
                "cache_model", "prefill_model", "variables", "chunk_points", "prefill_chunk_tokens", "cache_ttl_s"]
MODEL_FIELDS = ["params_total_b", "params_active_b", "layers", "kv_heads", "head_dim", "experts",
                "experts_per_token", "weight_dtype", "kv_dtype", "sliding_window", "sliding_layers",
                "input_embedding_params_b", "weight_scale_bits", "max_context_tokens", "attention_heads"]


def _names_a_key(error: jp.JaxparetoError, keys) -> bool:
    field = error.field.lstrip("-").replace("-", "_")
    return any(key in field for key in keys) or field.split(".")[-1] in keys or field.split(":")[0] in keys


def _check(call, kwargs):
    try:
        call(**kwargs)
    except jp.JaxparetoError as error:
        assert _names_a_key(error, kwargs) or error.field in ("Model", "sweep", "grid"), (error.field, kwargs)
        assert "function-after" not in str(error) and "pydantic" not in str(error).lower(), str(error)


@given(st.dictionaries(st.sampled_from(SWEEP_FIELDS), values, min_size=1, max_size=4))
def test_sweep_inputs_are_refused_by_name(changes):
    kwargs = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 8])
    kwargs.update(changes)
    _check(plan_sweep, kwargs)


@given(st.dictionaries(st.sampled_from(MODEL_FIELDS), values, min_size=1, max_size=4))
def test_model_fields_are_refused_by_name(changes):
    kwargs = dict(name="m", params_total_b=8.0, layers=32, kv_heads=8, head_dim=128)
    kwargs.update(changes)
    try:
        model = jp.Model(**kwargs)
    except jp.JaxparetoError as error:
        assert _names_a_key(error, kwargs) or error.field == "Model", (error.field, kwargs)
        assert "function-after" not in str(error), str(error)
        return
    assert math.isfinite(model.kv_bytes_per_token) and model.weight_memory_gb > 0


@pytest.mark.parametrize("config", [
    {"num_hidden_layers": "2"}, {"hidden_size": -1}, {"layer_types": "full"}, {"head_dim": 1.5},
    {"quantization_config": {"quant_method": "gptq", "bits": 8}}, {"quantization_config": {"quant_method": "gptq", "bits": 3}},
    {"quantization_config": {"quant_method": "aqlm"}}, {"full_attention_interval": 0}, {"mlp_only_layers": 2},
    {"rope_scaling": "yarn"}, {"rope_scaling": {"rope_type": "yarn", "factor": "4"}},
    {"model_type": "llama4_text", "attention_chunk_size": 8192, "no_rope_layers": [1]},
    {"model_type": "gemma3_text", "sliding_window_pattern": 0}])
def test_config_json_errors_name_the_key(config):
    base = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "vocab_size": 100, "intermediate_size": 128}
    with pytest.raises(jp.JaxparetoError) as info:
        jp.Model.from_hf_config({**base, **config})
    assert any(key in info.value.field for key in config), info.value.field


spec_values = st.one_of(values, st.fixed_dictionaries({"start": values, "stop": values, "num": values,
                                                       "scale": st.sampled_from(["log", "linear", "cubic"])}))


@given(st.dictionaries(st.sampled_from(["gpu", "model", "tp", "concurrency", "think_time_s", "context_tokens",
                                        "hit_rate", "hitrate"]), spec_values, min_size=1, max_size=4),
       st.dictionaries(st.sampled_from(["osl", "delta_tokens", "cache_ttl_s", "tool"]), values, max_size=2))
def test_spec_tables_are_refused_by_name(grid, workload):
    from jaxpareto.definitions.spec import parse_spec

    data = {"grid": {"gpu": ["h100-sxm"], "model": ["llama-3.1-8b"], "tp": [1], "concurrency": [1, 2], **grid},
            "workload": workload}
    data["grid"] = {k: v for k, v in data["grid"].items() if v is not None}
    try:
        plan_sweep(**parse_spec(data).sweep_kwargs())
    except jp.JaxparetoError as error:
        text = str(error)
        assert "function-after" not in text and "pydantic" not in text.lower(), text
        assert any(key in text for key in (*grid, *workload)), text


def test_config_override_dtypes_are_checked():
    base = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "vocab_size": 100, "intermediate_size": 128}
    with pytest.raises(jp.JaxparetoError, match="weight_dtype"):
        jp.Model.from_hf_config(base, weight_dtype="int8")


def test_ignore_lists_skip_whole_modules_only():
    from jaxpareto.definitions.hf_config import _skipped

    def skipped(*entries):
        return _skipped({"quantization_config": {"ignore": list(entries)}})

    assert skipped("re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*") == \
        {"attention", "shared", "mlp"}
    assert skipped("model.layers.0.post_attention_layernorm", "mlp.gate", "model.layers.*.mlp.shared_expert_gate",
                   "model.layers.*.linear_attn.in_proj_ba", "lm_head") == set()
    assert skipped("model.layers.*.linear_attn") == {"linear_attention"}
