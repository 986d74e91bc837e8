"""The seed's worked numbers (seed 000, section 3), pinned to the equations (docs/seed.md)."""

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.physics.decode import decode_coefficients, decode_step
from jaxpareto.definitions.hardware import effective_tflops
from jaxpareto.physics.memory import kv_replication
from jaxpareto.definitions.units import COMPUTE_BITS

H100 = jp.catalog.gpus()["h100-sxm"]
# The seed's "70B FP16" (exactly 70e9 parameters, 140 GB), not the catalog's 70.55B count.
SEED_70B = jp.Model(name="seed-70b", params_total_b=70, weight_dtype="fp16", layers=80, kv_heads=8, head_dim=128)


def _step(model, batch, tp=8, context=0.0, gpu=H100):
    hw, m = gpu.to_params(), model.to_params()
    return decode_step(decode_coefficients(hw, m, tp, context, effective_tflops(hw, m.compute_bits), 0.40, 1.10), batch)


def test_kv_bytes_per_token():
    assert jp.catalog.models()["llama-3.1-70b"].kv_bytes_per_token == 327_680  # 2 x 80 x 8 x 128 x 2
    assert jp.catalog.models()["deepseek-v3"].kv_bytes_per_token == 70_272  # (512 + 64) x 61 x 2
    assert jp.catalog.models()["kimi-k2.5"].kv_bytes_per_token == 70_272


def test_t_weight_70b_fp16_on_8_h100():
    step = _step(SEED_70B, batch=0.0)
    assert float(step.t_weight_ms) == pytest.approx(140 / (8 * 3350) * 1e3, rel=1e-6)
    assert float(step.t_weight_ms) == pytest.approx(5.22, abs=0.005)


def test_tpot_at_zero_batch_includes_elementwise_overhead():
    # The seed prints 5.22 / 0.40 = 13.1 ms, leaving out its own 1.10 factor (docs/seed.md).
    step = _step(SEED_70B, batch=0.0)
    assert float(step.tpot_ms) == pytest.approx(5.2239 * 1.10 / 0.40, rel=1e-4)
    assert float(step.tpot_ms) == pytest.approx(14.37, abs=0.01)


def test_moe_active_experts_kimi():
    # E_active = min(10 x 8, 384) = 80 experts, 10 per GPU on 8 GPUs.
    kimi = jp.catalog.models()["kimi-k2.5"]
    nonmoe_ms = kimi.nonmoe_params_b * 2.0 / (8 * 3350) * 1e3  # BF16 outside the INT4 experts
    # INT4 with a bf16 scale per group of 32: 4.5 bits = 0.5625 B per weight
    expert_ms = 10 * kimi.expert_params_b * 0.5625 / 3350 * 1e3
    step = _step(kimi, batch=10.0)
    assert float(step.t_weight_ms) == pytest.approx(nonmoe_ms + expert_ms, rel=1e-6)
    # Saturated: a batch of 1,000 touches all 384 experts, 48 per GPU.
    saturated = _step(kimi, batch=1000.0)
    assert float(saturated.t_weight_ms) == pytest.approx(nonmoe_ms + 48 * kimi.expert_params_b * 0.5625 / 3350 * 1e3, rel=1e-6)


def test_kimi_expert_is_summed_over_moe_layers():
    # docs/model.md: 3 x 7168 x 2048 per layer x 60 MoE layers, not the seed's per-layer 44M.
    assert jp.catalog.models()["kimi-k2.5"].expert_params_b == pytest.approx(3 * 7168 * 2048 * 60 / 1e9)


def test_kv_replication_beyond_kv_heads():
    assert float(kv_replication(16.0, 8.0)) == 2.0
    assert float(kv_replication(8.0, 8.0)) == 1.0
    assert float(kv_replication(4.0, 8.0)) == 1.0


def test_fp4_model_on_h100_runs_at_fp8_rate():
    h100 = H100.to_params()
    assert float(effective_tflops(h100, COMPUTE_BITS["fp4"])) == 1979.0
    assert float(effective_tflops(h100, COMPUTE_BITS["fp8"])) == 1979.0
    assert float(effective_tflops(h100, COMPUTE_BITS["int4"])) == 989.0
    b200 = jp.catalog.gpus()["b200"].to_params()
    assert float(effective_tflops(b200, COMPUTE_BITS["fp4"])) == 9000.0
    a100 = jp.catalog.gpus()["a100-sxm-80gb"].to_params()
    assert float(effective_tflops(a100, COMPUTE_BITS["fp4"])) == 312.0  # no FP8 either


def test_kv_bandwidth_stops_scaling_past_kv_heads():
    model = jp.catalog.models()["llama-3.1-70b"]
    t8 = _step(model, batch=4.0, tp=8, context=32768.0).t_kv_ms
    t16 = _step(model, batch=4.0, tp=16, context=32768.0).t_kv_ms
    assert float(t16) == pytest.approx(float(t8), rel=1e-6)


def test_seed_memory_wall_8xh100():
    # Seed step 4: 640 GB - 140 GB = 500 GB for KV; 16K tokens x 320 KiB = 5.37 GB per session.
    ds = jp.sweep(gpu="h100-sxm", model=SEED_70B, tp=8, concurrency=1000, context_tokens=16384)
    assert float(ds.kv_per_session_gb.squeeze()) == pytest.approx(16384 * 327680 / 1e9, rel=1e-6)
    assert int(ds.concurrency_max.squeeze()) == int(np.floor(500 / (16384 * 327680 / 1e9)))  # 93


def test_standard_serving_special_case():
    # Z = 0, h = 0: every admitted session decodes, B = C_eff.
    ds = jp.sweep(gpu="h200-sxm", model="llama-3.1-8b", tp=1, concurrency=[1, 16, 64], context_tokens=2048)
    np.testing.assert_allclose(ds.batch_eff.values, ds.concurrency_eff.values, rtol=1e-5)
    np.testing.assert_allclose(ds.prefill_tokens.values, 2048.0)


def test_a_full_prefix_hit_still_computes_the_last_token():
    """With no new tokens (ΔL = 0) a hit prefills one token, not none: the first output token
    needs a forward pass over the prompt's last token. TTFT was 0 at h = 1."""
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=16, context_tokens=8192,
                  hit_rate=[0.0, 0.5, 1.0], delta_tokens=0, dtype="float64").squeeze()
    np.testing.assert_allclose(ds.prefill_tokens.values, [8192.0, 4096.5, 1.0])
    ttft = ds.ttft_ms.values
    assert ttft[2] > 0 and ttft[2] == pytest.approx(ttft[0] / 8192.0, rel=1e-9)  # eq. 2: linear in tokens
