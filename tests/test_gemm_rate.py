"""``gemm_rate="measured"``: the matmuls at the share of the dense peak that large GEMMs measurably
reach on each GPU (the catalog's ``gemm_fraction_*``), the datasheet peak by default."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions import catalog
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import DEFAULT_GEMM_FRACTION, Hardware, effective_tflops

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


def test_default_shares_are_the_catalogs_medians():
    gpus = catalog.gpus().values()
    for precision, default in DEFAULT_GEMM_FRACTION.items():
        measured = [v for g in gpus if (v := getattr(g, f"gemm_fraction_{precision}")) is not None]
        assert len(measured) >= 3
        assert default == pytest.approx(statistics.median(measured), abs=5e-4), precision


def test_every_measured_share_has_a_source():
    for name, gpu in catalog.gpus().items():
        for precision in ("fp16", "fp8", "fp4"):
            if getattr(gpu, f"gemm_fraction_{precision}") is not None:
                assert f"gemm_fraction_{precision}" in gpu.sources, (name, precision)
                assert getattr(gpu, f"tflops_{precision}") is not None, (name, precision)  # a share of a peak it has


def test_prefill_time_scales_by_the_inverse_share():
    """Seed eq. 2 is all matmul time: TTFT at the measured rate is TTFT at the peak / 0.754 (H100
    BF16), while the memory-bound decode of one session does not move."""
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
