"""Cost per turn and task (seed 002 section 13) and operational intensity (seed 004)."""

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.dataset.costs import api_cost_usd

PRICES = dict(input_per_mtok=2.0, cached_input_per_mtok=0.5, output_per_mtok=8.0)


def test_seed_002_cost_example():
    # 8 calls x 6,000 input / 800 output tokens at $2 and $8 per million: $0.1472;
    # with 3,000 of the input tokens cached at $0.5 per million: $0.1112.
    assert 8 * api_cost_usd(6000, 0, 800, **PRICES) == pytest.approx(0.1472)
    assert 8 * api_cost_usd(6000, 3000, 800, **PRICES) == pytest.approx(0.1112)


def test_costs_on_a_session_sweep():
    ds = jp.session_sweep(gpu="h200-sxm", model="llama-3.1-70b", tp=8, concurrency=16, think_time_s=2.0,
                          hit_rate=[0.0, 0.5], initial_context_tokens=6000, turns=8, osl=800, tool_tokens=0)
    priced = jp.add_costs(ds, **PRICES, gpu_hour=2.5)
    # tool_tokens 0 and osl 800: the contexts grow by 800 per turn
    api = priced.api_cost_per_task_usd.squeeze()
    expected = [sum(api_cost_usd(6000 + 800 * j, h * (6000 + 800 * j), 800, **PRICES) for j in range(8))
                for h in (0.0, 0.5)]
    np.testing.assert_allclose(api.values, expected, rtol=1e-6)
    gpu = priced.gpu_cost_per_task_usd.squeeze()
    np.testing.assert_allclose(gpu.values, (8 * 2.5 / 3600 / ds.tasks_per_s.squeeze()).values, rtol=1e-6)
    assert priced.attrs["price_gpu_hour"] == 2.5
    with pytest.raises(jp.JaxparetoError, match="together"):
        jp.add_costs(ds, input_per_mtok=1.0)


@pytest.mark.parametrize("layout", [dict(tp=4), dict(tp=4, pp=2), dict(tp=2, dp_attention=2, model="gpt-oss-120b"),
                                    dict(tp=4, serving="disaggregated", prefill_tp=4, prefill_workers=2,
                                         decode_workers=1)])
def test_a_replicas_every_gpu_is_priced(layout):
    """A turn costs the replica's GPUs, not its TP group's: TP x stages x attention-DP ranks, or a
    disaggregated replica's prefill and decode pools (TP alone had priced pp = 2 at half)."""
    ds = jp.sweep(**{"gpu": "h100-sxm", "model": "llama-3.1-70b", "concurrency": [8, 64], "think_time_s": 2.0,
                     "context_tokens": 16384, "hit_rate": 0.5, **layout})
    priced = jp.add_costs(ds, gpu_hour=3.6)
    replica = layout.get("prefill_workers", 0) * layout.get("prefill_tp", 0) \
        + layout["tp"] * layout.get("pp", 1) * layout.get("dp_attention", 1) * layout.get("decode_workers", 1)
    expected = replica * 3.6 / 3600 / ds.turns_per_s
    ok = ds.feasible.values
    assert ok.any()
    np.testing.assert_allclose(priced.gpu_cost_per_turn_usd.values[ok], expected.values[ok], rtol=1e-5)
    with pytest.raises(jp.JaxparetoError, match="output_tokens_per_s_per_gpu"):
        jp.add_costs(ds[["turns_per_s", "feasible"]].assign_attrs(ds.attrs), gpu_hour=3.6)
    ttl = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=8, cache_ttl_s=5.0, think_time_s=30.0,
                   variables=["turns_per_s"])
    with pytest.raises(jp.JaxparetoError, match="hit_rate_eff"):
        jp.add_costs(ttl, **PRICES)


def test_operational_intensity_and_ridge():
    ds = jp.sweep(gpu=["h100-sxm", "b200"], model="llama-3.1-70b", tp=8, concurrency=32, think_time_s=2.0,
                  context_tokens=[1024, 32768], hit_rate=0.0, osl=128)
    assert float(ds.ridge_point.sel(gpu="h100-sxm").squeeze()) == pytest.approx(989e12 / 3350e9)  # 295
    oi = ds.operational_intensity.sel(gpu="h100-sxm").squeeze()
    chat, agent = float(oi.sel(context_tokens=1024)), float(oi.sel(context_tokens=32768))
    assert chat < 295 < agent  # chat below the ridge, a long uncached agent prompt far above it
    # by hand for the long prompt: FLOPs / (prefill bytes + decode bytes)
    cell = ds.sel(gpu="h100-sxm", context_tokens=32768).squeeze()
    model = jp.catalog.models()["llama-3.1-70b"]
    active = model.params_active_b * 1e9  # 69.50B: what a token reads, without the input table
    flops = 2 * active * (32768 + 128)
    prefill = active * 2 + 32768 * model.kv_bytes_per_token
    decode = 128 * (active * 2 / float(cell.batch_eff) + 32768 * model.kv_bytes_per_token)
    assert float(cell.operational_intensity) == pytest.approx(flops / (prefill + decode), rel=1e-4)
    assert float(cell.prefill_share) == pytest.approx(float(cell.ttft_ms / cell.latency_ms), rel=1e-6)
