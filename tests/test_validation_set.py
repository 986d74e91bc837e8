"""The validation set (jaxpareto/data/validation.csv) and the model's predictions of it."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from jaxpareto.cli import main
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency
from jaxpareto.definitions.calibration_file import calibration_efficiency
import jaxpareto.measure.predict as predict_module
from jaxpareto.measure.predict import BISECTION_STEPS, _jitted_predict, predict, prediction_fn
from jaxpareto.measure.validate import validate
from jaxpareto.measure.validation_set import COLUMNS, LLAMA_2_70B, default_path, load_validation_set

SOURCES = {
    "MLPerf Inference v5.1": 36,
    "MLPerf Inference v4.1": 3,
    "TensorRT-LLM perf-overview": 48,
    "vLLM blog fp8-kvcache": 14,
    "InferenceX (inference-sim)": 4,
    "vLLM KV capacity (inference-sim)": 1,
}


@pytest.fixture(scope="module")
def rows():
    return load_validation_set()


@pytest.fixture(scope="module")
def table(rows):
    return validate(rows)


def by_id(frame, row_id):
    match = frame[frame["id"] == row_id]
    assert len(match) == 1, row_id
    return match.iloc[0]


def test_csv_parses_with_every_row_sourced(rows):
    assert list(rows.columns) == [*COLUMNS, "unsupported"]
    assert rows["id"].is_unique
    assert rows["source"].str.strip().ne("").all() and rows["reference"].str.strip().ne("").all()
    assert rows.groupby("source").size().to_dict() == SOURCES
    # every MLPerf server latency carries the load it was logged at
    server = rows[rows["load"] == "server"]
    assert len(server) == 24 and (server["load_tokens_per_s"] > 0).all()
    assert set(server["metric"]) == {"ttft_ms", "tpot_ms"}


def test_llama_2_70b_definition():
    assert LLAMA_2_70B.params_total_b == pytest.approx(68.98, rel=1e-4)
    assert LLAMA_2_70B.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


def test_predictions_are_finite_for_every_row(table):
    assert np.isfinite(table["predicted"]).all()
    assert (table["predicted"] > 0).all()
    assert table["flag"].eq("").all(), table.loc[table["flag"] != "", ["id", "flag"]]


def test_concurrency_one_tpot_matches_the_seed_equations(table):
    """Llama-3.1-8B bf16 on one H100, bf16 KV, 8,192-token context, concurrency 1 (seed eq. 3)."""
    # 8.03B less the untied 128,256 x 4,096 input table, which a step only looks up
    params_b, weight_bytes, bandwidth_gbs = 8.03 - 128_256 * 4096 / 1e9, 2.0, 3350.0
    kv_bytes_per_token = 2 * 32 * 8 * 128 * 2  # 2 (K, V) x layers x KV heads x head_dim x bf16
    t_weight_ms = params_b * weight_bytes / bandwidth_gbs * 1e3
    t_kv_ms = 1 * 8192 * kv_bytes_per_token / (1 * bandwidth_gbs * 1e9) * 1e3
    t_compute_ms = 2 * params_b * 1e9 * 1 / (989e12) * 1e3
    tpot_ms = max((t_weight_ms + t_kv_ms) * 1.10, t_compute_ms) / 0.40
    row = by_id(table, "vllm-fp8kv-itl-c1-bf16-8192")
    assert row["concurrency"] == 1
    assert row["predicted"] == pytest.approx(tpot_ms, rel=1e-9)


def test_offline_throughput_matches_the_seed_equations_and_counts_every_gpu(table):
    """MLPerf v4.1 llama2-70b on a DGX H100 in 4 TP-2 groups, fp8 weights and KV, 222.3 in / 265 out,
    output lengths spread with CV 0.787: decode sees the length-biased in-flight context."""
    total_b, table_b, gpus, tp, isl, osl, osl_cv = 68.976648192, 32_000 * 8192 / 1e9, 8, 2, 222.3, 265, 0.787
    memory_gb, bandwidth_gbs, fp8_tflops = 80.0, 3350.0, 1979e12
    params_b = total_b - table_b  # active: the untied input table is looked up, not read whole
    context = isl + osl * (1 + osl_cv**2) / 2
    kv_per_token = 2 * 80 * 8 * 128 * 1  # fp8 KV
    available_gb = tp * memory_gb - (params_b * 1.0 + table_b * 2.0)  # the input table stays 16-bit
    sessions = np.floor(available_gb / (context * kv_per_token / 1e9))  # r_kv = 1 at TP 2
    ttft_ms = 2 * params_b * 1e9 * isl / (tp * fp8_tflops) * 1e3 / 0.65
    memory_ms = (params_b * 1.0 / (tp * bandwidth_gbs) * 1e3
                 + sessions * context * kv_per_token / (tp * bandwidth_gbs * 1e9) * 1e3) * 1.10
    compute_ms = 2 * params_b * 1e9 * sessions / (tp * fp8_tflops) * 1e3
    tpot_ms = max(memory_ms, compute_ms) / 0.40
    per_group = sessions * osl / ((ttft_ms + osl * tpot_ms) / 1e3)
    row = by_id(table, "mlperf41-llama2-dgxh100-offline")
    assert row["concurrency"] == sessions
    assert row["predicted"] == pytest.approx(per_group * gpus / tp, rel=1e-9)


def _matched_loads(rows) -> pd.Series:
    """What each server row is matched to, whole system [tokens/s], by row id: its measured share
    of the system's offline capacity, times the model's offline throughput of that system under
    the server row's own settings (its scheduler delay may differ from the offline row's)."""
    server = rows[rows["load"].eq("server")]
    as_offline = server.assign(load="offline", metric="output_tokens_per_s_total", unit="tokens/s",
                               load_tokens_per_s=np.nan, capacity_tokens_per_s=np.nan, arrival_cv=np.nan)
    share = server["load_tokens_per_s"] / server["capacity_tokens_per_s"]
    return pd.Series(share.to_numpy() * predict(as_offline), index=server["id"].to_numpy())


def _at_continuous_concurrency(frame):
    """Predictions of rows at a concurrency a file could not give (the matched C, not a whole
    number): the `Predictor` without the rows' checks."""
    with jax.enable_x64(True):
        return np.asarray(predict_module.Predictor(frame.reset_index(drop=True))(Efficiency()))


def test_server_rows_match_their_share_of_capacity_by_littles_law(rows, table):
    server = rows["load"].eq("server").to_numpy()
    assert rows.loc[server, "capacity_tokens_per_s"].notna().all()
    matched_loads = _matched_loads(rows)
    # C = (requests/s per group) x R with R = TTFT + OSL x TPOT, both predicted at that C
    for key in ("mlperf51-llama2-b200-nvidia", "mlperf51-l405-h100-cisco", "mlperf51-dsr1-gb200nvl72-nvidia",
                "mlperf51-llama2int-b200-nvidia"):
        ttft, tpot = by_id(table, f"{key}-server-ttft"), by_id(table, f"{key}-server-tpot")
        row = by_id(rows, f"{key}-server-ttft")
        # replicas (DeepSeek-R1: 8 attention-DP ranks; a pipeline's stages hold one replica)
        groups = row["gpus"] / (row["tp"] * row["attention_dp"] * row["pp"])
        latency_s = (ttft["predicted"] + row["osl"] * tpot["predicted"]) / 1e3
        requests_per_s = matched_loads[f"{key}-server-ttft"] / groups / row["osl"]
        assert ttft["concurrency"] == pytest.approx(requests_per_s * latency_s, rel=1e-9)
    # the same rows evaluated at the matched C as concurrency rows serve that load
    at_c = rows.copy()
    at_c.loc[server, "load"] = "concurrency"
    at_c.loc[server, "concurrency"] = table.loc[server, "concurrency"].to_numpy()
    at_c.loc[server, "metric"] = "output_tokens_per_s_total"
    at_c.loc[server, "unit"] = "tokens/s"
    at_c.loc[server, ["load_tokens_per_s", "capacity_tokens_per_s", "arrival_cv"]] = np.nan  # a server row's
    served = _at_continuous_concurrency(at_c)[server]
    np.testing.assert_allclose(served, matched_loads[rows.loc[server, "id"]].to_numpy(), rtol=1e-9)
    # without a measured capacity, a row is matched to its absolute load where the model reaches it
    # (a load beyond the model's capacity is flagged, not matched)
    absolute = rows.copy()
    absolute["capacity_tokens_per_s"] = np.nan
    matched = validate(absolute)
    at_c["concurrency"] = np.where(server, matched["concurrency"], at_c["concurrency"])
    reached = server & matched["flag"].eq("").to_numpy()
    assert reached.any()
    assert matched.loc[server & ~reached, "flag"].str.startswith("unreachable").all()
    np.testing.assert_allclose(_at_continuous_concurrency(at_c)[reached], rows.loc[reached, "load_tokens_per_s"],
                               rtol=1e-9)


def test_a_load_beyond_the_model_is_flagged_not_scored(rows):
    heavy = rows.copy()
    index = heavy.index[heavy["id"] == "mlperf51-llama2-h200-nebius-server-tpot"][0]
    heavy.loc[index, "load_tokens_per_s"] = 1e7
    heavy.loc[index, "capacity_tokens_per_s"] = np.nan  # matched to the absolute load
    light = heavy.copy()
    light.loc[index, "load_tokens_per_s"] = 10.0  # below one session's: not "at most" the capacity
    light.loc[index, "id"] = "light"
    result = validate(pd.concat([heavy, light.loc[[index]]], ignore_index=True))
    assert result.loc[index, "flag"].startswith("unreachable: model serves at most")
    assert result.iloc[-1]["flag"] == "unreachable: below what one session per replica serves"
    summary = result.attrs["mape"].set_index(["group", "name"])
    assert summary.loc[("metric", "tpot_ms"), "flagged"] == 2
    assert summary.loc[("all", "all"), "rows"] == len(rows) - 1  # of len(rows) + 1, both flagged left out


@pytest.mark.slow
def test_gradient_wrt_eta_decode_matches_central_difference(rows):
    f = prediction_fn(rows)
    measured = rows["value"].to_numpy()
    with jax.enable_x64(True):
        def loss(efficiency):
            return jnp.sum(jnp.log(f(efficiency) / measured) ** 2)

        grads = jax.grad(loss)(Efficiency())
        h = 1e-6
        base = Efficiency()
        plus = loss(dataclasses.replace(base, eta_decode=base.eta_decode + h))
        minus = loss(dataclasses.replace(base, eta_decode=base.eta_decode - h))
        central = float((plus - minus) / (2 * h))
    assert all(np.isfinite(float(g)) for g in jax.tree_util.tree_leaves(grads))
    assert float(grads.eta_decode) == pytest.approx(central, rel=1e-6)
    # the server rows' C moves with eta_decode: their TPOT derivative is the implicit one
    server_tpot = np.flatnonzero((rows["load"].eq("server") & rows["metric"].eq("tpot_ms")).to_numpy())
    with jax.enable_x64(True):
        jac = np.asarray(jax.jacfwd(lambda x: f(dataclasses.replace(Efficiency(), eta_decode=x)))(0.4))
        fd = (np.asarray(f(dataclasses.replace(Efficiency(), eta_decode=0.4 + h)))
              - np.asarray(f(dataclasses.replace(Efficiency(), eta_decode=0.4 - h)))) / (2 * h)
    np.testing.assert_allclose(jac[server_tpot], fd[server_tpot], rtol=1e-6)


def test_a_rows_gradient_stays_finite_where_its_capacity_evaluation_does_not_settle():
    """A concurrency row's factors carry no derivative into the model's capacity, which only the
    server rows use: Llama-3.1-8B (FP8) on four H200s, 128 sessions of 2,000 + 100 tokens
    (AIConfigurator's vLLM run), whose capacity at the 3,996 sessions KV memory holds had put NaN
    in every factor's gradient under the shared prefill engine (and the fit's factors with it)."""
    silicon = load_validation_set(default_path().with_name("aiconfigurator_silicon.csv"))
    run = silicon[silicon["id"].str.contains("h200_sxm_vllm_agg_2000x100_c128_tp4_epnone_4")].reset_index(drop=True)
    assert len(run) == 2
    f = prediction_fn(run, options=ModelOptions(prefill_model="shared"))
    with jax.enable_x64(True):
        def total(eta_prefill):
            return jnp.sum(f(dataclasses.replace(Efficiency(), eta_prefill=eta_prefill)))

        grad = float(jax.grad(total)(0.65))
        h = 1e-4
        central = float((total(0.65 + h) - total(0.65 - h)) / (2 * h))
    assert np.isfinite(grad) and grad == pytest.approx(central, rel=1e-2)


def test_a_dataframe_is_checked_as_a_file_is(rows):
    """`validate` and `prediction_fn` check a DataFrame's rows as `load_validation_set` checks a
    file's: an edited row is refused by name, not scored against a negative measurement."""
    from jaxpareto.measure.validation_set import check_validation_set

    pd.testing.assert_frame_equal(check_validation_set(rows), rows)  # as loaded, unchanged
    edited = rows.copy()
    edited.loc[0, "value"] = -5.0
    with pytest.raises(JaxparetoError, match=r"'mlperf51-llama2-b200-nvidia-offline' \(line 2\)\.value"):
        validate(edited)
    edited = rows.copy()
    edited.loc[3, "gpu"] = "h100"
    with pytest.raises(JaxparetoError, match="unknown GPU 'h100'"):
        prediction_fn(edited)


def test_float32_agrees_with_float64_and_does_not_recompile(rows, table, monkeypatch):
    # a worker near its memory-mapping cap drops every compiled program when a Predictor is
    # built (`release_programs_near_map_limit`): held off here, where the compiled one is counted
    monkeypatch.setattr(predict_module, "release_programs_near_map_limit", lambda *args, **kwargs: False)
    single = predict(rows, dtype="float32")
    np.testing.assert_allclose(single, table["predicted"], rtol=1e-4)
    jitted = _jitted_predict(ModelOptions(), BISECTION_STEPS)
    compiled = jitted._cache_size()
    # a new Predictor with other efficiencies reuses the compiled program
    again = prediction_fn(rows, dtype="float32")(Efficiency(eta_decode=0.5))
    assert jitted._cache_size() == compiled
    assert not np.allclose(np.asarray(again), single)  # TPOT rows moved with eta_decode


def test_float64_prediction_needs_x64(rows):
    with pytest.raises(JaxparetoError, match="enable_x64"):
        prediction_fn(rows)(Efficiency())


def test_cli_prints_mape_per_source_and_metric(capsys):
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "MAPE per source" in out and "MAPE per metric" in out
    for name in (*SOURCES, "output_tokens_per_s_total", "ttft_ms", "tpot_ms", "itl_ms", "kv_capacity_tokens"):
        assert name in out


def test_calibration_file_sets_the_efficiency(capsys, tmp_path):
    calibration = tmp_path / "cal.toml"
    calibration.write_text("[efficiency]\neta_decode = 0.8\n\n[fit]\nrows = 106\n")  # other tables are ignored
    assert calibration_efficiency(calibration) == Efficiency(eta_decode=0.8)
    assert main(["validate", "--calibration", str(calibration)]) == 0
    assert "cal.toml" in capsys.readouterr().out


def test_calibration_with_unknown_field_is_refused(capsys, tmp_path):
    calibration = tmp_path / "bad.toml"
    calibration.write_text("[efficiency]\neta_decod = 0.8\n")
    with pytest.raises(JaxparetoError, match="eta_decod.*allowed: eta_prefill, eta_decode"):
        calibration_efficiency(calibration)
    assert main(["validate", "--calibration", str(calibration)]) == 2
    assert "calibration.efficiency.eta_decod: unknown field" in capsys.readouterr().err


def test_calibration_with_a_value_out_of_bounds_is_refused(tmp_path):
    calibration = tmp_path / "bad.toml"
    calibration.write_text("[efficiency]\neta_decode = 1.5\n")
    with pytest.raises(JaxparetoError, match="eta_decode"):
        calibration_efficiency(calibration)


@pytest.mark.parametrize(("row_id", "changes", "where", "match"), [
    # each had been accepted and scored: 8 / 3 replicas, half a token, a fraction of a request
    ("mlperf51-l405-h100-cisco-server-tpot", {"pp": "3"}, "gpus", "do not split into replicas of 24"),
    ("mlperf51-l405-h100-cisco-server-tpot", {"osl": "0.5"}, "osl", "at least one token"),
    ("vllm-fp8kv-c8-bf16-ttft", {"context_tokens": "100"}, "context_tokens", "holds the prompt"),
    ("vllm-fp8kv-c8-bf16-ttft", {"concurrency": "2.5"}, "concurrency", "a whole number >= 1"),
    ("vllm-fp8kv-c8-bf16-ttft", {"scheduler_delay_steps": "1e300"}, "scheduler_delay_steps", r"in \[0, 1000\]"),
])
def test_a_row_that_no_run_could_be_is_refused(tmp_path, row_id, changes, where, match):
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    for field, value in changes.items():
        raw.loc[raw["id"] == row_id, field] = value
    raw.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(JaxparetoError, match=match) as error:
        load_validation_set(tmp_path / "bad.csv")
    assert f"validation row {row_id!r}" in str(error.value) and f".{where}" in str(error.value)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("source", "", "source: is empty"),
    ("reference", " ", "reference: is empty"),
    ("gpu", "h999", "unknown GPU"),
    ("value", "-3", "value: must be a finite number > 0"),
    ("unit", "s", "measured in ms"),
    ("metric", "latency_ms", "unknown value 'latency_ms'"),
    ("load_tokens_per_s", "", "required for"),
    ("tp", "3", "do not split into TP groups"),
])
def test_a_row_with_a_bad_field_is_refused(tmp_path, field, value, match):
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    row_id = "mlperf51-l405-h100-cisco-server-tpot"
    raw.loc[raw["id"] == row_id, field] = value
    path = tmp_path / "bad.csv"
    raw.to_csv(path, index=False)
    with pytest.raises(JaxparetoError) as error:
        load_validation_set(path)
    message = str(error.value)
    assert f"validation row {row_id!r}" in message and f".{field}" in message
    assert match in message


def test_missing_column_is_refused(tmp_path):
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False).drop(columns="reference")
    path = tmp_path / "bad.csv"
    raw.to_csv(path, index=False)
    with pytest.raises(JaxparetoError, match="missing \\['reference'\\]"):
        load_validation_set(path)
    # a file separated by semicolons, or names padded with spaces, is told so
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    raw.to_csv(path, index=False, sep=";")
    with pytest.raises(JaxparetoError, match="its header holds ';': the file must be comma-separated"):
        load_validation_set(path)
    raw.rename(columns={"source": " source"}).to_csv(path, index=False)
    with pytest.raises(JaxparetoError, match=r"names with spaces around them: \[' source'\]"):
        load_validation_set(path)
