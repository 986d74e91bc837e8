"""Every layer read as it is: hybrid attention, MoE layouts, family defaults, quantised storage and
the untied input table, each from a fixture config (fields only) against its known right value."""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions.layers import LayerGroup
from jaxpareto.physics.memory import session_gb

ZOO = Path(__file__).parent / "fixtures" / "zoo"
HF = Path(__file__).parent / "fixtures" / "hf"


def zoo(name, **kwargs):
    return jp.Model.from_hf_config(ZOO / f"{name}.json", **kwargs)


def count(model, kind):
    return sum(g.count for g in model.groups if g.attention == kind)


# --- class A: every layer as the kind it is ----------------------------------------------------

def test_qwen3_next_linear_attention():
    model = zoo("qwen3-next-80b-a3b")
    assert (count(model, "full"), count(model, "linear")) == (12, 36)
    assert model.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2 == 24_576
    assert model.params_total_b == pytest.approx(79.67, abs=0.01)  # the released checkpoint
    # each linear layer: 32 value heads x 128 x 128 state + (4 - 1) x (2 x 16 x 128 + 32 x 128) conv window
    assert model.fixed_state_bytes == 36 * (32 * 128 * 128 + 3 * (2 * 2048 + 4096)) * 2
    assert model.state_bytes_per_sequence == model.fixed_state_bytes  # no windows


def test_nemotron_h_pattern_and_head_dim_key():
    model = zoo("nemotron-h-4b")
    assert (count(model, "mamba"), count(model, "full"), count(model, "none")) == (21, 4, 17)
    full = next(g for g in model.groups if g.attention == "full")
    assert full.head_dim == 128  # attention_head_dim, not 3136 / 40 = 78
    assert model.kv_bytes_per_token == 16_384
    assert round(model.params_total_b * 1e9) == 3_973_556_832


def test_gemma4_global_layers_and_top_k_key():
    model = zoo("gemma-4-26b-a4b")
    assert model.experts_per_token == 8  # top_k_experts
    assert model.kv_bytes_per_token == 5 * 2 * 2 * 512 * 2 == 20_480  # engines keep K and V apart
    assert model.kv_window_tokens == 1024 and count(model, "sliding") == 25
    assert model.kv_window_bytes_per_token == 25 * 2 * 8 * 256 * 2
    assert {g.mlp for g in model.groups} == {"moe+dense"}  # enable_moe_block: a dense MLP beside the experts
    # the sliding layers hold at most the window: beyond it only the global layers grow
    assert model.kv_bytes(100_000) - model.kv_bytes(20_000) == 20_480 * 80_000
    k_eq_v = model.model_copy(update={"layer_groups": tuple(
        g.model_copy(update={"k_eq_v": g.attention == "full"}) for g in model.groups)})
    assert k_eq_v.kv_bytes_per_token == 10_240  # an engine storing K = V once


@pytest.mark.parametrize("tp", [1, 4, 8])
def test_gemma4_sliding_and_global_kv_heads_replicate_on_their_own(tp):
    model = zoo("gemma-4-26b-a4b")  # 25 sliding layers with 8 KV heads x 256, 5 global with 2 x 512
    tokens = 1024
    sliding = 25 * 2 * 8 * 256 * 2 * min(tokens, 1024) * tp / min(tp, 8)
    global_ = 5 * 2 * 2 * 512 * 2 * tokens * tp / min(tp, 2)
    got = float(session_gb(model.to_params(), jnp.float32(tokens), jnp.float32(tp)))
    assert got == pytest.approx((sliding + global_) / 1e9, rel=1e-6)


def test_gemma_family_patterns_without_layer_types():
    gemma2 = zoo("gemma-2-2b", weight_dtype="bf16")  # the config says float32
    assert gemma2.sliding_layers == 13 and gemma2.sliding_window == 4096
    gemma3 = zoo("gemma-3-27b")
    assert gemma3.sliding_layers == 52 and gemma3.sliding_window == 1024  # sliding_window_pattern 6
    assert gemma3.kv_bytes_per_token == 10 * 2 * 16 * 128 * 2
    assert gemma3.max_context_tokens == 131072  # the linear RoPE factor is already in it


# --- class B: MoE layouts -----------------------------------------------------------------------

def test_llama4_maverick_interleaved_moe_and_chunked_attention():
    model = zoo("llama-4-maverick")
    assert model.params_total_b == pytest.approx(400.7, abs=0.05)
    assert model.params_active_b == pytest.approx(16.15, abs=0.01)  # without the input table
    assert model.params_active_b + model.input_embedding_params_b == pytest.approx(17.18, abs=0.01)  # Meta's 17B
    assert (count(model, "chunked"), count(model, "full")) == (36, 12) and model.kv_window_tokens == 8192
    mlps = [g.mlp for g in model.groups for _ in range(g.count)]
    assert mlps.count("dense") == 24 and mlps.count("moe+shared") == 24


@pytest.mark.parametrize("key, value, moe_layers", [("decoder_sparse_step", 2, 24), ("mlp_only_layers", [0, 1], 46),
                                                    ("interleave_moe_layer_step", 3, 16)])
def test_moe_placement_keys(key, value, moe_layers):
    cfg = {"model_type": "qwen2_moe", "num_hidden_layers": 48, "hidden_size": 1024, "num_attention_heads": 8,
           "num_key_value_heads": 8, "vocab_size": 1000, "intermediate_size": 4096, "moe_intermediate_size": 512,
           "num_experts": 16, "num_experts_per_tok": 2, key: value}
    model = jp.Model.from_hf_config(cfg)
    assert model.expert_params_b == pytest.approx(moe_layers * 3 * 1024 * 512 / 1e9)


# --- class C: a missing key is the family's default --------------------------------------------

def test_family_defaults():
    gemma2 = zoo("gemma-2-2b", weight_dtype="bf16")
    assert gemma2.input_embedding_params_b == 0  # Gemma ties by default
    assert gemma2.params_total_b == pytest.approx(2.614, abs=0.0005)
    base = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
            "intermediate_size": 128}
    llama = jp.Model.from_hf_config({**base, "model_type": "llama"})
    assert llama.head_dim == 16 and llama.input_embedding_params_b == pytest.approx(6.4e-6)  # untied by default
    with pytest.raises(jp.JaxparetoError, match="head_dim"):  # unknown family: no guessed head_dim
        jp.Model.from_hf_config({**base, "model_type": "newarch", "tie_word_embeddings": False})
    with pytest.raises(jp.JaxparetoError, match="tie_word_embeddings"):
        jp.Model.from_hf_config({**base, "model_type": "newarch", "head_dim": 16})


@pytest.mark.parametrize("key, value", [("layer_types", ["full_attention", "rwkv"]), ("attn_layer_period", 8),
                                        ("hybrid_override_pattern", "M?"), ("linear_attn_config", {"kda_layers": [1]}),
                                        ("model_type", "falcon_h1")])
def test_unknown_hybrid_markers_are_refused(key, value):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128, key: value}
    with pytest.raises(jp.JaxparetoError, match=key):
        jp.Model.from_hf_config(cfg)


# --- class D: quantised storage -----------------------------------------------------------------

def test_awq_group_scales_and_fp16_embedding():
    model = zoo("qwen3-4b-awq")
    table = 151_936 * 2560
    quantised = model.params_total_b * 1e9 - model.unquantised_params_b * 1e9
    assert model.weight_scale_bits == pytest.approx((16 + 4) / 128)
    assert model.unquantised_params_b * 1e9 == pytest.approx(table + (36 * 2 + 1) * 2560 + 36 * 2 * 128)
    assert model.weight_memory_gb == pytest.approx((table * 2 + quantised * (4 + 20 / 128) / 8
                                                    + (model.unquantised_params_b * 1e9 - table) * 2) / 1e9)
    assert model.weight_memory_gb == pytest.approx(2.67, abs=0.01)  # not 0.5 B x 4.02B = 2.01


@pytest.mark.parametrize("quant, dtype, bits", [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "int4", 20 / 128),
    ({"quant_method": "mxfp4"}, "fp4", 0.25),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "fp4", 0.5),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", 32 / 16384),
])
def test_block_scales_of_each_format(quant, dtype, bits):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "vocab_size": 1000, "intermediate_size": 512, "quantization_config": quant}
    model = jp.Model.from_hf_config(cfg)
    assert (model.weight_dtype, model.weight_scale_bits) == (dtype, pytest.approx(bits))


# --- class E: the input table is not active ------------------------------------------------------

def test_gpt_oss_active_and_batch1_weight_read():
    model = jp.Model.from_hf_config(HF / "gpt-oss-120b.json")
    assert model.params_active_b == pytest.approx(5.13, abs=0.005)  # OpenAI's 5.13B
    ds = jp.sweep(gpu="h100-sxm", model=model, tp=1, concurrency=1, context_tokens=1, hit_rate=0.0)
    # non-expert part in bf16, 4 experts in MXFP4 with their scales (4.25 bits); no input table
    expected = (model.nonmoe_params_b * 2 + 4 * model.expert_params_b * 4.25 / 8) / 3350 * 1e3
    assert float(ds.t_weight_ms.squeeze()) == pytest.approx(expected, rel=1e-5)
    assert expected == pytest.approx(1.49, abs=0.01)  # 1.81 ms with the input table and no scales counted


def test_seed_models_given_by_totals_do_not_move():
    seed = jp.Model(name="seed-70b", params_total_b=70, layers=80, kv_heads=8, head_dim=128)
    assert seed.params_active_b == 70 and seed.weight_memory_gb == 140


# --- the physics uses growing KV and fixed state -------------------------------------------------

def test_fixed_state_does_not_grow_with_context():
    model = jp.catalog.models()["qwen3-next-80b-a3b"]
    params = model.to_params()
    tp = jnp.float32(1)
    short, long = (float(session_gb(params, jnp.float32(t), tp)) for t in (1_000, 101_000))
    assert long - short == pytest.approx(model.kv_bytes_per_token * 100_000 / 1e9, rel=1e-5)
    assert short == pytest.approx((model.kv_bytes_per_token * 1_000 + model.fixed_state_bytes) / 1e9, rel=1e-6)


def test_hybrid_memory_and_decode_reads_in_a_sweep():
    model = jp.catalog.models()["qwen3-next-80b-a3b"]
    context = 131_072
    ds = jp.sweep(gpu="h200-sxm", model=model, tp=[2, 4], concurrency=1, context_tokens=context, hit_rate=0.0)
    per_session = (model.kv_bytes(context) + model.fixed_state_bytes) / 1e9
    # TP 2 splits both the 2 KV heads and the 16-head state; TP 4 copies each KV head twice, not the state
    expected = [per_session, (model.kv_bytes(context) * 2 + model.fixed_state_bytes) / 1e9]
    np.testing.assert_allclose(ds.kv_per_session_gb.squeeze().values, expected, rtol=1e-6)
    fits = np.floor((np.array([2, 4]) * 141 - model.weight_memory_gb) / np.array(expected))
    np.testing.assert_array_equal(ds.concurrency_max.squeeze().values, fits)
    # a decode step reads the context's KV and the fixed state, per GPU
    t_kv = float(ds.t_kv_ms.sel(tp=2).squeeze())
    assert t_kv == pytest.approx((model.kv_bytes(context) + model.fixed_state_bytes) / 2 / 4800 / 1e9 * 1e3 * 1.0,
                                 rel=1e-5)


@pytest.mark.parametrize("tokens", [1, 500, 4096, 70_000])
def test_a_linear_layer_holds_the_same_memory_at_any_context(tokens):
    kwargs = dict(name="h", params_total_b=1.0, layers=4)
    full = LayerGroup(count=2, attention="full", kv_heads=2, head_dim=64)
    linear = LayerGroup(count=2, attention="linear", state_bytes=1e6, state_heads=4)
    with_linear = jp.Model(**kwargs, layer_groups=[full, linear])
    only_full = jp.Model(**kwargs, layer_groups=[full.model_copy(update={"count": 4})])
    assert with_linear.session_bytes(tokens) == 2 * 2 * 2 * 64 * 2 * tokens + 2e6
    assert only_full.session_bytes(tokens) == 2 * with_linear.kv_bytes(tokens)


def test_layer_group_errors_name_the_field():
    with pytest.raises(jp.JaxparetoError, match="state_bytes"):
        LayerGroup(count=1, attention="mamba")
    with pytest.raises(jp.JaxparetoError, match="window"):
        LayerGroup(count=1, attention="sliding", kv_heads=1, head_dim=8)
    with pytest.raises(jp.JaxparetoError, match="layer_groups"):
        jp.Model(name="h", params_total_b=1.0, layers=3,
                 layer_groups=[LayerGroup(count=2, attention="full", kv_heads=1, head_dim=8)])


def test_max_context_from_rope_scaling():
    cfg = {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128, "max_position_embeddings": 40960,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert jp.Model.from_hf_config(cfg).max_context_tokens == 131072  # Qwen3 with YaRN enabled
    assert jp.Model.from_hf_config({**cfg, "rope_scaling": None}).max_context_tokens == 40960
    # transformers 5 names the table rope_parameters, one table or one per layer type
    v5 = {**cfg, "rope_scaling": None, "rope_parameters": {"rope_theta": 1e6, **cfg["rope_scaling"]}}
    assert jp.Model.from_hf_config(v5).max_context_tokens == 131072
    per_type = {**v5, "rope_parameters": {"full_attention": v5["rope_parameters"],
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    assert jp.Model.from_hf_config(per_type).max_context_tokens == 131072
    bad = {**v5, "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": -1.0}}}
    with pytest.raises(jp.JaxparetoError, match=r"rope_parameters\.full_attention\.factor"):
        jp.Model.from_hf_config(bad)


@pytest.mark.parametrize("key, extra", [
    ("linear_key_head_dim", {"model_type": "qwen3_next", "layer_types": ["linear_attention", "full_attention"],
                             "linear_num_key_heads": 4, "linear_num_value_heads": 4, "linear_key_head_dim": 64,
                             "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4}),
    ("linear_num_value_heads", {"model_type": "qwen3_next", "layer_types": ["linear_attention", "full_attention"],
                                "linear_num_key_heads": 4, "linear_num_value_heads": 4, "linear_key_head_dim": 64,
                                "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4}),
    ("mamba_num_heads", {"model_type": "nemotron_h", "hybrid_override_pattern": "M*", "mamba_num_heads": 8,
                         "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4}),
    ("ssm_state_size", {"model_type": "nemotron_h", "hybrid_override_pattern": "M*", "mamba_num_heads": 8,
                        "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4}),
    ("v_head_dim", {"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                    "qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": 1536}),
    ("num_global_key_value_heads", {"model_type": "gemma4", "layer_types": ["sliding_attention", "full_attention"],
                                    "sliding_window": 512, "num_global_key_value_heads": 4, "global_head_dim": 128}),
])
def test_zero_widths_are_named_by_their_config_key(key, extra):
    cfg = {"num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1000,
           "intermediate_size": 1024, "num_key_value_heads": 8, "head_dim": 64, **extra}
    jp.Model.from_hf_config(cfg)  # the config itself is valid
    with pytest.raises(jp.JaxparetoError, match=f"config.json: {key}: must be a positive integer, got 0"):
        jp.Model.from_hf_config({**cfg, key: 0})


def test_zero_widths_of_an_unused_feature_are_accepted():
    """DeepSeek-VL2-style configs carry the MLA widths as 0 when MLA is off."""
    dense = {"model_type": "deepseek_v2", "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
             "vocab_size": 1000, "intermediate_size": 1024, "num_key_value_heads": 8, "head_dim": 64,
             "kv_lora_rank": 0, "qk_rope_head_dim": 0, "qk_nope_head_dim": 0, "v_head_dim": 0, "n_groups": 0}
    assert jp.Model.from_hf_config(dense).attention == "gqa"
    with pytest.raises(jp.JaxparetoError, match="config.json: qk_rope_head_dim: must be a positive integer"):
        jp.Model.from_hf_config({**dense, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "v_head_dim": 128})


@pytest.mark.parametrize(("change", "field"), [
    ({"num_key_value_heads": 5}, "num_key_value_heads"),  # 64 heads do not group into 5
    ({"num_key_value_heads": 128}, "num_key_value_heads"),  # more KV heads than heads
    ({"torch_dtype": "float8_e4m3fn"}, "torch_dtype"),  # had become bf16
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),  # a string had read as tied
])
def test_inconsistent_configs_are_named(change, field):
    config = json.loads((HF / "llama-3.1-70b.json").read_text())
    with pytest.raises(jp.JaxparetoError, match=field):
        jp.Model.from_hf_config({**config, **change})


def test_a_config_that_is_no_json_object_is_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(jp.JaxparetoError, match="not an object"):
        jp.Model.from_hf_config(path)
