"""Benchmark-log metrics (jaxpareto.measure.metrics, .records): seed 002's definitions, vLLM's names and files,
the CLI.

Fixtures in tests/fixtures/metrics: ``seed002_appendix_a.csv`` is seed 002 appendix A's three
samples; ``vllm_serve_result.json`` follows the result layout of vllm-project/vllm
``vllm/benchmarks/serve.py`` (--save-result --save-detailed, --percentile-metrics ttft,tpot,itl,e2el,
--metric-percentiles 50,99, --goodput ttft:300 tpot:50), its summary keys computed by a transcription
of vLLM's ``calculate_metrics``; ``guidellm_report.json`` follows vllm-project/guidellm's
``GenerativeBenchmarksReport`` with ``info.timings`` per request (seed 002's samples at Unix times).
"""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import jaxpareto as jp
from jaxpareto.cli import main
from jaxpareto.measure.metrics import percentile
from jaxpareto.measure.records import read_records

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
    # five token times for a request of four output tokens (a chunk carries one token at least)
    (lambda d: d.assign(token_times=[[10.2, 10.3, 10.4, 10.5, 10.6], None, None, None]), "token_times",
     "more token_times than output_tokens"),
    (lambda d: d.drop(columns="token_times").assign(itl=[[0.1] * 4, [0.1], [], [0.1]]), "itl",
     "more itl gaps than output_tokens - 1"),
    (lambda d: d.assign(timeout=[True, False, True, False]), "timeout", "cannot have success true"),
    (lambda d: d.assign(cached_tokens=[500, 0, 0, 0]), "cached_tokens", "exceed input_tokens"),
    (lambda d: d.assign(itl=[[0.1]] * 4), "itl", "not both"),
    # a 10 s gap in a request whose first token came 0.7 s before its end (mean ITL past its E2EL)
    (lambda d: d.drop(columns="token_times").assign(itl=[[10.0], [0.1], [], [0.1]]), "itl", "add up to more"),
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
    # one file named twice is refused before anything is written (it had written it, then failed
    # on the second write naming a "path" option); an upper-case .CSV is a CSV file
    twice = tmp_path / "twice.csv"
    code, _, err = run(capsys, "metrics", VLLM, "--out", twice, "--csv", twice)
    assert code == 2 and "--csv: names the --out file" in err and not twice.exists()
    assert run(capsys, "metrics", VLLM, "--csv", tmp_path / "upper.CSV")[0] == 0
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
    assert code == 2 and "already exists; pass --overwrite" in err
    code, _, _ = run(capsys, "metrics", SEED, "--out", exists, "--overwrite")
    assert code == 0 and json.loads(exists.read_text())["success_rate"] == pytest.approx(2 / 3)
    folder = tmp_path / "folder.zarr"
    folder.mkdir()
    code, _, err = run(capsys, "metrics", SEED, "--out", folder, "--overwrite")
    assert code == 2 and "not a zarr store; refusing" in err


# ----------------------------------------------------------------------------- file encodings


@pytest.mark.parametrize("name, content", [
    ("b.jsonl", b"\xff\xfe"),
    ("b.csv", b"\xff\xfe"),
    ("b.json", b"\xff\xfe"),  # vLLM / GuideLLM readers
    ("late.csv", b"start,first_token,end,output_tokens,success\n0,1,2,5,true\n0,1,2,5,tr\xe9ue\n"),
    ("late.jsonl", b'{"start": 0}\n{"start": 1}\n{"start": "\xe9"}\n'),
])
def test_cli_file_not_utf8_exits_2_naming_the_file(capsys, tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    code, _, err = run(capsys, "metrics", path)
    assert code == 2 and err.startswith("jaxpareto: error: file: ") and "Traceback" not in err, err
    assert f"{path} is not UTF-8 text (line {1 if name.startswith('b.') else 3}:" in err
    with pytest.raises(jp.JaxparetoError, match="not UTF-8") as error:
        jp.metrics(path, format="vllm" if name.endswith(".json") else None)
    assert error.value.field == "file"


def test_utf8_byte_order_mark_accepted_everywhere(tmp_path):
    df = _table()
    csv, jsonl = tmp_path / "log.csv", tmp_path / "log.jsonl"
    df.assign(token_times=[json.dumps(t) if t else "" for t in df.token_times]).to_csv(csv, index=False,
                                                                                       encoding="utf-8-sig")
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()}
            for row in df.to_dict(orient="records")]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8-sig")
    assert csv.read_bytes().startswith(b"\xef\xbb\xbf") and jsonl.read_bytes().startswith(b"\xef\xbb\xbf")
    expected = jp.metrics(df)
    for path in (csv, jsonl):
        ds = jp.metrics(path)
        xr.testing.assert_identical(ds.drop_attrs(), expected.drop_attrs())
    for fixture in (VLLM, GUIDELLM):
        bom = tmp_path / fixture.name
        bom.write_text(fixture.read_text(), encoding="utf-8-sig")
        xr.testing.assert_identical(jp.metrics(bom).drop_attrs(), jp.metrics(fixture).drop_attrs())


# ----------------------------------------------------------------------------- malformed vLLM result files


def _vllm_file(tmp_path, name="r.json", **changes):
    saved = json.loads(VLLM.read_text())
    saved.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(saved))
    return path


@pytest.mark.parametrize("changes, field, message", [
    ({"ttfts": 5}, "vllm.ttfts", "expected a list"),
    ({"ttfts": "abc"}, "vllm.ttfts", "expected a list"),
    ({"ttfts": [0.2, "abc", 0.3, 0.0]}, "vllm.ttfts", "row 1: 'abc' is not a finite number"),
    ({"ttfts": [0.2, None, 0.3, 0.0]}, "vllm.ttfts", "row 1: not a time"),
    ({"ttfts": [0.2, -0.4, 0.3, 0.0]}, "vllm.ttfts", "row 1: not a time"),
    ({"itls": 7}, "vllm.itls", "expected a list of 4 entries"),
    ({"itls": [[0.05], ["x"], [0.1], []]}, "vllm.itls", "row 1: expected a list of finite numbers"),
    ({"itls": [[0.05], [-0.1], [0.1], []]}, "vllm.itls", "row 1: itl gaps"),
    ({"output_lens": [4, 3, 2]}, "vllm.output_lens", "expected a list of 4 entries"),
    ({"output_lens": [4, "three", 2, 0]}, "vllm.output_lens", "row 1: 'three'"),
    ({"output_lens": [4, 2.5, 2, 0]}, "vllm.output_lens", "row 1: not a whole number"),
    ({"errors": "none"}, "vllm.errors", "expected a list of 4 entries"),
    ({"errors": ["", 0, "", "Bad Request"]}, "vllm.errors", "row 1: not an error message"),
    ({"latencies": [0.35, "x", 0.4, 0.0]}, "vllm.latencies", "row 1: 'x'"),
    ({"latencies": [0.35, 0.1, 0.4, 0.0]}, "vllm.latencies", "row 1: the latency is shorter"),
    ({"input_lens": [10, True, 30, 40]}, "vllm.input_lens", "row 1: True is not a finite number"),
    ({"duration": "0.8"}, "vllm.duration", "not a positive number"),
    ({"completed": "3"}, "vllm.completed", "'3' is not a count of requests"),
    ({"completed": 2.5}, "vllm.completed", "not a count"),
])
def test_malformed_vllm_arrays_name_their_field(tmp_path, changes, field, message):
    path = _vllm_file(tmp_path, **changes)
    with pytest.raises(jp.JaxparetoError, match=message) as error:
        jp.metrics(path)
    assert error.value.field == field


def test_vllm_failure_with_an_empty_error_is_a_failure(tmp_path):
    # vLLM saves error = response.reason or "" for a non-200 answer: a failure without a message,
    # left with RequestFuncOutput's ttft = 0.0 and 0 output tokens
    path = _vllm_file(tmp_path, errors=["", "", "", ""])
    ds = jp.metrics(path, slo={"ttft_ms": 300, "tpot_ms": 50}, percentiles=[50, 99])
    expected = jp.metrics(VLLM, slo={"ttft_ms": 300, "tpot_ms": 50}, percentiles=[50, 99])
    xr.testing.assert_identical(ds.drop_attrs(), expected.drop_attrs())
    assert (int(ds.completed), int(ds.failed)) == (3, 1)
    # a file this rule misreads is still refused by the completed count
    with pytest.raises(jp.JaxparetoError, match="3 requests succeeded .* but completed = 4") as error:
        jp.metrics(_vllm_file(tmp_path, "c4.json", errors=["", "", "", ""], completed=4))
    assert error.value.field == "vllm.errors"


# ----------------------------------------------------------------------------- option types


@pytest.mark.parametrize("kwargs, field", [
    ({"duration_s": "5"}, "duration_s"),
    ({"duration_s": float("nan")}, "duration_s"),
    ({"duration_s": True}, "duration_s"),
    ({"percentiles": "50"}, "percentiles"),  # would iterate as 5 and 0
    ({"percentiles": [50, "90"]}, "percentiles"),
    ({"percentiles": [50, None]}, "percentiles"),
    ({"percentiles": [float("nan")]}, "percentiles"),
    ({"percentiles": []}, "percentiles"),
    ({"percentiles": {50: 1}}, "percentiles"),
    ({"slo": [("ttft_ms", 200)]}, "slo"),
    ({"slo": {"ttft_ms": "200"}}, "slo.ttft_ms"),
    ({"slo": {"ttft_ms": float("nan")}}, "slo.ttft_ms"),
    ({"benchmark": "0"}, "benchmark"),
    ({"percentile_method": ["linear"]}, "percentile_method"),
])
def test_wrong_option_types_name_the_argument(kwargs, field):
    with pytest.raises(jp.JaxparetoError) as error:
        jp.metrics(_table(), **kwargs)
    assert error.value.field == field


def test_option_types_accepted():
    one = jp.metrics(_table(), percentiles=50)  # one number: a one-element list
    assert one.attrs["percentiles"] == [50.0] and "p50_ttft_ms" in one and "p90_ttft_ms" not in one
    assert jp.metrics(_table(), percentiles=np.array([50, 99])).attrs["percentiles"] == [50.0, 99.0]
    assert jp.metrics(_table(), duration_s=np.float32(4)).duration_s == 4.0


def test_a_source_neither_path_nor_dataframe_is_refused():
    with pytest.raises(jp.JaxparetoError) as error:
        jp.metrics(123)
    assert error.value.field == "source"


@pytest.mark.parametrize("args, field", [
    (([1, 2], 150, "nearest_rank"), "q"),
    (([1, 2], -1), "q"),
    (([1, 2], "50"), "q"),
    (([1, 2], None), "q"),
    (([1, 2], 50, "nearest"), "percentile_method"),
    ((["a", "b"], 50), "values"),
])
def test_percentile_argument_errors(args, field):
    with pytest.raises(jp.JaxparetoError) as error:
        percentile(*args)
    assert error.value.field == field


def test_nearest_rank_at_0_and_100_is_the_minimum_and_maximum():
    assert percentile([1, 2], 100, "nearest_rank") == 2 and percentile([1, 2], 0, "nearest_rank") == 1


# ----------------------------------------------------------------------------- reading values

# numbers as text, and true/false in any of its spellings, with blank values among them
TEXT = ["0.1", " 0.30000000000000004 ", "1_0", "2.2250738585072011e-308", "+9E70", "7"]


def _text_records():
    return records(start=TEXT, first_token=list(TEXT), end=list(TEXT), output_tokens=["1"] * 6,
                   success=["true", " TRUE ", "1", 1, True, "False"], last_token=["", "  ", None, np.nan, "", ""])


def test_numbers_as_text_are_read_as_float_reads_them(tmp_path):
    # exactly, spaces and 1_000 included; only an empty or blank value is missing
    df = _text_records()
    rec = read_records(df)
    assert rec["start"].tolist() == [float(t) for t in TEXT]
    assert rec["success"].tolist() == [True, True, True, True, True, False]
    assert rec["last_token"].isna().all()
    csv = tmp_path / "t.csv"
    df.to_csv(csv, index=False)
    assert read_records(csv)["start"].tolist() == [float(t) for t in TEXT]


def test_bools_infinities_nan_and_words_are_refused_at_their_row():
    df = _text_records()
    for bad, row in ((True, 2), ("inf", 1), ("nan", 3), ("abc", 0), (float("inf"), 4), ([1.0], 5)):
        values = [0.0] * 6
        values[row] = bad
        with pytest.raises(jp.JaxparetoError, match=f"start: row {row}: .* is not a finite number"):
            read_records(df.assign(start=values, first_token=1.0, end=2.0))
    with pytest.raises(jp.JaxparetoError, match="start: row 0: True is not a finite number"):
        read_records(df.assign(start=[True] * 6))
    with pytest.raises(jp.JaxparetoError, match="success: row 2: 2 is not true or false"):
        read_records(df.assign(success=[1, 0, 2, 1, 1, 1]))
    with pytest.raises(jp.JaxparetoError, match="success: row 3: None is not true or false"):
        read_records(df.assign(success=[True, False, True, None, True, True]))


def test_jsonl_read_a_chunk_at_a_time_reads_the_same(tmp_path, monkeypatch):
    # JSONL is turned into frames a chunk at a time: chunks of other types read the same
    jsonl = tmp_path / "t.jsonl"
    rows = [{"start": float(i), "first_token": None if i % 3 == 0 else i + 0.5, "end": i + 1.0,
             "output_tokens": 4 if i % 3 else None, "success": i % 3 != 0, "itl": [0.1, 0.2] if i % 3 else None}
            for i in range(10)]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    whole = read_records(jsonl)
    monkeypatch.setattr(sys.modules["jaxpareto.measure.text_files"], "_JSONL_CHUNK", 3)
    pd.testing.assert_frame_equal(read_records(jsonl), whole)
    assert jp.metrics(jsonl).mean_itl_ms == pytest.approx(150)


def test_summary_as_csv_is_the_printed_table(tmp_path):
    from jaxpareto.cli import main

    source = Path(__file__).parent / "fixtures" / "metrics" / "vllm_serve_result.json"
    out = tmp_path / "summary.csv"
    assert main(["metrics", str(source), "--slo", "ttft_ms<=2000", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table.columns) == ["metric", "value", "units", "definition"] and "p99_ttft_ms" in set(table.metric)
    # --csv, the option every table-printing command has, writes the same table
    assert main(["metrics", str(source), "--slo", "ttft_ms<=2000", "--csv", str(tmp_path / "same.csv")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "same.csv"), table)
    assert main(["metrics", str(source), "--csv", str(tmp_path / "summary.json")]) == 2
    assert main(["metrics", str(source), "--csv", str(out)]) == 2  # kept unless --overwrite
