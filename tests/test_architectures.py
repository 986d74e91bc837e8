"""Every architecture in the catalog modelled right: mixed precision, sliding windows, FP8 KV,
distinct experts under uniform routing."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.physics.decode import experts_touched
from jaxpareto.physics.memory import kv_bytes

GPT_OSS = jp.catalog.models()["gpt-oss-120b"]
KIMI = jp.catalog.models()["kimi-k2.5"]


@pytest.mark.parametrize("tokens, expected", [(64, 36_864 * 64 + 36_864 * 64), (128, 36_864 * 256),
                                              (100_000, 36_864 * 100_000 + 36_864 * 128)])
def test_gpt_oss_sliding_window_kv(tokens, expected):
    # 18 full-attention layers see every token; 18 sliding layers keep the last 128.
    assert GPT_OSS.kv_bytes(tokens) == expected
    assert float(kv_bytes(GPT_OSS.to_params(), jnp.float32(tokens))) == pytest.approx(expected, rel=1e-6)
    ds = jp.sweep(gpu="h100-sxm", model=GPT_OSS, tp=1, concurrency=1, context_tokens=tokens)
    assert float(ds.kv_per_session_gb.squeeze()) == pytest.approx(expected / 1e9, rel=1e-6)


def test_kimi_mixed_precision_weight_memory():
    # INT4 routed experts (4 bits + a bf16 scale per group of 32 = 0.5625 B) with every other
    # weight, the input table included, in BF16; against all-FP4 without scales.
    experts = 384 * KIMI.expert_params_b
    table = KIMI.input_embedding_params_b
    assert KIMI.weight_memory_gb == pytest.approx(experts * 0.5625 + (KIMI.nonmoe_params_b + table) * 2, rel=1e-9)
    all_fp4 = KIMI.model_copy(update={"weight_dtype": "fp4", "expert_weight_dtype": None, "weight_scale_bits": 0.0})
    assert all_fp4.weight_memory_gb == pytest.approx((KIMI.params_total_b - table) * 0.5 + table * 2, rel=1e-4)
    assert KIMI.weight_memory_gb - all_fp4.weight_memory_gb == pytest.approx(
        KIMI.nonmoe_params_b * 1.5 + experts * 0.0625, rel=1e-6)
    assert KIMI.compute_dtype == "int4" and GPT_OSS.compute_dtype == "fp4"  # the experts dominate active weights
    # t_weight: the non-expert part at 2 bytes, each touched expert at 0.5
    ds = jp.sweep(gpu="h200-sxm", model=KIMI, tp=8, concurrency=1, context_tokens=1, hit_rate=0.0)
    nonmoe_ms = KIMI.nonmoe_params_b * 2 / (8 * 4800) * 1e3
    expert_ms = 8 / 8 * KIMI.expert_params_b * 0.5625 / 4800 * 1e3
    assert float(ds.t_weight_ms.squeeze()) == pytest.approx(nonmoe_ms + expert_ms, rel=1e-5)


def test_fp8_kv_cache_halves_kv():
    fp16 = jp.catalog.models()["llama-3.1-70b"]
    fp8 = fp16.model_copy(update={"kv_dtype": "fp8", "name": "llama-3.1-70b-kv8"})
    assert fp8.kv_bytes_per_token == fp16.kv_bytes_per_token / 2 == 163_840
    ds = jp.sweep(gpu="h100-sxm", model=[fp16, fp8], tp=8, concurrency=1000, context_tokens=32768)
    cmax = ds.concurrency_max.squeeze().values
    assert cmax[1] == pytest.approx(2 * cmax[0], abs=1)
    per_session = ds.t_kv_ms / ds.batch_eff  # KV read per decoding session and step
    assert float((per_session.sel(model="llama-3.1-70b-kv8") / per_session.sel(model="llama-3.1-70b")).squeeze()) == \
        pytest.approx(0.5, rel=1e-5)


def test_distinct_experts_against_monte_carlo():
    rng = np.random.default_rng(0)
    for e, k in ((384, 8), (128, 4), (8, 2)):
        for b in (1, 3, 20, 100):
            draws = [len(set(np.concatenate([rng.choice(e, size=k, replace=False) for _ in range(b)])))
                     for _ in range(400)]
            expected = float(experts_touched(jnp.float32(b), jnp.float32(e), jnp.float32(k), "uniform"))
            assert expected == pytest.approx(np.mean(draws), rel=0.03), (e, k, b)
            assert expected <= min(b * k, e) + 1e-9
    assert float(experts_touched(jnp.float32(5), jnp.float32(0), jnp.float32(0), "uniform")) == 0.0


def test_uniform_routing_option():
    kwargs = dict(gpu="h200-sxm", model=["qwen3-235b-a22b", "llama-3.1-70b"], tp=8, concurrency=[4, 64],
                  think_time_s=1.0, context_tokens=8192)
    seed, uniform = jp.sweep(**kwargs), jp.sweep(**kwargs, expert_routing="uniform")
    assert uniform.attrs["expert_routing"] == "uniform"
    moe = dict(model="qwen3-235b-a22b")
    assert (uniform.t_weight_ms.sel(**moe) < seed.t_weight_ms.sel(**moe)).all()  # fewer distinct experts
    dense = dict(model="llama-3.1-70b")
    np.testing.assert_allclose(uniform.t_weight_ms.sel(**dense), seed.t_weight_ms.sel(**dense))
    with pytest.raises(jp.JaxparetoError, match="expert_routing"):
        jp.sweep(**kwargs, expert_routing="uniform", solver="exact")
    with pytest.raises(jp.JaxparetoError, match="expert_routing"):
        jp.sweep(**kwargs, expert_routing="zipf")
