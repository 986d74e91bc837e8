"""A MoE layer's routed experts at their grouped GEMMs' measured rate and offset
(``gemm_rate="measured"``; the catalog's ``gemm_moe_fraction_*`` and ``gemm_moe_offset_tokens_*``,
docs/model.md "Measured matmul rate"): the tokens routed to the experts run as one grouped GEMM,
one problem per expert, which reaches its own share of the peak, and each expert's problem its own
offset; where not measured, and at the datasheet peak, the experts compute as the dense matmuls."""

from __future__ import annotations

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions import catalog
from jaxpareto.definitions.hardware import GEMM_KERNELS, GEMM_PRECISIONS, Hardware, effective_tflops, \
    engine_hardware, expert_offset_tokens, expert_tflops, gemm_offset_tokens
from jaxpareto.physics.decode import decode_coefficients, decode_step

MOE_FIELDS = [f"gemm_moe_{kind}_{p}" for kind in ("fraction", "offset_tokens") for p in GEMM_PRECISIONS]


@pytest.mark.parametrize("gpu, bits, kernels, rate, offset", [
    ("b200", 4, None, 9000.0 * 0.326, 169.0),  # the GPU's: the median over the engines' tables
    ("b200", 4, "trtllm", 9000.0 * 0.208, 130.0),  # TensorRT-LLM's own grouped kernels
    ("h200-sxm", 8, "trtllm", 1979.0 * 0.646, 169.0),
    ("h100-sxm", 4, None, 1979.0 * 0.603, 223.0),  # no FP4 on Hopper: FP8's, as the dense rate
])
def test_the_experts_rate_and_offset_are_the_grouped_gemms(gpu, bits, kernels, rate, offset):
    params = catalog.gpus()[gpu].to_params()
    if kernels is not None:
        params = engine_hardware(params, GEMM_KERNELS.index(kernels) + 1.0)
    assert float(expert_tflops(params, bits, "measured")) == pytest.approx(rate, rel=1e-6)
    assert float(expert_offset_tokens(params, bits, "measured")) == pytest.approx(offset)
    # the datasheet peak: the dense peak and no offset, as every matmul
    assert float(expert_tflops(params, bits)) == float(effective_tflops(params, bits))
    assert float(expert_offset_tokens(params, bits)) == 0.0


@pytest.mark.parametrize("gpu, bits", [("mi300x", 8), ("mi355x", 4), ("a100-sxm-80gb", 16), ("b200", 16)])
def test_where_not_measured_the_experts_compute_as_the_dense_matmuls(gpu, bits):
    params = catalog.gpus()[gpu].to_params()
    if gpu == "b200":  # B200 measured BF16 layers: a copy without them falls back
        params = Hardware(**{**catalog.gpus()[gpu].model_dump(), **{f: None for f in MOE_FIELDS},
                             "name": "b200-no-moe", "engine_gemm": {}}).to_params()
    assert float(expert_tflops(params, bits, "measured")) == float(effective_tflops(params, bits, "measured"))
    assert float(expert_offset_tokens(params, bits, "measured")) == float(gemm_offset_tokens(params, bits, "measured"))


def test_every_moe_measurement_has_a_source_and_an_fp8_or_fp4_peak():
    measured = 0
    for name, gpu in catalog.gpus().items():
        for field in MOE_FIELDS:
            if getattr(gpu, field) is not None:
                measured += 1
                assert field in gpu.sources and "moe_fractions.py" in gpu.sources[field], (name, field)
                assert getattr(gpu, f"tflops_{field.rsplit('_', 1)[1]}") is not None, (name, field)
    assert measured >= 20


def test_a_moe_step_computes_its_routed_experts_at_their_rate():
    """DeepSeek-V3 on 8 B200, dense rate 4,000 TFLOPS, the experts' 1,600 (2.5x slower), dense
    m_0 300 and the experts' 130: per token the non-expert matmuls at 4,000 and the K routed
    experts' at 1,600; per step m_0 300 for the non-expert GEMMs, 130 for each touched expert's at
    the experts' rate."""
    gpu, model = catalog.gpus()["b200"].to_params(), catalog.models()["deepseek-v3"].to_params()
    c = decode_coefficients(gpu, model, 8.0, 4096.0, 4000.0, 0.8, 1.1, offset_tokens=300.0,
                            expert_tflops=1600.0, expert_offset_tokens=130.0)
    dense, routed = 2e9 / (8.0 * 4000.0e12) * 1e3, 2e9 / (8.0 * 1600.0e12) * 1e3  # ms per 1e9 params a token
    k_expert = model.experts_per_token * model.expert_params_b
    assert float(c.compute_ms) == pytest.approx((model.params_active_b - k_expert) * dense + k_expert * routed,
                                                rel=1e-6)
    assert float(c.compute_floor_ms) == pytest.approx(300.0 * model.nonmoe_params_b * dense, rel=1e-6)
    assert float(c.expert_floor_ms) == pytest.approx(130.0 * model.expert_params_b * routed, rel=1e-6)
    for batch in (1.0, 8.0, 64.0, 2048.0):
        touched = min(batch * 8.0, 256.0)
        want = batch * float(c.compute_ms) + float(c.compute_floor_ms) + touched * float(c.expert_floor_ms)
        assert float(decode_step(c, batch).t_compute_ms) == pytest.approx(want, rel=1e-6)


def test_a_dense_model_is_untouched_by_the_experts_rate():
    gpu, model = catalog.gpus()["b200"].to_params(), catalog.models()["llama-3.1-70b"].to_params()
    plain = decode_coefficients(gpu, model, 2.0, 4096.0, 4000.0, 0.8, 1.1, offset_tokens=300.0)
    slower = decode_coefficients(gpu, model, 2.0, 4096.0, 4000.0, 0.8, 1.1, offset_tokens=300.0,
                                 expert_tflops=1000.0, expert_offset_tokens=50.0)
    for field in plain._fields:
        if getattr(plain, field) is None:  # the seed's roofline: no attention split
            assert getattr(slower, field) is None, field
            continue
        assert float(getattr(slower, field)) == float(getattr(plain, field)), field


def test_a_gpu_measuring_its_experts_as_its_dense_gemms_equals_one_measuring_none():
    """Brute force through the whole model: B200 with its MoE fields set to its dense ones gives
    the sweep of B200 without MoE fields (the fallback), bit for bit; with the shipped fields the
    MoE model's decode is slower where its matmuls bind (DeepSeek-V3's FP8 experts: the grouped
    GEMMs reach 0.26 of the FP8 peak, the dense ones 0.52)."""
    base = catalog.gpus()["b200"].model_dump()
    none = Hardware(**{**base, **{f: None for f in MOE_FIELDS}, "name": "b200-none", "engine_gemm": {}})
    same = Hardware(**{**base, "name": "b200-same", "engine_gemm": {}, **{
        f"gemm_moe_{kind}_{p}": base[f"gemm_{kind}_{p}"] for kind in ("fraction", "offset_tokens")
        for p in GEMM_PRECISIONS}})
    grid = dict(model="deepseek-v3", tp=8, concurrency=[1, 64, 1024], think_time_s=[0.0, 5.0],
                context_tokens=4096, hit_rate=[0.0, 0.9], gemm_rate="measured")
    both = jp.sweep(gpu=[none, same], **grid)
    shipped = jp.sweep(gpu="b200", **grid)
    for name in ("ttft_ms", "tpot_ms", "batch_eff"):
        np.testing.assert_array_equal(both[name].sel(gpu="b200-none").values, both[name].sel(gpu="b200-same").values)
    slower, fallback = shipped.tpot_ms.values.ravel(), both.tpot_ms.sel(gpu="b200-none").values.ravel()
    assert (slower >= fallback).all() and (slower > 1.05 * fallback).sum() >= 4  # where its matmuls bind


def test_exact_agrees_with_damped_at_the_experts_rate():
    grid = dict(gpu=["b200", "h200-sxm"], model=["qwen3-235b-a22b", "deepseek-v3"], tp=[8],
                concurrency=[1, 3, 16, 128, 1024], think_time_s=[0.0, 2.0], context_tokens=[4096],
                hit_rate=[0.0], gemm_rate="measured")
    damped = jp.sweep(**grid)
    exact = jp.sweep(**grid, solver="exact")
    np.testing.assert_allclose(exact.tpot_ms.values, damped.tpot_ms.values, rtol=1e-4)
    np.testing.assert_allclose(exact.batch_eff.values, damped.batch_eff.values, rtol=1e-4)
