"""Benchmark-log metrics (jaxpareto.metrics): seed 002's definitions, vLLM's names and files, the CLI.

Fixtures in tests/fixtures/metrics: ``seed002_appendix_a.csv`` is seed 002 appendix A's three
samples; ``vllm_serve_result.json`` follows the result layout of vllm-project/vllm
``vllm/benchmarks/serve.py`` (--save-result --save-detailed, --percentile-metrics ttft,tpot,itl,e2el,
--metric-percentiles 50,99, --goodput ttft:300 tpot:50), its summary keys computed by a transcription
of vLLM's ``calculate_metrics``; ``guidellm_report.json`` follows vllm-project/guidellm's
``GenerativeBenchmarksReport`` with ``info.timings`` per request (seed 002's samples at Unix times).
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import jaxpareto as jp
from jaxpareto.cli import main
from jaxpareto.metrics import percentile, read_records

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "metrics"
SEED = FIXTURES / "seed002_appendix_a.csv"
VLLM = FIXTURES / "vllm_serve_result.json"
GUIDELLM = FIXTURES / "guidellm_report.json"


def seed_percentile(values, q):
    """Seed 002 appendix A's percentile (q in 0..1), transcribed as the independent reference."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def records(**columns):
    return pd.DataFrame(columns)


def test_seed_002_appendix_example():
    # section 3: TPOT = (5.75 - 0.8) / 99 = 0.05 s; appendix A: success rate 2/3, median TPOT 0.05 s,
    # goodput (success and TTFT <= 2 s) = 2 requests over the 8 s from first start to last end
    ds = jp.metrics(SEED, slo={"ttft_ms": 2000})
    assert ds.median_tpot_ms == pytest.approx(50) and ds.mean_tpot_ms == pytest.approx(50)
    assert ds.success_rate == pytest.approx(2 / 3)
    assert (int(ds.completed), int(ds.failed)) == (2, 1)
    assert ds.duration_s == 8.0 and ds.request_throughput == pytest.approx(0.25)
    assert ds.goodput == pytest.approx(0.25) and ds.request_goodput == ds.goodput
    assert ds.p95_ttft_ms == pytest.approx(1000 * seed_percentile([0.8, 1.0], 0.95))  # 990 ms
    assert ds.p95_e2el_ms == pytest.approx(1000 * seed_percentile([5.75, 6.0], 0.95))  # 5987.5 ms
    assert ds.output_throughput == pytest.approx(201 / 8)
    assert np.isnan(ds.mean_itl_ms) and "not reported" in ds.attrs["itl_source"]  # no token times: no ITL
    assert np.isnan(ds.timeout_rate) and np.isnan(ds.total_token_throughput)  # no timeout / input columns
    assert np.isnan(jp.metrics(SEED).goodput)  # no SLO, no goodput (vLLM writes null)


def test_seed_appendix_percentile_is_linear_default():
    assert percentile([1, 2, 3, 4, 5], 50) == pytest.approx(3)  # appendix A's own asserts
    assert percentile([1, 2, 3, 4, 5], 95) == pytest.approx(4.8)
    assert jp.metrics(SEED).attrs["percentile_method"] == "linear"


def test_nearest_rank_p99():
    assert percentile([10, 20, 30], 99, "nearest_rank") == 30
    assert percentile([10, 20, 30], 99, "linear") == pytest.approx(29.8)
    ttft = records(start=[0.0, 0.0, 0.0], first_token=[0.010, 0.020, 0.030], end=[1.0, 1.0, 1.0],
                   output_tokens=[2, 2, 2], success=[True, True, True])
    ds = jp.metrics(ttft, percentile_method="nearest_rank", percentiles=[50, 99])
    assert ds.p99_ttft_ms == pytest.approx(30) and ds.p50_ttft_ms == pytest.approx(20)
    assert ds.attrs["percentile_method"] == "nearest_rank" and ds.attrs["percentiles"] == [50.0, 99.0]
    assert jp.metrics(ttft, percentiles=[99]).p99_ttft_ms == pytest.approx(29.8)
    # nearest rank is numpy's inverted_cdf (smallest value whose empirical CDF reaches q)
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 10, 100, 101):
        x = rng.lognormal(size=n)
        for q in (0, 1, 10, 25, 50, 70, 90, 95, 99, 99.9, 100):
            assert percentile(x, q, "nearest_rank") == np.percentile(x, q, method="inverted_cdf")


def test_linear_percentile_equals_numpy():
    x = np.random.default_rng(1).gamma(2.0, 30.0, size=257)
    for q in (0, 12.5, 50, 90, 95, 99, 99.9, 100):
        assert percentile(x, q, "linear") == np.percentile(x, q)
    start = np.zeros(x.size)
    ds = jp.metrics(records(start=start, first_token=x / 1000, end=x / 1000 + 1, output_tokens=np.full(x.size, 2),
                            success=np.ones(x.size, bool)), percentiles=[90, 99.9])
    assert ds["p99.9_ttft_ms"] == pytest.approx(np.percentile(x, 99.9))  # vLLM spells it p99.9
    assert ds.p90_ttft_ms == pytest.approx(np.percentile(x, 90))
    assert ds.std_ttft_ms == pytest.approx(np.std(x)) and ds.median_ttft_ms == pytest.approx(np.median(x))


def test_goodput_counts_only_successes_meeting_every_slo():
    # A meets everything, B misses TTFT, C misses TPOT, D meets everything but failed, E has one token
    # (no TPOT: meets a TPOT SLO, as vLLM), F sits exactly on every limit (<= passes), G misses E2EL
    df = records(start=[0, 0, 0, 0, 0, 0, 0], first_token=[0.1, 0.3, 0.1, 0.1, 0.1, 0.2, 0.1],
                 end=[1.0, 1.2, 2.1, 1.0, 0.5, 1.2, 1.5], output_tokens=[19, 19, 21, 19, 1, 21, 29],
                 success=[True, True, True, False, True, True, True])
    slo = {"ttft_ms": 200, "tpot_ms": 50, "e2el_ms": 1200}
    ds = jp.metrics(df, slo=slo)
    assert ds.duration_s == pytest.approx(2.1)
    assert ds.goodput == pytest.approx(3 / 2.1)  # A, E, F
    assert ds.request_throughput == pytest.approx(6 / 2.1)
    assert json.loads(ds.attrs["slo_ms"]) == slo
    assert jp.metrics(df, slo={"ttft_ms": 200}).goodput == pytest.approx(5 / 2.1)  # A, C, E, F, G


def test_failures_count_in_rates_not_in_latency_statistics():
    ok = records(start=[0.0, 1.0], first_token=[0.5, 1.5], end=[2.0, 3.0], output_tokens=[4, 4],
                 success=[True, True], input_tokens=[10, 10])
    failed = pd.concat([ok, records(start=[0.5], first_token=[9.0], end=[30.0], output_tokens=[50],
                                    success=[False], input_tokens=[10])], ignore_index=True)
    a, b = jp.metrics(ok), jp.metrics(failed)
    for name in a.data_vars:
        if name.endswith("_ms"):
            xr.testing.assert_identical(a[name], b[name])  # the 30 s failure is in no latency statistic
    assert (int(b.completed), int(b.failed)) == (2, 1) and b.success_rate == pytest.approx(2 / 3)
    assert a.duration_s == 3.0 and b.duration_s == 30.0  # ... but its time is in the duration
    assert b.request_throughput == pytest.approx(2 / 30) and b.output_throughput == pytest.approx(8 / 30)
    assert b.total_token_throughput == pytest.approx(28 / 30)  # its 10 input tokens are not counted either
    timed_out = failed.assign(timeout=[False, False, True])
    assert jp.metrics(timed_out).timeout_rate == pytest.approx(1 / 3)


def _table():
    return records(
        start=[10.0, 10.5, 11.0, 11.5], first_token=[10.3, 10.9, np.nan, 11.6], end=[11.0, 11.3, 12.0, 11.9],
        output_tokens=[4, 3, np.nan, 4], success=[True, True, False, True],
        token_times=[[10.3, 10.5, 10.8, 11.0], [10.9, 11.0, 11.3], None, [11.6, 11.7, 11.8, 11.9]],
        input_tokens=[100, 200, 300, 400], cached_tokens=[50, 0, 0, 100], timeout=[False, False, True, False])


def test_csv_and_jsonl_round_trip_identical(tmp_path):
    df = _table()
    csv, jsonl = tmp_path / "log.csv", tmp_path / "log.jsonl"
    df.assign(token_times=[json.dumps(t) if t else "" for t in df.token_times]).to_csv(csv, index=False)
    with jsonl.open("w") as f:
        for row in df.to_dict(orient="records"):
            f.write(json.dumps({k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}) + "\n")
    kwargs = dict(slo={"ttft_ms": 350, "tpot_ms": 250}, percentiles=[50, 90, 99])
    a, b, c = jp.metrics(csv, **kwargs), jp.metrics(jsonl, **kwargs), jp.metrics(df, **kwargs)
    assert (a.attrs.pop("format"), b.attrs.pop("format"), c.attrs.pop("format")) == ("csv", "jsonl", "dataframe")
    assert (a.attrs.pop("source"), b.attrs.pop("source")) == (str(csv), str(jsonl))
    c.attrs.pop("source")
    xr.testing.assert_identical(a, b)
    xr.testing.assert_identical(a, c)
    rec = read_records(csv)
    assert rec["start"].dtype == np.float64 and rec["success"].dtype == bool
    # ITL: the gaps of token_times, pooled over successful requests
    gaps = np.array([0.2, 0.3, 0.2, 0.1, 0.3, 0.1, 0.1, 0.1]) * 1000
    assert a.mean_itl_ms == pytest.approx(gaps.mean()) and a.p90_itl_ms == pytest.approx(np.percentile(gaps, 90))
    assert a.mean_tpot_ms == pytest.approx(np.mean([700 / 3, 400 / 2, 300 / 3]))
    assert a.timeout_rate == pytest.approx(0.25) and a.prefix_cache_hit_rate == pytest.approx(150 / 700)
    assert a.goodput == pytest.approx(2 / 2.0)  # requests 0 and 3; request 1's TTFT is 400 ms


def test_every_variable_has_units_and_long_name():
    ds = jp.metrics(_table())
    for name in ds.data_vars:
        assert ds[name].attrs["units"] and ds[name].attrs["long_name"], name
    for key in ("percentile_method", "percentiles", "slo_ms", "duration_source", "itl_source", "definitions"):
        assert key in ds.attrs, key


@pytest.mark.parametrize("change, field, message", [
    (lambda d: d.drop(columns="end"), "end", "required column is missing"),
    (lambda d: d.assign(start=["0", "x", "1", "2"]), "start", "'x' is not a finite number"),
    (lambda d: d.assign(end=[10.2, 11.3, 12.0, 11.9]), "end", "end is before first_token"),
    (lambda d: d.assign(first_token=[9.0, 10.9, np.nan, 11.6]), "first_token", "first_token is before start"),
    (lambda d: d.assign(success=["yes", True, False, True]), "success", "not true or false"),
    (lambda d: d.assign(output_tokens=[4, 2.5, 1, 4]), "output_tokens", "not a whole number"),
    (lambda d: d.assign(first_token=[np.nan, 10.9, np.nan, 11.6]), "first_token", "empty for a successful"),
    (lambda d: d.assign(start=[10.0, np.nan, 11.0, 11.5]), "start", "start is empty"),
    (lambda d: d.assign(token_times=["[1, 2", None, None, None]), "token_times", "list of finite numbers"),
    (lambda d: d.assign(token_times=[[10.3, 10.2], None, None, None]), "token_times", "must rise"),
    (lambda d: d.assign(timeout=[True, False, True, False]), "timeout", "cannot have success true"),
    (lambda d: d.assign(cached_tokens=[500, 0, 0, 0]), "cached_tokens", "exceed input_tokens"),
    (lambda d: d.assign(itl=[[0.1]] * 4), "itl", "not both"),
    (lambda d: d.iloc[:0], "records", "no requests"),
])
def test_bad_records_name_the_field(change, field, message):
    with pytest.raises(jp.JaxparetoError, match=message) as error:
        jp.metrics(change(_table()))
    assert error.value.field == field


@pytest.mark.parametrize("kwargs, field", [
    ({"slo": {"ttft": 200}}, "slo"),
    ({"slo": {"ttft_ms": -1}}, "slo.ttft_ms"),
    ({"percentiles": [50, 101]}, "percentiles"),
    ({"percentile_method": "nearest"}, "percentile_method"),
    ({"duration_s": 0}, "duration_s"),
    ({"format": "csv"}, "format"),  # a DataFrame has no file format
])
def test_bad_options_name_the_field(kwargs, field):
    with pytest.raises(jp.JaxparetoError) as error:
        jp.metrics(_table(), **kwargs)
    assert error.value.field == field


def test_vllm_result_file():
    saved = json.loads(VLLM.read_text())
    ds = jp.metrics(VLLM, slo={"ttft_ms": 300, "tpot_ms": 50}, percentiles=[50, 99])
    assert ds.attrs["format"] == "vllm" and "duration field" in ds.attrs["duration_source"]
    # the numbers vLLM itself saved, under the same names
    for key in ("completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "request_goodput", "output_throughput", "total_token_throughput",
                *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50", "p99") for m in ("ttft", "tpot", "itl", "e2el"))):
        assert ds[key] == pytest.approx(saved[key], rel=1e-12), key
    # and by hand: 3 of 4 requests succeeded in the 0.8 s run, 9 output and 60 input tokens
    assert ds.duration_s == 0.8 and (int(ds.completed), int(ds.failed)) == (3, 1)
    assert ds.request_throughput == pytest.approx(3.75) and ds.total_token_throughput == pytest.approx(86.25)
    assert ds.p99_ttft_ms == pytest.approx(398) and ds.mean_tpot_ms == pytest.approx(200 / 3)
    assert ds.median_itl_ms == pytest.approx(50) and ds.p99_itl_ms == pytest.approx(98)
    assert ds.request_goodput == pytest.approx(1.25)  # only request 0: TTFT 200 ms, TPOT 50 ms


def test_vllm_older_and_incomplete_files(tmp_path):
    saved = json.loads(VLLM.read_text())
    old = tmp_path / "old.json"  # benchmarks/benchmark_serving.py wrote no latencies: ttft + sum(itl)
    old.write_text(json.dumps({k: v for k, v in saved.items() if k not in ("latencies", "start_times", "failed")}))
    ds = jp.metrics(old, format="vllm", percentiles=[99])
    assert ds.mean_e2el_ms == pytest.approx(saved["mean_e2el_ms"]) and ds.p99_e2el_ms == pytest.approx(498)
    brief = tmp_path / "brief.json"  # without --save-detailed
    brief.write_text(json.dumps({k: v for k, v in saved.items() if k not in ("ttfts", "itls", "errors")}))
    with pytest.raises(jp.JaxparetoError, match="--save-detailed") as error:
        jp.metrics(brief)
    assert error.value.field == "vllm.ttfts"
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**saved, "completed": 4}))
    with pytest.raises(jp.JaxparetoError, match="completed = 4"):
        jp.metrics(wrong)


def test_guidellm_report():
    ds = jp.metrics(GUIDELLM, slo={"ttft_ms": 2000})
    assert ds.attrs["format"] == "guidellm" and ds.attrs["benchmark"] == 0
    # seed 002's samples: TPOT from the last token (5.75 s), E2EL to request_end (5.76 s)
    assert ds.median_tpot_ms == pytest.approx(50, rel=1e-6) and ds.mean_ttft_ms == pytest.approx(900, rel=1e-6)
    assert ds.mean_e2el_ms == pytest.approx(5885, rel=1e-6)
    assert ds.success_rate == pytest.approx(2 / 3) and ds.duration_s == pytest.approx(8.0, rel=1e-9)
    assert ds.goodput == pytest.approx(0.25, rel=1e-6) and ds.total_input_tokens == 30


def test_guidellm_refuses_samples_and_ambiguity(tmp_path):
    report = json.loads(GUIDELLM.read_text())
    report["benchmarks"][0]["scheduler_metrics"]["requests_made"]["successful"] = 200
    sampled = tmp_path / "sampled.json"
    sampled.write_text(json.dumps(report))
    with pytest.raises(jp.JaxparetoError, match="sample-requests"):
        jp.metrics(sampled)
    two = json.loads(GUIDELLM.read_text())
    two["benchmarks"] *= 2
    path = tmp_path / "two.json"
    path.write_text(json.dumps(two))
    with pytest.raises(jp.JaxparetoError, match="choose one") as error:
        jp.metrics(path)
    assert error.value.field == "benchmark"
    assert jp.metrics(path, benchmark=1).attrs["benchmark"] == 1


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_prints_summary_and_writes(capsys, tmp_path):
    out = tmp_path / "summary.json"
    code, stdout, err = run(capsys, "metrics", SEED, "--slo", "ttft_ms=2000", "--percentiles", "50,95",
                            "--percentile-method", "nearest_rank", "--out", out)
    assert code == 0 and not err
    assert "median_tpot_ms" in stdout and "success_rate" in stdout and "nearest_rank" in stdout
    line = next(x for x in stdout.splitlines() if x.startswith("goodput "))
    assert line.split()[1] == "0.25" and "requests/s" in line
    saved = json.loads(out.read_text())
    assert saved["median_tpot_ms"] == pytest.approx(50) and saved["timeout_rate"] is None
    assert saved["attrs"]["percentile_method"] == "nearest_rank"
    nc = tmp_path / "summary.nc"
    assert run(capsys, "metrics", VLLM, "--out", nc)[0] == 0
    with xr.open_dataset(nc) as back:
        assert back.request_throughput == pytest.approx(3.75) and int(back.completed) == 3
    assert run(capsys, "metrics", VLLM, "--out", tmp_path / "summary.zarr")[0] == 0
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "summary.zarr").load(), jp.metrics(VLLM))
    code, stdout, _ = run(capsys, "metrics", GUIDELLM, "--format", "guidellm", "--slo", "tpot_ms<=50")
    assert code == 0 and "guidellm" in stdout


@pytest.mark.parametrize("content, argv, message", [
    ("start,first_token,end,success\n0,1,2,true\n", [], "output_tokens: required column is missing"),
    ("start,first_token,end,output_tokens,success\n0,abc,2,5,true\n", [], "first_token: row 0: 'abc'"),
    ("start,first_token,end,output_tokens,success\n0,3,2,5,true\n", [], "end: row 0: end is before first_token"),
    ("start,first_token,end,output_tokens,success\n0,1,2,5,true\n", ["--slo", "ttft=2"], "slo: unknown SLO"),
    ("start,first_token,end,output_tokens,success\n0,1,2,5,true\n", ["--percentiles", "50,x"], "--percentiles"),
    ("start,first_token,end,output_tokens,success\n0,1,2,5,true\n", ["--out", "s.txt"], "--out: unknown output"),
    ("start,first_token,end,output_tokens,success\n0,1,2,5,true\n", ["--benchmark", "1"], "GuideLLM reports only"),
])
def test_cli_bad_input_exits_2(capsys, tmp_path, content, argv, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    code, stdout, err = run(capsys, "metrics", bad, *argv)
    assert code == 2 and err.startswith("jaxpareto: error: ") and message in err and "Traceback" not in err


def test_cli_missing_or_unknown_file_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "metrics", tmp_path / "none.csv")
    assert code == 2 and "does not exist" in err
    odd = tmp_path / "log.txt"
    odd.write_text("hello")
    code, _, err = run(capsys, "metrics", odd)
    assert code == 2 and "format: cannot tell" in err
    broken = tmp_path / "r.json"
    broken.write_text("{not json")
    code, _, err = run(capsys, "metrics", broken)
    assert code == 2 and "not one JSON document" in err
    exists = tmp_path / "s.json"
    exists.write_text("{}")
    code, _, err = run(capsys, "metrics", SEED, "--out", exists)
    assert code == 2 and "already exists" in err
