"""Calibration on named training rows only, per engine, and `validate --out`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.cli import main
from jaxpareto.definitions.calibration_file import calibration_factors, calibration_options, shipped_calibrations
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency
from jaxpareto.measure.calibrate import calibrate, train_mask
from jaxpareto.measure.validation_set import COLUMNS, default_path, load_validation_set

MEASURED = ModelOptions(profile="measured")  # isolated prefill: the partition is the same, the compile shorter
FIELDS = ("eta_prefill", "eta_decode", "ttft_overhead_ms")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A few runs of Llama-3.1-8B and Qwen3-32B on Hopper and Blackwell, two engines, plus one
    run of an unsupported layout, as a validation CSV."""
    rows = pd.read_csv(default_path().with_name("aiconfigurator_silicon.csv"), dtype=str, keep_default_na=False)
    keep = rows["model"].isin(["llama-3.1-8b", "qwen3-32b"]) & rows["engine"].isin(["vllm", "trtllm"]) \
        & rows["mode"].isin(["", "agg"]) & rows["attention_dp"].isin(["", "1"])
    picked = []
    for _, group in rows[keep].groupby(["gpu", "engine"], sort=True):
        picked.append(group.sort_values("id").head(4))  # two runs (TTFT and TPOT rows each)
    unsupported = rows[rows["mode"].eq("disagg")].sort_values("id").head(2)
    frame = pd.concat([*picked, unsupported])
    path = tmp_path_factory.mktemp("data") / "small.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def fitted(small):
    """One per-engine fit on the Hopper rows (compiling a fit dominates these tests' time)."""
    return calibrate(load_validation_set(small), fields=FIELDS, options=MEASURED, train="gpu=h100-sxm,h200-sxm",
                     steps=3)


def test_train_filter_selects_and_names_bad_columns(small):
    rows = load_validation_set(small)
    mask = train_mask(rows, "gpu=h100-sxm,h200-sxm")
    assert set(rows.loc[mask, "gpu"]) <= {"h100-sxm", "h200-sxm"}
    assert set(rows.loc[~mask, "gpu"]).isdisjoint({"h100-sxm", "h200-sxm"})
    assert (train_mask(rows, {"gpu": ["h100-sxm"], "engine": ["vllm"]}) ==
            (rows["gpu"].eq("h100-sxm") & rows["engine"].eq("vllm")).to_numpy()).all()
    with pytest.raises(JaxparetoError, match="gpus"):
        train_mask(rows, "gpus=h100-sxm")
    with pytest.raises(JaxparetoError, match="no row has gpu = 'mi300x'"):  # a value no row has
        train_mask(rows, "gpu=mi300x")
    pair = rows[["gpu", "engine"]].drop_duplicates()
    absent = next((g, e) for g in rows["gpu"].unique() for e in rows["engine"].unique()
                  if not ((pair["gpu"] == g) & (pair["engine"] == e)).any())
    with pytest.raises(JaxparetoError, match="no row matches"):  # values each some row has, never together
        train_mask(rows, {"gpu": [absent[0]], "engine": [absent[1]]})


def test_a_poisoned_test_row_cannot_change_the_fit(small, fitted):
    rows, fit = load_validation_set(small), fitted
    assert fit.test.sum() > 0 and (~fit.test).sum() > 0
    poisoned = rows.copy()
    blackwell = np.flatnonzero(fit.test & poisoned["unsupported"].eq("").to_numpy())
    poisoned.loc[blackwell, "value"] = poisoned.loc[blackwell, "value"] * 1000.0
    again = calibrate(poisoned, fields=FIELDS, options=MEASURED, train="gpu=h100-sxm,h200-sxm", steps=3)
    assert set(fit.efficiency) == {"trtllm", "vllm"}  # fitted per engine
    for engine, efficiency in fit.efficiency.items():
        assert dataclasses.asdict(again.efficiency[engine]) == dataclasses.asdict(efficiency)
    np.testing.assert_array_equal(fit.loss, again.loss)
    # but the held-out errors do see the poison
    test_after = fit.after[fit.after["split"].eq("test")]["rel_error"].abs().mean()
    assert again.after[again.after["split"].eq("test")]["rel_error"].abs().mean() != test_after


def test_the_calibration_file_holds_each_engine_and_is_adopted(small, fitted, tmp_path):
    rows, fit = load_validation_set(small), fitted
    path = tmp_path / "cal.toml"
    path.write_text(fit.to_toml())
    assert calibration_options(path) == {"prefill_model": "isolated", "profile": "measured", "gemm_rate": "peak",
                                         "attention": "profile", "roofline": "step"}
    factors = calibration_factors(path, ["vllm", "trtllm", "sglang"])
    for engine in ("vllm", "trtllm"):
        for field in FIELDS:
            assert getattr(factors[engine], field) == pytest.approx(getattr(fit.efficiency[engine], field), rel=1e-5)
    assert factors["sglang"] == Efficiency()  # no table of its own: the file's [efficiency] (the start)
    plan = jp.plan_sweep(gpu="h100-sxm", model="llama-3.1-8b", engine=["vllm", "trtllm"], tp=1, concurrency=8,
                         calibration=path)
    assert plan.options.profile == "measured" and plan.options.prefill_model == "isolated"
    vllm = next(e for e in plan.definitions["engine"] if e.name == "vllm")
    assert vllm.efficiency["eta_decode"] == pytest.approx(fit.efficiency["vllm"].eta_decode, rel=1e-5)
    assert vllm.gpu_memory_utilization == 0.9  # the engine's own settings stay
    with pytest.raises(JaxparetoError, match="eta_bogus"):
        calibrate(rows, fields=("eta_bogus",))


def test_the_shipped_hopper_calibration_is_measured_and_per_engine():
    assert "hopper-measured" in shipped_calibrations()
    assert calibration_options("hopper-measured")["profile"] == "measured"
    factors = calibration_factors("hopper-measured", ["vllm", "sglang", "trtllm"])
    assert len({f.eta_decode for f in factors.values()}) == 3  # one set per engine


def test_validate_out_writes_every_row_with_its_prediction(small, fitted, tmp_path, capsys):
    cal = tmp_path / "cal.toml"
    cal.write_text(fitted.to_toml())
    out = tmp_path / "predictions.csv"
    assert main(["validate", "--data", str(small), "--calibration", str(cal), "--out", str(out)]) == 0
    assert "profile: measured" in capsys.readouterr().out
    written = pd.read_csv(out, dtype=str, keep_default_na=False)
    given = pd.read_csv(small, dtype=str, keep_default_na=False)
    assert list(written.columns) == [*COLUMNS, "predicted", "error_pct", "reason"]
    assert len(written) == len(given)
    again = tmp_path / "again.csv"
    written[list(COLUMNS)].to_csv(again, index=False)  # the input columns load back to the same rows
    pd.testing.assert_frame_equal(load_validation_set(again), load_validation_set(small))
    predicted = written["predicted"].replace("", "nan").astype(float)
    disagg = written["mode"].eq("disagg")
    assert predicted[disagg].isna().all()
    assert written.loc[disagg, "reason"].str.startswith("unsupported: disaggregated").all()
    assert predicted[~disagg].notna().all() and written.loc[~disagg, "reason"].eq("").all()
    before = out.read_text()
    assert main(["validate", "--data", str(small), "--out", str(out)]) == 2  # kept unless --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert out.read_text() == before
    assert main(["validate", "--data", str(small), "--csv", str(out)]) == 2  # --csv is the same option
    assert "--csv" in capsys.readouterr().err


def test_validate_says_which_engines_a_per_engine_calibration_has_no_factors_for(tmp_path, capsys):
    """A per-engine fit's [efficiency] is only where it started: rows of an engine it has no
    table for take it, and `validate` says so rather than scoring them silently."""
    rows = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    path = tmp_path / "one.csv"
    rows[rows["id"].eq("vllm-fp8kv-itl-c1-bf16-256") | rows["engine"].eq("")].head(2).to_csv(path, index=False)
    assert main(["validate", "--data", str(path), "--calibration", "hopper-measured"]) == 0
    assert "has no factors of its own for engines ['seed']" in capsys.readouterr().out
