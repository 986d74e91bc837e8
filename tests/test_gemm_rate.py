"""``gemm_rate="measured"``: the matmuls at the share of the dense peak that large GEMMs measurably
reach on each GPU (the catalog's ``gemm_fraction_*``), each GEMM taking as long as m + m_0 tokens
(``gemm_offset_tokens_*``); the datasheet peak, without an offset, by default."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions import catalog
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import DEFAULT_GEMM_FRACTION, DEFAULT_GEMM_OFFSET_TOKENS, Hardware, \
    effective_tflops, gemm_offset_tokens
from jaxpareto.physics.decode import decode_coefficients, decode_step, tpot_lines

GRID = dict(gpu=["h100-sxm"], model=["llama-3.1-70b"], tp=[4], concurrency=[1, 64], think_time_s=[0.0],
            context_tokens=[8192], hit_rate=[0.0])


@pytest.mark.parametrize("gpu, bits, want", [
    ("b200", 4, 9000.0 * 0.457),  # FP4 at its measured share
    ("b200", 8, 4500.0 * 0.515),
    ("h100-sxm", 16, 989.0 * 0.754),
    ("h100-sxm", 4, 1979.0 * 0.600),  # no FP4 on Hopper: the FP8 rate, and FP8's share
    ("mi300x", 8, 2614.9 * 0.487),  # AMD's max-achievable FLOPS
    ("mi355x", 4, 10066.0 * DEFAULT_GEMM_FRACTION["fp4"]),  # not measured: the catalog's median
    ("a100-sxm-80gb", 8, 312.0 * 0.848),  # no FP8 on Ampere: FP16's rate and share
])
def test_measured_rate_is_the_peak_times_the_precisions_share(gpu, bits, want):
    params = catalog.gpus()[gpu].to_params()
    assert float(effective_tflops(params, bits, "measured")) == pytest.approx(want, rel=1e-6)
    assert float(effective_tflops(params, bits)) == float(effective_tflops(params, bits, "peak"))


@pytest.mark.parametrize("kind, defaults", [("fraction", DEFAULT_GEMM_FRACTION),
                                            ("offset_tokens", DEFAULT_GEMM_OFFSET_TOKENS)])
def test_defaults_are_the_catalogs_medians(kind, defaults):
    gpus = catalog.gpus().values()
    for precision, default in defaults.items():
        measured = [v for g in gpus if (v := getattr(g, f"gemm_{kind}_{precision}")) is not None]
        assert len(measured) >= 3
        assert default == pytest.approx(statistics.median(measured), abs=5e-4), precision


def test_every_measurement_has_a_source():
    for name, gpu in catalog.gpus().items():
        for kind in ("fraction", "offset_tokens"):
            for precision in ("fp16", "fp8", "fp4"):
                if getattr(gpu, f"gemm_{kind}_{precision}") is not None:
                    assert f"gemm_{kind}_{precision}" in gpu.sources, (name, kind, precision)
                    assert getattr(gpu, f"tflops_{precision}") is not None, (name, precision)  # of a peak it has


@pytest.mark.parametrize("gpu, bits, want", [("b200", 4, 289.0), ("b200", 8, 143.0), ("h100-sxm", 8, 0.0),
                                             ("h100-sxm", 4, 0.0), ("mi300x", 8, DEFAULT_GEMM_OFFSET_TOKENS["fp8"])])
def test_offset_of_the_precision_down_the_chain(gpu, bits, want):
    params = catalog.gpus()[gpu].to_params()
    assert float(gemm_offset_tokens(params, bits, "measured")) == want
    assert float(gemm_offset_tokens(params, bits)) == 0.0  # the seed's peak: no offset


def test_decode_step_adds_the_offsets_matmul_time_to_the_compute_line_only():
    """TPOT = max(memory, (B + m_0) x t_matmul) / η_d + fixed: the offset lifts the compute line,
    never the memory lines, and the lines the exact solver uses agree with the step."""
    gpu, model = catalog.gpus()["b200"].to_params(), catalog.models()["llama-3.1-70b"].to_params()
    base = decode_coefficients(gpu, model, 1.0, 4096.0, 4000.0, 0.8, 1.1)
    lifted = decode_coefficients(gpu, model, 1.0, 4096.0, 4000.0, 0.8, 1.1, offset_tokens=300.0)
    assert float(lifted.compute_floor_ms) == pytest.approx(300.0 * float(base.compute_ms), rel=1e-6)
    for batch in (1.0, 64.0, 700.0, 4000.0):
        a, b = decode_step(base, batch), decode_step(lifted, batch)
        assert float(b.t_compute_ms) == pytest.approx((batch + 300.0) * float(base.compute_ms), rel=1e-6)
        assert float(b.t_weight_ms + b.t_kv_ms) == float(a.t_weight_ms + a.t_kv_ms)
        want = max(float(a.t_weight_ms + a.t_kv_ms) * 1.1, (batch + 300.0) * float(base.compute_ms)) / 0.8
        assert float(b.tpot_ms) == pytest.approx(want, rel=1e-6)
        lines = tpot_lines(lifted)
        by_lines = max(min(float(lines.a_unsat + lines.b_unsat * batch), float(lines.a_sat + lines.b_sat * batch)),
                       float(lines.a_compute + lines.b_compute * batch))
        assert by_lines == pytest.approx(float(b.tpot_ms), rel=1e-6)


def test_prefill_time_scales_by_the_inverse_share():
    """Seed eq. 2 is all matmul time: TTFT at the measured rate is TTFT at the peak / 0.754 (H100
    BF16, whose offset is 0), while the memory-bound decode of one session does not move."""
    peak = jp.sweep(**GRID)
    measured = jp.sweep(**GRID, gemm_rate="measured")
    assert measured.attrs["gemm_rate"] == "measured" and peak.attrs["gemm_rate"] == "peak"
    ratio = (measured.ttft_ms / peak.ttft_ms).values
    np.testing.assert_allclose(ratio, 1.0 / 0.754, rtol=1e-5)
    one = dict(concurrency=1)
    assert float(measured.sel(one).decode_bound.squeeze()) == 0  # memory bound at B = 1
    np.testing.assert_allclose(measured.tpot_ms.sel(one).values, peak.tpot_ms.sel(one).values, rtol=1e-6)


def test_unknown_rate_is_refused_by_name():
    with pytest.raises(JaxparetoError, match="gemm_rate"):
        jp.sweep(**GRID, gemm_rate="fast")


@pytest.mark.parametrize("share", [0.0, 1.5, -0.2])
def test_share_outside_zero_one_is_refused_by_name(share):
    gpu = catalog.gpus()["h100-sxm"].model_dump()
    gpu.update(name="mine", gemm_fraction_fp8=share)
    with pytest.raises(JaxparetoError, match="Hardware.gemm_fraction_fp8"):
        Hardware(**gpu)


def test_calibration_adopts_its_rate():
    calibration = {"efficiency": {"eta_prefill": 0.5}, "model": {"gemm_rate": "measured"}}
    ds = jp.sweep(**GRID, calibration=calibration)
    assert ds.attrs["gemm_rate"] == "measured"
    assert ds.ttft_ms.values == pytest.approx(jp.sweep(**GRID, eta_prefill=0.5, gemm_rate="measured").ttft_ms.values)
    with pytest.raises(JaxparetoError, match="gemm_rate"):
        jp.sweep(**GRID, calibration={"efficiency": {}, "model": {"gemm_rate": "peak"}}, gemm_rate="measured")
    with pytest.raises(JaxparetoError, match="calibration.model.gemm_rate"):
        jp.sweep(**GRID, calibration={"efficiency": {}, "model": {"gemm_rate": "datasheet"}})


def test_isolated_prefill_adds_the_offset_once_and_exact_agrees_with_damped():
    """B200 BF16 (m_0 = 22): seed eq. 2's TTFT of L tokens becomes (L + 22) tokens at the measured
    rate; the exact solver (R(B) still piecewise linear) agrees with the damped one."""
    grid = dict(GRID, gpu=["b200"], concurrency=[1, 64, 512])
    peak = jp.sweep(**grid)
    measured = jp.sweep(**grid, gemm_rate="measured")
    exact = jp.sweep(**grid, gemm_rate="measured", solver="exact")
    tokens = float(peak.prefill_tokens.isel(concurrency=0).squeeze())
    ratio = (measured.ttft_ms / peak.ttft_ms).values
    np.testing.assert_allclose(ratio, (tokens + 22.0) / tokens / 0.672, rtol=1e-5)
    np.testing.assert_allclose(exact.tpot_ms.values, measured.tpot_ms.values, rtol=1e-4)
    np.testing.assert_allclose(exact.batch_eff.values, measured.batch_eff.values, rtol=1e-4)


def test_a_calibration_without_a_rate_was_fitted_at_the_peak():
    """Files written before gemm_rate existed (the shipped hopper-measured) were fitted at the
    peak: asking for the measured rate with them is refused, and so is asking for the peak, by
    keyword, with a file fitted at the measured rate."""
    with pytest.raises(JaxparetoError, match="gemm_rate"):
        jp.sweep(**GRID, calibration="hopper-measured", gemm_rate="measured")
    assert jp.sweep(**GRID, calibration="hopper-measured").attrs["gemm_rate"] == "peak"
    with pytest.raises(JaxparetoError, match="gemm_rate"):
        jp.sweep(**GRID, calibration={"efficiency": {}, "model": {"gemm_rate": "measured"}}, gemm_rate="peak")
    # the same for every option a calibration records: an explicit keyword at its default is an ask
    with pytest.raises(JaxparetoError, match="prefill_model"):
        jp.sweep(**GRID, calibration={"efficiency": {}, "model": {"prefill_model": "shared"}}, prefill_model="isolated")


@pytest.mark.parametrize("field, value, message", [
    ("gemm_fraction_fp8", float("nan"), "gemm_fraction_fp8"),
    ("gemm_fraction_fp4", 0.4, "gemm_fraction_fp4: a measurement of fp4"),  # H100 has no FP4
    ("gemm_offset_tokens_fp8", -3.0, "gemm_offset_tokens_fp8"),
])
def test_bad_measurements_are_refused_by_name(field, value, message):
    gpu = catalog.gpus()["h100-sxm"].model_dump()
    gpu.update(name="mine", **{field: value})
    with pytest.raises(JaxparetoError, match=message):
        Hardware(**gpu)


def test_ridge_point_follows_the_rate():
    peak = jp.sweep(**GRID).ridge_point
    measured = jp.sweep(**GRID, gemm_rate="measured").ridge_point
    np.testing.assert_allclose(measured.values, peak.values * 0.754, rtol=1e-6)  # H100 BF16
    assert "measured" in measured.attrs["long_name"]


def test_a_pipeline_pays_the_offset_every_cycle():
    """A cycle of S stage steps pays m_0 once per stage's GEMMs on 1/S of the layers, m_0 x the
    whole model's matmul time per token in all: a pipeline holding one session decodes no faster
    than its TP group (GB200 FP8: m_0 = 221)."""
    grid = dict(gpu=["gb200"], model=["llama-3.1-70b-fp8"], tp=[1], pp=[1, 2, 4], concurrency=[1],
                think_time_s=[0.0], context_tokens=[4096], hit_rate=[0.0])
    ds = jp.sweep(**grid, gemm_rate="measured")
    compute = ds.t_compute_ms.squeeze().values
    np.testing.assert_allclose(compute, compute[0], rtol=1e-6)
    tpot = ds.tpot_ms.squeeze().values
    assert (tpot[1:] >= tpot[0] * (1 - 1e-6)).all()


def test_a_moe_step_pays_the_offset_once_per_routed_expert_it_touches():
    """The tokens routed to an expert are a GEMM of their own: DeepSeek-V3 on one B200 (m_0 = 300
    here) pays m_0 for its non-expert matmuls and for each of the min(B K, E) experts its B tokens
    touch, so the compute line climbs with B until all 256 are touched (B = 32); the exact
    solver's four lines agree with the step on both sides of that kink."""
    gpu, model = catalog.gpus()["b200"].to_params(), catalog.models()["deepseek-v3"].to_params()
    c = decode_coefficients(gpu, model, 8.0, 4096.0, 4000.0, 0.8, 1.1, offset_tokens=300.0)
    per_param = 2e9 / (8.0 * 4000.0e12) * 1e3  # ms per billion parameters per token
    assert float(c.compute_floor_ms) == pytest.approx(300.0 * model.nonmoe_params_b * per_param, rel=1e-6)
    assert float(c.expert_floor_ms) == pytest.approx(300.0 * model.expert_params_b * per_param, rel=1e-6)
    lines = tpot_lines(c)
    for batch in (0.5, 1.0, 8.0, 31.0, 33.0, 256.0, 4000.0):
        step = decode_step(c, batch)
        touched = min(batch * 8.0, 256.0)
        want = batch * float(c.compute_ms) + 300.0 * per_param * (model.nonmoe_params_b + touched * model.expert_params_b)
        assert float(step.t_compute_ms) == pytest.approx(want, rel=1e-6)
        by_lines = max(min(float(lines.a_unsat + lines.b_unsat * batch), float(lines.a_sat + lines.b_sat * batch)),
                       min(float(lines.a_compute + lines.b_compute * batch),
                           float(lines.a_compute_sat + lines.b_compute_sat * batch)))
        assert by_lines == pytest.approx(float(step.tpot_ms), rel=1e-6)


def test_a_moe_prefill_pays_the_offset_for_the_experts_its_prompt_touches():
    """Seed eq. 2 at the measured rate (η_p 0.65) for Qwen3-235B-A22B on 8 B200 (BF16): a prompt
    of L tokens touches min(L K, E) = all 128 experts, so its TTFT alone is L tokens of the
    non-expert matmuls plus m_0 = 22 tokens' worth of them at the dense rate (0.672 of the peak),
    and L tokens of the K routed experts plus m_0 = 113 tokens' worth of each of the 128 at the
    grouped GEMMs' rate (0.480; test_moe_rate.py); the exact solver agrees with the damped one
    where few sessions touch few experts."""
    grid = dict(gpu=["b200"], model=["qwen3-235b-a22b"], tp=[8], concurrency=[1, 2, 8, 256],
                think_time_s=[0.0], context_tokens=[2048], hit_rate=[0.0])
    measured = jp.sweep(**grid, gemm_rate="measured")
    model = catalog.models()["qwen3-235b-a22b"]
    dense = 2250.0 * 0.672 * 0.65 * 8.0  # F x η_p x G: eq. 2's ms per (billion parameters x 2 FLOPs)
    grouped = 2250.0 * 0.480 * 0.65 * 8.0
    tokens = float(measured.prefill_tokens.isel(concurrency=0).squeeze())
    routed = model.experts_per_token * model.expert_params_b
    want = 2.0 * (tokens * (model.params_active_b - routed) + 22.0 * model.nonmoe_params_b) / dense \
        + 2.0 * (tokens * routed + 113.0 * 128 * model.expert_params_b) / grouped
    assert model.weight_dtype == "bf16"
    assert float(measured.ttft_ms.isel(concurrency=0).squeeze()) == pytest.approx(want, rel=1e-5)
    exact = jp.sweep(**grid, gemm_rate="measured", solver="exact")
    np.testing.assert_allclose(exact.tpot_ms.values, measured.tpot_ms.values, rtol=1e-4)
    np.testing.assert_allclose(exact.batch_eff.values, measured.batch_eff.values, rtol=1e-4)


def test_the_measured_profiles_prefill_step_pays_the_offsets_of_the_experts_its_chunk_touches():
    """The measured profile's prefill roofline: a chunk of p tokens alone on DeepSeek-V3 (8 B200,
    m_0 = 300 here) computes its p tokens plus m_0 tokens' worth of the non-expert weights and of
    the min(p K, E) experts it touches; 2 tokens touch 16 experts, 64 tokens all 256."""
    from jaxpareto.definitions.options import ModelOptions
    from jaxpareto.physics.costs import isolated_prefill_ms

    gpu, model = catalog.gpus()["b200"].to_params(), catalog.models()["deepseek-v3"].to_params()
    c = decode_coefficients(gpu, model, 8.0, 4096.0, 4000.0, 0.8, 1.1, offset_tokens=300.0)
    per_token_ms = 0.05  # c_p: large enough that every chunk is bound by its compute
    for tokens, touched in ((2.0, 16.0), (64.0, 256.0)):
        got = float(isolated_prefill_ms(c, tokens, 8192.0, per_token_ms, ModelOptions(profile="measured")))
        want = (float(c.compute_floor_ms) + touched * float(c.expert_floor_ms)) / 0.8 + tokens * per_token_ms
        assert got == pytest.approx(want, rel=1e-6)


def test_exact_agrees_with_damped_where_the_experts_offsets_bind():
    """DeepSeek-V3 FP8 on 8 GB200 (m_0 = 221): an expert's offset costs more than reading it, so
    the step is bound by its compute below and above the point where every expert is touched
    (B K = E), the pieces the exact solver's fourth line adds."""
    grid = dict(gpu=["gb200"], model=["deepseek-v3"], tp=[8], concurrency=[1, 3, 16, 40, 128, 1024],
                think_time_s=[0.0, 2.0], context_tokens=[4096], hit_rate=[0.0])
    damped = jp.sweep(**grid, gemm_rate="measured")
    exact = jp.sweep(**grid, gemm_rate="measured", solver="exact")
    assert (damped.decode_bound == 1).sum() >= 6  # compute bound at most of the points
    batch = damped.batch_eff.values
    assert (batch < 32).any() and (batch > 32).any()  # on both sides of B K = E
    np.testing.assert_allclose(exact.tpot_ms.values, damped.tpot_ms.values, rtol=1e-4)
    np.testing.assert_allclose(exact.batch_eff.values, damped.batch_eff.values, rtol=1e-4)


@pytest.mark.parametrize("decoding", [0.0, 1.0, 2.5, 8.0, 40.0])
def test_prefill_experts_beyond_a_batch_complete_its_steps_offsets(decoding):
    """The contract the engines rely on (`prefill_expert_costs` at the batch of the step it
    joins): a step decoding b with p prefill tokens
    pays the offsets of the min((b + p) K, E) experts they touch together, the same as a step of
    b + p tokens."""
    from jaxpareto.definitions.options import ModelOptions
    from jaxpareto.physics.costs import prefill_expert_costs

    gpu, model = catalog.gpus()["b200"].to_params(), catalog.models()["deepseek-v3"].to_params()
    c = decode_coefficients(gpu, model, 8.0, 4096.0, 4000.0, 0.8, 1.1, offset_tokens=300.0)
    for prefill in (1.0, 3.0, 64.0):
        extra = prefill_expert_costs(c, decoding, ModelOptions(profile="measured"))(prefill)
        joined = decode_step(c, decoding).t_compute_ms + extra.floor_ms
        together = decode_step(c, decoding + prefill).t_compute_ms - prefill * c.compute_ms
        assert float(joined) == pytest.approx(float(together), rel=1e-6)
        weights = decode_step(c, decoding).t_weight_ms + extra.weight_ms
        assert float(weights) == pytest.approx(float(decode_step(c, decoding + prefill).t_weight_ms), rel=1e-6)
