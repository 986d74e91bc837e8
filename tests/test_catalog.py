"""Catalog entries and Hugging Face configs reproduce the fact sheet."""

from pathlib import Path

import pytest

import jaxpareto as jp

FIXTURES = Path(__file__).parent / "fixtures" / "hf"

# (total B, active B counting the input table, KV bytes/token in bf16): the project's fact sheet, section A.
FACT_SHEET = {
    "llama-3.1-8b": ("8.03", "8.03", 131_072),
    "llama-3.1-70b": ("70.55", "70.55", 327_680),
    "llama-3.1-405b": ("405.85", "405.85", 516_096),
    "qwen3-32b": ("32.76", "32.76", 262_144),
    "qwen3-235b-a22b": ("235.09", "22.19", 192_512),
    "deepseek-v3": ("671.03", "37.55", 70_272),
    "kimi-k2.5": ("1026.4", "32.86", 70_272),
    "gpt-oss-120b": ("116.83", "5.71", 36_864),  # the 18 full-attention layers; 18 more hold 128 tokens
    "mixtral-8x7b": ("46.70", "12.88", 131_072),
}


def _printed(value: str):
    """The fact sheet's value with a tolerance of half its last printed digit."""
    decimals = len(value.split(".")[1]) if "." in value else 0
    return pytest.approx(float(value), abs=0.5 * 10.0**-decimals + 1e-9)


@pytest.mark.parametrize("name", sorted(FACT_SHEET))
def test_hf_config_reproduces_fact_sheet(name):
    total, active, kv = FACT_SHEET[name]
    model = jp.Model.from_hf_config(FIXTURES / f"{name}.json")
    assert model.params_total_b == _printed(total)
    # the fact sheet counts the untied input table as active; jaxpareto does not (a step only looks up rows)
    assert model.params_active_b + model.input_embedding_params_b == _printed(active)
    assert model.kv_bytes_per_token == kv


@pytest.mark.parametrize("name", sorted(FACT_SHEET))
def test_catalog_agrees_with_hf_config(name):
    from_config = jp.Model.from_hf_config(FIXTURES / f"{name}.json")
    entry = jp.catalog.models()[name]
    for field in ("params_total_b", "params_active_b", "nonmoe_params_b", "input_embedding_params_b",
                  "unquantised_params_b", "weight_scale_bits", "weight_memory_gb"):
        assert getattr(entry, field) == pytest.approx(getattr(from_config, field), rel=1e-3), field
    if entry.is_moe:
        assert entry.expert_params_b == pytest.approx(from_config.expert_params_b, rel=1e-6)
        assert (entry.experts, entry.experts_per_token) == (from_config.experts, from_config.experts_per_token)
    assert entry.kv_bytes_per_token == from_config.kv_bytes_per_token
    assert entry.kv_bytes(100_000) == from_config.kv_bytes(100_000)
    assert entry.attention == from_config.attention
    if name.startswith("qwen3"):  # served with the YaRN scaling the model card gives for 128K
        yarn = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
        import json
        config = json.loads((FIXTURES / f"{name}.json").read_text())
        from_config = jp.Model.from_hf_config({**config, **yarn})
    assert entry.max_context_tokens == from_config.max_context_tokens
    assert (entry.weight_dtype, entry.expert_dtype) == (from_config.weight_dtype, from_config.expert_dtype)


def test_hf_weight_dtypes_and_head_dim():
    assert jp.Model.from_hf_config(FIXTURES / "deepseek-v3.json").weight_dtype == "fp8"
    kimi = jp.Model.from_hf_config(FIXTURES / "kimi-k2.5.json")
    assert (kimi.weight_dtype, kimi.expert_weight_dtype) == ("bf16", "int4")  # ignore list keeps the rest bf16
    oss = jp.Model.from_hf_config(FIXTURES / "gpt-oss-120b.json")
    assert (oss.weight_dtype, oss.expert_weight_dtype) == ("bf16", "fp4")
    assert (oss.sliding_window, oss.sliding_layers) == (128, 18)  # layer_types alternate sliding / full
    assert jp.Model.from_hf_config(FIXTURES / "deepseek-v3.json").expert_weight_dtype is None  # fp8 throughout
    qwen = jp.Model.from_hf_config(FIXTURES / "qwen3-32b.json")
    assert qwen.head_dim == 128  # explicit head_dim, not 5120 / 64 = 80
    assert jp.Model.from_hf_config(FIXTURES / "llama-3.1-8b.json").head_dim == 128  # hidden / heads


def test_hf_missing_key():
    with pytest.raises(jp.JaxparetoError, match="num_hidden_layers"):
        jp.Model.from_hf_config({"hidden_size": 1, "num_attention_heads": 1, "vocab_size": 1})


def test_catalog_names():
    assert set(jp.catalog.gpus()) == {"a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "gb200", "b300", "l40s",
                                      "mi300x", "mi325x", "mi355x"}
    assert set(jp.catalog.models()) == {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-70b-fp8", "llama-3.1-405b",
                                        "llama-3.1-405b-fp8", "qwen3-32b", "qwen3-235b-a22b", "deepseek-v3",
                                        "kimi-k2.5", "gpt-oss-120b", "mixtral-8x7b", "qwen3-next-80b-a3b",
                                        "qwen3.5-397b-a17b", "minimax-m2.5", "llama-4-maverick", "gemma-3-27b",
                                        "nemotron-3-nano-30b-a3b"}
    for entry in (*jp.catalog.gpus().values(), *jp.catalog.models().values()):
        assert entry.sources, entry.name
    for gpu in jp.catalog.gpus().values():
        for field in ("memory_gb", "bandwidth_gbs", "tflops_fp16"):
            assert field in gpu.sources, (gpu.name, field)


ZOO = Path(__file__).parent / "fixtures" / "zoo"
# catalog entry -> its config (AIConfigurator's copy where it ships one)
ZOO_CONFIGS = {"qwen3-next-80b-a3b": "qwen3-next-80b-a3b", "qwen3.5-397b-a17b": "qwen3.5-397b-a17b",
               "minimax-m2.5": "minimax-m2.5", "llama-4-maverick": "llama-4-maverick", "gemma-3-27b": "gemma-3-27b"}


@pytest.mark.parametrize("name", sorted(ZOO_CONFIGS))
def test_new_catalog_entries_agree_with_their_configs(name):
    entry = jp.catalog.models()[name]
    config = jp.Model.from_hf_config(ZOO / f"{ZOO_CONFIGS[name]}.json", name=name)
    for field in ("params_total_b", "params_active_b", "nonmoe_params_b", "input_embedding_params_b",
                  "weight_memory_gb", "kv_bytes_per_token", "state_bytes_per_sequence"):
        assert getattr(entry, field) == pytest.approx(getattr(config, field), rel=1e-6), field
    assert entry.groups == config.groups and entry.max_context_tokens == config.max_context_tokens
