"""``attention="flops"``: attention's own FLOPs counted under the seed's equations too (the
measured profile always counts them), an option a calibration records and a sweep adopts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.cli.app import main
from jaxpareto.definitions import catalog
from jaxpareto.definitions.calibration_file import calibration_options
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.settings import Efficiency
from jaxpareto.measure.validation_set import default_path

GRID = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 256], think_time_s=[0.0],
            context_tokens=[8192], hit_rate=[0.0, 0.5])


def _pairs(new, prefix):
    """Causal (query, key) pairs of ``new`` queries after ``prefix`` cached keys: n P + n (n + 1) / 2."""
    return new * prefix + new * (new + 1.0) / 2.0


def test_prefill_gains_its_causal_attention_flops_at_the_bf16_rate():
    """Seed eq. 2 plus the attention of the mean turn over its hits and misses: a hit's ΔL = 2,128
    queries after the L - ΔL cached, a miss's L after none, x 4 x heads x head_dim FLOPs x layers per
    pair, on G GPUs at the BF16 peak, / η_p."""
    one = dict(GRID, tp=[1], concurrency=[1], hit_rate=[0.0, 0.5, 1.0])
    plain, flops = jp.sweep(**one), jp.sweep(**one, attention="flops")
    model = catalog.models()["llama-3.1-8b"]
    h, delta, context = np.array([0.0, 0.5, 1.0]), 2128.0, 8192.0
    pairs = h * _pairs(delta, context - delta) + (1.0 - h) * _pairs(context, 0.0)
    want_ms = model.to_params().attention_pair_flops * pairs / (989.0e12 * Efficiency().eta_prefill) * 1e3
    np.testing.assert_allclose((flops.ttft_ms - plain.ttft_ms).values.ravel(), want_ms, rtol=1e-4)
    assert flops.attrs["attention"] == "flops" and plain.attrs["attention"] == "profile"


def test_decode_gains_the_batchs_attention_where_compute_bound_only():
    """A compute-bound step (B = 512, short contexts, the measured GEMM rate) computes every
    session's attention over its context too; a memory-bound one (B = 1) does not change."""
    grid = dict(GRID, tp=[1], concurrency=[1, 512], context_tokens=[128], hit_rate=[1.0], gemm_rate="measured")
    plain, flops = jp.sweep(**grid), jp.sweep(**grid, attention="flops")
    bound = plain.decode_bound.values.ravel()
    assert list(bound) == [0, 1]  # memory-bound at 1, compute-bound at 512
    gain = (flops.tpot_ms / plain.tpot_ms - 1.0).values.ravel()
    assert gain[0] == pytest.approx(0.0, abs=1e-6)
    # per session: 4 x heads x head_dim x layers FLOPs per key over 128 keys, against 2 x P_active
    model = catalog.models()["llama-3.1-8b"]
    ratio = model.to_params().decode_pair_flops * 128 / (2 * model.params_active_b * 1e9) * 0.754  # BF16 share
    assert gain[1] == pytest.approx(ratio, rel=0.05)


def test_the_measured_profile_counts_them_either_way_and_the_seed_is_unchanged():
    measured = jp.sweep(**GRID, profile="measured")
    np.testing.assert_array_equal(measured.ttft_ms, jp.sweep(**GRID, profile="measured", attention="flops").ttft_ms)
    assert jp.ModelOptions(profile="measured").attention_flops and not jp.ModelOptions().attention_flops
    with pytest.raises(JaxparetoError, match="attention"):
        jp.sweep(**GRID, attention="kv")


def test_a_calibration_records_it_and_a_sweep_adopts_it(tmp_path):
    fitted = {"efficiency": {"eta_prefill": 0.8}, "model": {"attention": "flops"}}
    ds = jp.sweep(**GRID, calibration=fitted)
    assert ds.attrs["attention"] == "flops"
    np.testing.assert_allclose(ds.ttft_ms, jp.sweep(**GRID, eta_prefill=0.8, attention="flops").ttft_ms, rtol=1e-6)
    with pytest.raises(JaxparetoError, match="attention"):
        jp.sweep(**GRID, calibration=fitted, attention="profile")
    assert calibration_options({"efficiency": {}})["attention"] == "profile"  # a file from before the key
    with pytest.raises(JaxparetoError, match="calibration.model.attention"):
        calibration_options({"efficiency": {}, "model": {"attention": "all"}})
    shipped = Path(__file__).resolve().parents[1] / "sweeps" / "calibration.toml"
    assert calibration_options(shipped)["attention"] == "flops"  # the shipped fit counts them


def test_validate_adopts_the_calibrations_attention_and_refuses_another(tmp_path, capsys):
    path = tmp_path / "fit.toml"
    path.write_text('[efficiency]\neta_prefill = 0.8\n[model]\nattention = "flops"\n')
    data = tmp_path / "rows.csv"
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    raw[raw["id"].str.startswith("vllm-fp8kv-c8")].to_csv(data, index=False)
    assert main(["validate", "--calibration", str(path), "--data", str(data)]) == 0
    assert "attention: flops" in capsys.readouterr().out
    assert main(["validate", "--calibration", str(path), "--data", str(data), "--attention", "profile"]) == 2
    assert "--attention: the calibration's factors were fitted with 'flops'" in capsys.readouterr().err


def test_under_the_measured_profile_either_choice_is_the_same_model():
    """The measured profile counts attention's FLOPs whatever the option says: a calibration
    fitted with it (hopper-measured, no ``attention`` key) takes either without complaint."""
    grid = dict(GRID, concurrency=[1, 64])
    both = [jp.sweep(**grid, calibration="hopper-measured", attention=a).ttft_ms for a in ("profile", "flops")]
    np.testing.assert_array_equal(both[0], both[1])


def test_decode_context_moves_decode_and_kv_but_not_the_prompts_prefill():
    """``decode_context_tokens``: decode (reads and attention) and KV memory at the in-flight
    context, the prompt's prefill after no prefix: TPOT and KV as a point of that context, TTFT
    as one of the prompt alone (the validation set's standard-serving encoding)."""
    one = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=[1], concurrency=[1, 32], think_time_s=[0.0],
               hit_rate=[0.0], attention="flops")
    split = jp.sweep(**one, context_tokens=[1024], decode_context_tokens=8192.0)
    whole, prompt = jp.sweep(**one, context_tokens=[8192]), jp.sweep(**one, context_tokens=[1024])
    np.testing.assert_allclose(split.tpot_ms, whole.tpot_ms.values, rtol=1e-6)
    np.testing.assert_allclose(split.kv_per_session_gb, whole.kv_per_session_gb.values, rtol=1e-6)
    np.testing.assert_allclose(split.ttft_ms, prompt.ttft_ms.values, rtol=1e-6)


def test_validation_rows_prefill_their_prompt_after_no_prefix():
    from jaxpareto.measure.predict import validation_rows
    from jaxpareto.measure.row_inputs import row_inputs
    from jaxpareto.physics.memory import in_flight_context
    rows = validation_rows(None)
    rows = rows[rows["id"].str.startswith("mlperf51-dsr1-b200")].reset_index(drop=True)
    inputs = row_inputs(rows, prefill="isl")
    isl, osl, cv = (rows[c].to_numpy(float) for c in ("isl", "osl", "osl_cv"))
    np.testing.assert_array_equal(inputs.context_tokens, isl)  # the prompt: no cached prefix
    np.testing.assert_allclose(inputs.workload.decode_context_tokens, in_flight_context(isl, osl, cv))
    assert (inputs.hit_rate == 1.0).all() and (inputs.workload.delta_tokens == isl).all()
