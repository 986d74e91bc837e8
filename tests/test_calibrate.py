"""Calibration (optax) and the opt-in terms it fits: per-step and per-request overheads and the
tensor-parallel all-reduce."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.cli import main
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.measure.calibrate import DEFAULT_FIELDS, calibrate, split_rows, train_mask
from jaxpareto.measure.validation_set import load_validation_set

CELL = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=[1, 16], think_time_s=0.0,
            context_tokens=4096, hit_rate=0.0)


def test_overheads_add_exactly():
    seed = jp.sweep(**CELL)
    more = jp.sweep(**CELL, decode_overhead_ms=3.0, ttft_overhead_ms=40.0)
    # C = 1: the batch stays 1, so TPOT and TTFT move by the overheads alone
    assert more.tpot_ms.values.ravel()[0] == pytest.approx(seed.tpot_ms.values.ravel()[0] + 3.0, rel=1e-6)
    np.testing.assert_allclose(more.ttft_ms.values, seed.ttft_ms.values + 40.0, rtol=1e-6)
    assert (more.turns_per_s.values < seed.turns_per_s.values).all()


def test_allreduce_term_matches_the_ring_formula():
    latency_us, scale = 8.0, 1.0
    one = dict(CELL, concurrency=1)
    base = jp.sweep(**one)
    ar = jp.sweep(**one, allreduce_scale=scale, allreduce_latency_us=latency_us)
    # 2 all-reduces per layer, ring 2 (G - 1) / G, 16-bit activations of hidden 8192, NVLink4 450 GB/s
    per_token_ms = scale * 2 * 80 * 2 * 7 / 8 * 8192 * 2 / 450e9 * 1e3
    fixed_ms = 2 * 80 * latency_us / 1e3
    assert ar.tpot_ms.item() == pytest.approx(base.tpot_ms.item() + fixed_ms + per_token_ms, rel=1e-5)
    assert ar.ttft_ms.item() == pytest.approx(base.ttft_ms.item() + fixed_ms + 4096 * per_token_ms, rel=1e-5)
    # one GPU has nothing to all-reduce
    single = dict(CELL, model="llama-3.1-8b", tp=1, concurrency=1)
    np.testing.assert_array_equal(jp.sweep(**single, allreduce_scale=1.0, allreduce_latency_us=50.0).tpot_ms,
                                  jp.sweep(**single).tpot_ms)
    # the exact solver's linear pieces carry the terms too
    kwargs = dict(CELL, concurrency=[1, 8, 64, 512], decode_overhead_ms=2.0, allreduce_scale=1.0,
                  allreduce_latency_us=latency_us)
    np.testing.assert_allclose(jp.sweep(**kwargs, solver="exact").latency_ms, jp.sweep(**kwargs).latency_ms,
                               rtol=1e-5)


def test_split_is_stratified_and_seeded():
    rows = load_validation_set()
    test = split_rows(rows, 0.3, seed=0)
    np.testing.assert_array_equal(test, split_rows(rows, 0.3, seed=0))
    assert not np.array_equal(test, split_rows(rows, 0.3, seed=1))
    for _, group in rows.assign(test=test).groupby(["source", "metric"]):
        if len(group) >= 2:
            assert 0 < group["test"].sum() < len(group)
    assert 0.2 < test.mean() < 0.4


@pytest.fixture(scope="module")
def fitted():
    # 50 steps bring the training loss to 0.82 of its start (0.85 after 26; each step ~0.4 s)
    return calibrate(options=ModelOptions(), steps=50, learning_rate=0.1)


def test_calibration_lowers_training_error_and_not_held_out_error(fitted):
    assert fitted.loss[-1] < 0.85 * fitted.loss[0]
    summary = fitted.summary().set_index(["split", "metric"])
    assert summary.loc[("train", "all"), "after"] < summary.loc[("train", "all"), "before"]
    assert summary.loc[("test", "all"), "after"] <= summary.loc[("test", "all"), "before"]
    # the fitted factors are valid and the unfitted one kept
    assert 0 < fitted.efficiency.eta_decode <= 1 and fitted.efficiency.elementwise_overhead == 1.10
    assert set(fitted.fields) == set(DEFAULT_FIELDS)


def test_calibration_file_round_trips_into_sweep(fitted, tmp_path):
    path = tmp_path / "calibration.toml"
    path.write_text(fitted.to_toml())
    ds = jp.sweep(**CELL, calibration=path)
    for field in DEFAULT_FIELDS:
        assert ds.attrs[field] == pytest.approx(getattr(fitted.efficiency, field), rel=1e-5)
    assert jp.validate(efficiency=jp.Efficiency(**{f: ds.attrs[f] for f in DEFAULT_FIELDS})).shape[0] == 106


@pytest.mark.slow
def test_calibrate_cli(tmp_path, capsys):
    out = tmp_path / "cal.toml"
    args = ["calibrate", "--out", str(out), "--steps", "20", "--prefill-model", "isolated"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "MAPE (%) before and after" in printed and out.exists()
    assert main(args) == 2  # refuses to overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert main(["calibrate", "--out", str(tmp_path / "x.toml"), "--fit", "eta_decod"]) == 2
    assert "cannot fit 'eta_decod'" in capsys.readouterr().err
    assert main(["calibrate", "--out", str(tmp_path / "x.toml"), "--fit", " , "]) == 2  # had fitted the default set
    assert "--fit: names no field" in capsys.readouterr().err
    assert main(["sweep", "--calibration", str(out), "--variables", "tpot_ms"]) == 0


def test_split_holds_out_nothing_at_0_and_never_a_lone_row():
    rows = load_validation_set()
    assert not split_rows(rows, 0.0).any()  # 0 holds out nothing
    assert not split_rows(rows, 0.9)[rows["metric"].eq("kv_capacity_tokens").to_numpy()].any()  # a lone row trains


def test_a_factor_named_twice_is_refused():
    with pytest.raises(jp.JaxparetoError, match="each factor once"):
        calibrate(fields=("eta_decode", "eta_decode"), steps=1)


def test_cli_checks_out_before_the_fit(tmp_path, capsys):
    assert main(["calibrate", "--out", str(tmp_path / "missing" / "c.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_calibration_file_carries_the_model_it_was_fitted_with(tmp_path, capsys):
    # a sweep adopts it, and refuses another; validate adopts it too
    shared = tmp_path / "shared.toml"
    shared.write_text('[efficiency]\neta_decode = 0.8\n\n[model]\nprefill_model = "shared"\n')
    ds = jp.sweep(**CELL, calibration=shared)
    assert ds.attrs["prefill_model"] == "shared" and ds.attrs["calibration"] == str(shared)
    isolated = tmp_path / "isolated.toml"
    isolated.write_text('[efficiency]\neta_decode = 0.8\n\n[model]\nprefill_model = "isolated"\n')
    with pytest.raises(jp.JaxparetoError, match="prefill_model"):
        jp.sweep(**CELL, calibration=isolated, prefill_model="shared")
    assert main(["validate", "--calibration", str(shared)]) == 0
    assert "prefill_model: shared" in capsys.readouterr().out


def test_spec_names_its_calibration_relative_to_itself_and_sessions_apply_it(tmp_path, capsys):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "cal.toml").write_text("[efficiency]\neta_decode = 0.2\n")
    (folder / "s.toml").write_text(
        '[grid]\ngpu = "h100-sxm"\nmodel = "llama-3.1-70b"\ntp = [8]\nconcurrency = [1, 16]\n'
        'think_time_s = [15.0]\nhit_rate = [0.98]\n\n[efficiency]\ncalibration = "cal.toml"\n\n'
        '[session]\ninitial_context_tokens = 4096\nturns = 3\ntool_tokens = 1000\n')
    assert main(["sweep", str(folder / "s.toml")]) == 0
    slow = capsys.readouterr().out
    (folder / "s.toml").write_text((folder / "s.toml").read_text().replace('calibration = "cal.toml"\n', ""))
    assert main(["sweep", str(folder / "s.toml")]) == 0
    assert capsys.readouterr().out != slow  # eta_decode 0.2 slowed every turn
    assert main(["sweep", str(folder / "s.toml"), "--calibration", str(tmp_path / "nope.toml")]) == 2


def test_a_fit_on_every_row_writes_its_file_and_a_fit_of_nothing_is_refused(tmp_path, capsys):
    """test_fraction 0 (every row trains) had ended in a KeyError after the fit, writing no file;
    training rows that inform no factor (the KV-capacity row) had "fitted" the starting values
    and written them as factors."""
    rows = load_validation_set()
    few = rows[rows["source"].str.startswith("vLLM")].reset_index(drop=True)
    csv = tmp_path / "few.csv"
    few.drop(columns=[c for c in ("unsupported",) if c in few]).to_csv(csv, index=False)
    out = tmp_path / "all.toml"
    assert main(["calibrate", "--data", str(csv), "--test-fraction", "0", "--steps", "2", "--prefill-model",
                 "isolated", "--out", str(out)]) == 0
    text = out.read_text()
    assert "test_rows = 0" in text and "train_all_mape_pct" in text and "test_all" not in text
    with pytest.raises(jp.JaxparetoError, match="nothing to fit"):
        calibrate(train={"metric": ["kv_capacity_tokens"]}, steps=1, options=ModelOptions())


def test_an_engine_whose_training_rows_the_model_cannot_express_gets_no_factors(tmp_path):
    """Per engine, an engine's training rows must include one the model expresses: TensorRT-LLM
    training rows all of an unsupported layout had left its factors at the start's and scored its
    held-out rows with them (or written them to the file as fitted)."""
    runs = load_validation_set(Path(jp.__file__).parent / "data" / "aiconfigurator_silicon.csv")
    ok = runs["unsupported"].eq("") & runs["metric"].eq("tpot_ms")
    picks = {name: runs[ok & runs["engine"].eq(name)].head(4) for name in ("vllm", "sglang", "trtllm")}
    unsupported = runs[runs["unsupported"].ne("") & runs["engine"].eq("trtllm") & runs["metric"].eq("tpot_ms")].head(2)
    assert len(unsupported) == 2 and all(len(p) == 4 for p in picks.values())
    train = [*picks["vllm"]["id"], *picks["sglang"]["id"], *unsupported["id"]]
    options = ModelOptions()
    rows = pd.concat([picks["vllm"], picks["sglang"], unsupported, picks["trtllm"]])  # as load_validation_set gives
    with pytest.raises(jp.JaxparetoError, match=r"held-out rows of engines \['trtllm'\] have no training rows"):
        calibrate(rows.reset_index(drop=True), train={"id": train}, steps=1, options=options)
    result = calibrate(rows[~rows["id"].isin(picks["trtllm"]["id"])].reset_index(drop=True), train={"id": train},
                       steps=1, options=options)
    assert set(result.efficiency) == {"vllm", "sglang"} and "[engine.trtllm]" not in result.to_toml()


def test_a_bound_is_hit_only_where_the_fit_pushed_against_it():
    from jaxpareto.measure.calibrate import CalibrationResult, at_bounds

    start = jp.Efficiency()  # the seed's: its off terms (0) start at 5 % of their ranges
    fitted = jp.Efficiency(eta_prefill=0.99, eta_decode=0.6, decode_overhead_ms=0.1, ttft_overhead_ms=19.0,
                           allreduce_latency_us=48.5)
    fields = ("eta_prefill", "eta_decode", "decode_overhead_ms", "ttft_overhead_ms", "allreduce_latency_us")
    result = CalibrationResult(fitted, start, fields, *([None] * 6))
    assert at_bounds(result) == [
        "eta_prefill = 0.99 is at its upper bound 1",  # from 0.65 to within 1 % of 1
        "decode_overhead_ms = 0.1 is at its lower bound 0",  # from 1 ms (5 % of 0-20) to 0.1
        "allreduce_latency_us = 48.5 is at its upper bound 50",  # from 2.5 µs to 48.5
    ]  # a 19 ms TTFT overhead, started at 25 ms of 0-500, is a fitted value, not a bound
    # a factor started at a bound and kept there is at it (η_p from 1.0 to 0.9999995)
    kept = CalibrationResult(jp.Efficiency(eta_prefill=0.9999995), jp.Efficiency(eta_prefill=1.0),
                             ("eta_prefill",), *([None] * 6))
    assert at_bounds(kept) == ["eta_prefill = 1 is at its upper bound 1"]


@pytest.mark.parametrize("train, says", [
    ("gpu=h100-sxm,tp=1", "separate filters with ';'"),  # a comma where ';' joins two filters
    ("gpu=h100-sxm;gpu=h200-sxm", "gpu is given twice"),
    ("gpu=h100-sxm,h200sxm", "no row has gpu = 'h200sxm'"),  # a typo had dropped the rows meant silently
    ("gpu", "is not COLUMN=V1,V2"),
    (";", "names no filter"),
])
def test_a_malformed_or_mistyped_train_filter_is_refused(train, says):
    rows = load_validation_set()
    with pytest.raises(JaxparetoError, match=re.escape(says)) as error:
        train_mask(rows, train)
    assert error.value.field == "train"


def test_an_empty_train_option_is_refused_not_taken_for_a_random_split(tmp_path, capsys):
    code = main(["calibrate", "--train", " ", "--steps", "1", "--out", str(tmp_path / "c.toml")])
    assert code == 2 and "--train: is empty" in capsys.readouterr().err
    assert not (tmp_path / "c.toml").exists()



def test_a_factor_no_training_row_moves_keeps_its_start_and_is_named():
    """A run on one GPU has no all-reduce: the fit cannot inform `allreduce_scale`, which keeps
    its start (0), not the nudge a term at 0 starts the fit from, and is reported, not written as
    a fitted value nor flagged as a bound hit."""
    from jaxpareto.measure.calibrate import at_bounds
    from jaxpareto.measure.validation_set import default_path

    rows = load_validation_set(default_path().with_name("aiconfigurator_silicon.csv"))
    one_gpu = rows[rows["engine"].eq("vllm") & rows["tp"].eq(1) & rows["model"].eq("llama-3.1-8b")]
    result = calibrate(one_gpu.head(2), fields=("eta_decode", "allreduce_scale"), options=ModelOptions(),
                       train={"gpu": ["h200-sxm"]}, steps=2)
    assert result.uninformed == ("allreduce_scale",)
    assert result.efficiency.allreduce_scale == 0.0 and result.efficiency.eta_decode != 0.4  # the other moved
    assert "allreduce_scale = 0\n" in result.to_toml() and not at_bounds(result)
