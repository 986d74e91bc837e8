"""``roofline="operator"``: a decode step as the projections' roofline plus attention's, one
after the other (each layer's kernels run in turn), against the seed's one roofline for the whole
step (``roofline="step"``, the default); an option a calibration records and a sweep adopts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jaxpareto as jp
from jaxpareto.definitions import catalog
from jaxpareto.definitions.calibration_file import calibration_options
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import effective_tflops
from jaxpareto.definitions.units import BYTES_PER_GB, FLOPS_PER_TFLOPS
from jaxpareto.physics.decode import DecodeCoefficients, decode_coefficients, decode_step
from jaxpareto.physics.engine import step_ms

GRID = dict(gpu="h200-sxm", model="llama-3.1-70b-fp8", tp=[1, 2], concurrency=[1, 64, 256, 1024],
            think_time_s=[0.0], context_tokens=[512, 8192], hit_rate=[0.9], gemm_rate="measured", attention="flops")


def _coefficients(roofline: str, context: float = 2048.0) -> DecodeCoefficients:
    hw = catalog.gpus()["h200-sxm"].to_params()
    model = catalog.models()["llama-3.1-70b-fp8"].to_params()
    return decode_coefficients(hw, model, 1.0, context, 1000.0, 0.8, 1.1, attention_tflops=700.0,
                               offset_tokens=60.0, roofline=roofline)


def test_a_step_is_the_projections_roofline_plus_attentions():
    """Llama-3.1-70B FP8 on one H200 at 1,000 dense TFLOPS (attention at 700), 2,048 tokens of
    context, B = 256: from first principles, the weights' read (70.6 GB at 4.8 TB/s) against the
    projections' 2 x P_active FLOPs per token plus the 60-token offset, then the batch's KV reads
    against its attention FLOPs over the context, each read x 1.1, all over η_d 0.8."""
    model = catalog.models()["llama-3.1-70b-fp8"]
    params = model.to_params()
    c = _coefficients("operator")
    batch = 256.0
    weights_ms = params.nonmoe_params_b * params.nonmoe_weight_bytes / 4800.0 * 1e3
    projections_ms = (batch + 60.0) * 2.0 * params.params_active_b * 1e9 / (1000.0 * FLOPS_PER_TFLOPS) * 1e3
    kv_ms = batch * 2048.0 * params.kv_bytes_per_token / BYTES_PER_GB / 4800.0 * 1e3
    attention_ms = batch * 2048.0 * params.decode_pair_flops / (700.0 * FLOPS_PER_TFLOPS) * 1e3
    want = (max(1.1 * weights_ms, projections_ms) + max(1.1 * kv_ms, attention_ms)) / 0.8
    step = decode_step(c, batch)
    assert float(step.tpot_ms) == pytest.approx(want, rel=1e-6)
    assert projections_ms > 1.1 * weights_ms and bool(step.compute_bound)  # the projections bind at 256
    # the seed's one roofline takes the larger of the step's reads and its FLOPs
    seed = decode_step(_coefficients("step"), batch)
    assert float(seed.tpot_ms) == pytest.approx(max(1.1 * (weights_ms + kv_ms), projections_ms + attention_ms) / 0.8,
                                                rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(weights=st.floats(0.0, 50.0), kv=st.floats(0.0, 1.0), compute=st.floats(0.0, 1.0),
       attention=st.floats(0.0, 1.0), floor=st.floats(0.0, 30.0), batch=st.floats(0.0, 4096.0),
       prefill=st.floats(0.0, 8192.0))
def test_per_operator_is_never_faster_and_equals_the_seed_without_attention(weights, kv, compute, attention, floor,
                                                                             batch, prefill):
    """max(a, b) + max(c, d) >= max(a + c, b + d): the per-operator step is at least the seed's, and
    equal where the step reads no KV and computes no attention; a mixed step of 0 prefill tokens
    is the decode step (`step_ms`)."""
    fields = dict(nonmoe_ms=weights, expert_ms=0.0, experts=0.0, experts_per_token=0.0, kv_ms=kv,
                  compute_ms=compute + attention, elementwise_overhead=1.1, eta_decode=0.8, fixed_ms=0.3,
                  compute_floor_ms=floor)
    seed = DecodeCoefficients(**fields)
    operator = DecodeCoefficients(**fields, attention_ms=attention)
    s, o = decode_step(seed, batch), decode_step(operator, batch)
    assert float(o.tpot_ms) >= float(s.tpot_ms) * (1.0 - 1e-6)
    alone = DecodeCoefficients(**{**fields, "kv_ms": 0.0, "compute_ms": compute}, attention_ms=0.0)
    assert float(decode_step(alone, batch).tpot_ms) == pytest.approx(
        float(decode_step(DecodeCoefficients(**{**fields, "kv_ms": 0.0, "compute_ms": compute}), batch).tpot_ms),
        rel=1e-6)
    for step in (s, o):
        assert float(step_ms(step, 0.8, 1.1, 0.0, 0.01)) == pytest.approx(float(step.tpot_ms), rel=1e-6)
    # prefill tokens compute with the projections: a mixed step is at least its decode step
    assert float(step_ms(o, 0.8, 1.1, prefill, 0.01)) >= float(o.tpot_ms) * (1.0 - 1e-6)


def test_a_sweep_per_operator_is_slower_where_attention_and_projections_both_weigh():
    step, operator = jp.sweep(**GRID), jp.sweep(**GRID, roofline="operator")
    assert operator.attrs["roofline"] == "operator" and step.attrs["roofline"] == "step"
    s, o = step.tpot_ms.values, operator.tpot_ms.values
    finite = np.isfinite(s)
    assert (np.isfinite(o) == finite).all() and finite.sum() >= 8
    assert (o[finite] >= s[finite] * (1.0 - 1e-5)).all()
    # memory-bound single sessions are unchanged, compute-bound batches with long contexts slow down
    np.testing.assert_allclose(o.take(0, axis=step.tpot_ms.dims.index("concurrency")),
                               s.take(0, axis=step.tpot_ms.dims.index("concurrency")), rtol=1e-5)
    assert np.nanmax(o / s) > 1.1


def test_the_exact_solver_is_refused_and_the_option_is_checked_by_name():
    with pytest.raises(JaxparetoError, match="roofline='step'"):
        jp.sweep(**GRID, roofline="operator", solver="exact")
    with pytest.raises(JaxparetoError, match="roofline"):
        jp.sweep(**GRID, roofline="kernels")


def test_a_calibration_records_its_roofline_and_a_sweep_adopts_it(tmp_path):
    path = tmp_path / "cal.toml"
    path.write_text('[efficiency]\neta_decode = 0.7\n[model]\nroofline = "operator"\ngemm_rate = "measured"\n'
                    'attention = "flops"\n')
    assert calibration_options(path)["roofline"] == "operator"
    adopted = jp.sweep(**{k: v for k, v in GRID.items() if k not in ("gemm_rate", "attention")}, calibration=path)
    assert adopted.attrs["roofline"] == "operator"
    with pytest.raises(JaxparetoError, match="roofline"):
        jp.sweep(**GRID, calibration=path, roofline="step")
    old = tmp_path / "old.toml"
    old.write_text('[efficiency]\neta_decode = 0.7\n')
    assert calibration_options(old)["roofline"] == "step"  # files from before the key


def test_the_shipped_calibration_names_its_roofline():
    from pathlib import Path
    shipped = Path(__file__).resolve().parents[1] / "sweeps" / "calibration.toml"
    assert calibration_options(shipped)["roofline"] in ("step", "operator")
    hw = catalog.gpus()["h200-sxm"].to_params()
    assert float(effective_tflops(hw, 8, "measured")) > 0
