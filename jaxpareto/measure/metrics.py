"""Benchmark-log metrics: TTFT, TPOT, ITL, E2E latency, throughput and goodput (``jaxpareto metrics``).

Definitions (seed 002 section 3, its worked example and appendix A; names, units and statistics
as in vLLM's ``vllm bench serve`` results, ``vllm/benchmarks/serve.py``, ``calculate_metrics``):

* TTFT = first_token - start. TPOT = (last_token - first_token) / (output_tokens - 1), undefined
  (NaN) for one output token; ``last_token`` defaults to ``end``. E2EL = end - start.
  ITL = the gaps between consecutive output tokens (or streamed chunks), pooled over requests as
  vLLM pools its per-request ``itl`` lists. ITL comes from ``token_times`` or ``itl`` only; without
  them it is not reported (NaN), never filled in with TPOT: a mean per-token time hides exactly
  the single stalls that ITL's P95/P99 exist to show (seed 002 section 3).
* Latency statistics (mean, median, population std, percentiles, in ms) cover successful requests
  only. Counts, ``success_rate`` and ``timeout_rate`` cover every request, and throughputs and
  goodput divide what succeeded by ``duration_s`` = last end - first start over all requests (seed
  002 section 14.3 item 3: failures and timeouts are never dropped from a denominator).
* ``request_throughput`` = completed / duration; ``output_throughput`` and
  ``total_token_throughput`` count the tokens of successful requests (vLLM counts 0 for a
  failure). ``goodput`` = ``request_goodput`` (vLLM's name) = successful requests meeting every
  SLO / duration, with vLLM's test value <= limit and its rule that a request without a TPOT
  (one output token) meets a TPOT SLO. Without an SLO both are NaN (vLLM writes null).
* Percentiles: ``linear`` (default: numpy's default, the interpolation of seed 002 appendix A's
  ``percentile`` and of vLLM's ``np.percentile``) or ``nearest_rank`` (the smallest value with at
  least q % of the sample at or below it: P99 of [10, 20, 30] is 30, linear gives 29.8). The
  median is numpy's under either method, as in vLLM. Where vLLM writes 0 for an empty sample,
  this module writes NaN.

The records (their formats and checks) are read by `jaxpareto.measure.records.read_records`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from jaxpareto.dataset.store import to_zarr
from jaxpareto.definitions.checks import check_output_folder
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.units import MS_PER_S
from jaxpareto.measure.records import read_records
from jaxpareto.measure.values import flatten, real_number

PERCENTILE_METHODS = ("linear", "nearest_rank")
DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)
SLO_NAMES = ("ttft_ms", "tpot_ms", "e2el_ms")
LATENCIES = {  # name -> what it is (seed 002 section 3)
    "ttft": "time to first token",
    "tpot": "time per output token after the first",
    "itl": "inter-token latency",
    "e2el": "end-to-end request latency",
}
#: File types `write_summary` writes.
SUMMARY_SUFFIXES = (".json", ".csv", ".nc", ".zarr")


def _q(q: object, field: str) -> float:
    value = real_number(q)
    if value is None or not 0 <= value <= 100:
        raise JaxparetoError(field, f"expected a number in [0, 100], got {q!r}")
    return value


# Nearest rank (the smallest value with at least q % of the sample at or below it) is numpy's
# "inverted_cdf", Hyndman and Fan's definition 1.
_NUMPY_METHOD = {"linear": "linear", "nearest_rank": "inverted_cdf"}


def percentile(values: Sequence[float] | np.ndarray, q: float, method: str = "linear") -> float:
    """The ``q``-th percentile (a number in [0, 100]) of ``values``; NaN for an empty sample.

    ``linear`` is numpy's default (seed 002 appendix A); ``nearest_rank`` is the sorted value of
    rank ceil(q / 100 * n) (at least 1), so the P99 of [10, 20, 30] is 30.

    Raises:
        JaxparetoError: an unknown method, ``q`` not a number in [0, 100], ``values`` not numbers.
    """
    if method not in PERCENTILE_METHODS:
        raise JaxparetoError("percentile_method", f"unknown method {method!r}", PERCENTILE_METHODS)
    q = _q(q, "q")
    try:
        x = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise JaxparetoError("values", f"expected numbers, got {type(values).__name__}") from None
    if x.size == 0:
        return math.nan
    return float(np.percentile(x, q, method=_NUMPY_METHOD[method]))


def _check_options(percentiles: Sequence[float] | float, method: str, slo: Mapping[str, float] | None) -> tuple:
    """Options as given to :func:`metrics`: numbers must be numbers (not text: "50" is refused,
    as iterating it would give 5 and 0); one number for ``percentiles`` is a one-element list."""
    if method not in PERCENTILE_METHODS:
        raise JaxparetoError("percentile_method", f"unknown method {method!r}", PERCENTILE_METHODS)
    if real_number(percentiles) is not None:
        percentiles = [percentiles]
    if isinstance(percentiles, (str, bytes, Mapping)) or not isinstance(percentiles, Iterable):
        raise JaxparetoError("percentiles", f"expected a list of distinct numbers in [0, 100], got {percentiles!r}")
    given = list(percentiles)
    qs = [_q(q, "percentiles") for q in given]
    if not qs or len(set(qs)) != len(qs):
        raise JaxparetoError("percentiles", f"expected distinct numbers in [0, 100], got {given}")
    if slo is not None and not isinstance(slo, Mapping):
        raise JaxparetoError("slo", f"expected a mapping of limits in ms such as {{'ttft_ms': 2000}}, got {slo!r}",
                             SLO_NAMES)
    limits = {}
    for name, limit in (slo or {}).items():
        if name not in SLO_NAMES:
            raise JaxparetoError("slo", f"unknown SLO {name!r}", SLO_NAMES)
        value = real_number(limit)
        if value is None or not value >= 0:
            raise JaxparetoError(f"slo.{name}", f"{limit!r} is not a number of milliseconds >= 0")
        limits[name] = value
    return qs, limits


def _per_request(rec: pd.DataFrame) -> dict[str, np.ndarray]:
    """TTFT, TPOT and E2EL per request (s) and the pooled ITL gaps of successful requests."""
    ok = rec["success"].to_numpy()
    start, first, end = (rec[c].to_numpy() for c in ("start", "first_token", "end"))
    last = rec["last_token"].to_numpy() if "last_token" in rec else end
    last = np.where(np.isnan(last), end, last)
    n = rec["output_tokens"].to_numpy()
    tpot = np.full(len(rec), np.nan)
    np.divide(last - first, n - 1, out=tpot, where=ok & (n > 1))
    if "token_times" in rec:  # the gaps within each successful request, in request order
        flat, row = flatten(rec["token_times"].tolist())
        itl = np.diff(flat)[(row[1:] == row[:-1]) & ok[row[1:]]]
    elif "itl" in rec:
        flat, row = flatten(rec["itl"].tolist())
        itl = flat[ok[row]]
    else:
        itl = np.empty(0)
    return {"ttft": (first - start)[ok], "tpot": tpot, "e2el": (end - start)[ok], "itl": itl}


def metrics(source: str | Path | pd.DataFrame, format: str | None = None, *,
            percentiles: Sequence[float] | float = DEFAULT_PERCENTILES, percentile_method: str = "linear",
            slo: Mapping[str, float] | None = None, duration_s: float | None = None,
            benchmark: int | None = None) -> xr.Dataset:
    """Summary statistics of a benchmark log, named as vLLM's ``vllm bench serve`` results.

    Args:
        source: file or DataFrame, as for :func:`read_records` (or its result).
        format: as for :func:`read_records`.
        percentiles: distinct numbers in [0, 100], reported as ``p{q}_{ttft,tpot,itl,e2el}_ms``
            (vLLM's spelling: ``p99``, ``p99.9``); one number is taken as a one-element list.
            Numbers, not text (``"50"`` is refused).
        percentile_method: ``linear`` (default) or ``nearest_rank``; recorded in the attrs.
        slo: a mapping of limits in ms (numbers >= 0), any of ``ttft_ms``, ``tpot_ms``,
            ``e2el_ms``; a request is good if it succeeded and every value <= its limit.
        duration_s: the run's duration (s, a finite number > 0) for the rates, overriding last
            end - first start (and a vLLM file's ``duration``).
        benchmark: GuideLLM only, see :func:`read_records`.

    Returns:
        A Dataset of scalars, each with ``units`` and ``long_name``: ``completed``, ``failed``,
        ``success_rate``, ``timeout_rate``, ``duration_s``, token totals, ``request_throughput``
        (requests/s), ``output_throughput``, ``total_token_throughput`` (tokens/s), ``goodput``
        and ``request_goodput`` (requests/s), ``prefix_cache_hit_rate`` and
        ``mean/median/std/p*_{ttft,tpot,itl,e2el}_ms``. Definitions in the module docstring.

    Raises:
        JaxparetoError: a bad option (of the wrong type too: ``percentiles``,
            ``percentile_method``, ``slo``, ``duration_s``) or anything `read_records` refuses,
            naming the argument or field, before anything is computed.
    """
    qs, limits = _check_options(percentiles, percentile_method, slo)
    if duration_s is not None and not 0 < (real_number(duration_s) or 0) < math.inf:
        raise JaxparetoError("duration_s", f"{duration_s!r} is not a positive number of seconds")
    rec = read_records(source, format, benchmark=benchmark)
    if duration_s is not None:
        duration, duration_source = float(duration_s), "the duration_s argument"
    elif "duration_s" in rec.attrs:
        duration, duration_source = rec.attrs["duration_s"], rec.attrs["duration_source"]
    else:
        duration = float(rec["end"].max() - rec["start"].min())
        duration_source = "last end - first start over all requests"
    ok = rec["success"].to_numpy()
    completed, total = int(ok.sum()), len(rec)
    per = _per_request(rec)

    def rate(count: float) -> float:
        return count / duration if duration > 0 else math.nan

    def tokens(column: str) -> float:
        return float(rec[column][ok].sum()) if column in rec and not rec[column][ok].isna().any() else math.nan

    start = rec["start"].to_numpy()
    seconds = {"ttft_ms": rec["first_token"].to_numpy() - start, "e2el_ms": rec["end"].to_numpy() - start,
               "tpot_ms": np.nan_to_num(per["tpot"])}  # a request without a TPOT meets a TPOT SLO (vLLM)
    good = ok.copy()
    for name, limit in limits.items():
        good &= np.where(ok, seconds[name], np.inf) <= limit / MS_PER_S  # vLLM compares in seconds
    n_in, n_out = tokens("input_tokens"), tokens("output_tokens")
    n_cached = tokens("cached_tokens")
    goodput = rate(int(good.sum())) if limits else math.nan
    timeout = rec["timeout"].to_numpy().sum() / total if "timeout" in rec else math.nan
    values: dict[str, tuple[object, str, str]] = {
        "completed": (completed, "requests", "successful requests"),
        "failed": (total - completed, "requests", "failed requests (timeouts included)"),
        "success_rate": (completed / total, "1", "successful / all requests"),
        "timeout_rate": (timeout, "1", "timed-out / all requests (NaN: no timeout column)"),
        "duration_s": (duration, "s", f"benchmark duration: {duration_source}"),
        "total_input_tokens": (n_in, "tokens", "input tokens of successful requests"),
        "total_output_tokens": (n_out, "tokens", "output tokens of successful requests"),
        "request_throughput": (rate(completed), "requests/s", "successful requests / duration"),
        "output_throughput": (rate(n_out), "tokens/s", "output tokens of successful requests / duration"),
        "total_token_throughput": (rate(n_in + n_out), "tokens/s",
                                   "input + output tokens of successful requests / duration"),
        "goodput": (goodput, "requests/s", "successful requests meeting every SLO / duration (NaN: no SLO)"),
        "request_goodput": (goodput, "requests/s", "vLLM's name for goodput"),
        "prefix_cache_hit_rate": (n_cached / n_in if n_in > 0 else math.nan, "1",
                                  "cached / input tokens of successful requests"),
    }
    for key, what in LATENCIES.items():
        ms = per[key][~np.isnan(per[key])] * MS_PER_S
        stats = {"mean": np.mean, "median": np.median, "std": np.std}  # std: population (ddof 0), as vLLM
        for stat, fn in stats.items():
            label = "standard deviation (population) of" if stat == "std" else stat
            values[f"{stat}_{key}_ms"] = (float(fn(ms)) if ms.size else math.nan, "ms",
                                          f"{label} {what}, successful requests")
        for q in qs:
            word = str(int(q)) if int(q) == q else str(q)
            values[f"p{word}_{key}_ms"] = (percentile(ms, q, percentile_method), "ms",
                                           f"{word}th percentile ({percentile_method}) {what}, successful requests")
    itl_source = ("token_times differences" if "token_times" in rec else "itl gaps" if "itl" in rec
                  else "not reported: no token_times or itl in the records")
    attrs = {
        "title": "benchmark-log metrics", "source": rec.attrs["source"], "format": rec.attrs["format"],
        "requests": total,
        "percentile_method": percentile_method, "percentiles": qs, "slo_ms": json.dumps(limits),
        "duration_source": duration_source, "itl_source": itl_source,
        "latency_population": "successful requests only; counts, rates, throughput and goodput over all requests",
        "definitions": "seed 002 section 3, 14.3 and appendix A; names as vLLM vllm/benchmarks/serve.py",
    }
    if "benchmark" in rec.attrs:
        attrs["benchmark"] = rec.attrs["benchmark"]
    return xr.Dataset({name: xr.DataArray(v, attrs={"units": u, "long_name": d}) for name, (v, u, d) in values.items()},
                      attrs=attrs)


def check_summary_path(path: Path, field: str = "path", overwrite: bool = False) -> None:
    """Check that `write_summary` can write ``path`` (before the summary is computed).

    Raises:
        JaxparetoError: on ``field``: a suffix not in `SUMMARY_SUFFIXES`, a missing folder, a
            path that exists (replaced only with ``overwrite``), or a folder that is not a zarr
            store (never replaced).
    """
    if path.suffix.lower() not in SUMMARY_SUFFIXES:
        raise JaxparetoError(field, f"unknown output type {path.suffix or path.name!r}", SUMMARY_SUFFIXES)
    check_output_folder(path, field)
    if path.exists() and not overwrite:
        raise JaxparetoError(field, f"{path} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    if path.is_dir() and not (path / "zarr.json").is_file():
        raise JaxparetoError(field, f"{path} is a folder and not a zarr store; refusing to replace it")


def write_summary(ds: xr.Dataset, path: Path, overwrite: bool = False, field: str = "path") -> None:
    """Write a `metrics` summary by the suffix of ``path``: ``.json`` (NaN as null, with the
    attrs and units), ``.csv`` (the printed table: metric, value, units, definition), ``.nc``
    (netCDF3) or ``.zarr`` (the sweep store's writer: zarr v3, consolidated).

    Raises:
        JaxparetoError: as `check_summary_path`, on ``field`` (the option that named ``path``).
    """
    check_summary_path(path, field, overwrite=overwrite)
    suffix = path.suffix.lower()
    if suffix == ".json":
        data = {name: (None if isinstance(v := np.asarray(ds[name].values).item(), float) and math.isnan(v) else v)
                for name in ds.data_vars}
        path.write_text(json.dumps({**data, "attrs": ds.attrs, "units": {n: ds[n].attrs["units"] for n in ds.data_vars}},
                                   indent=1) + "\n")
    elif suffix == ".csv":
        pd.DataFrame([{"metric": name, "value": np.asarray(ds[name].values).item(), "units": ds[name].attrs["units"],
                       "definition": ds[name].attrs["long_name"]} for name in ds.data_vars]).to_csv(path, index=False)
    elif suffix == ".nc":  # netCDF3 (scipy) has no 64-bit integers
        ds.assign({n: ds[n].astype(np.int32) for n in ds.data_vars if ds[n].dtype == np.int64}).to_netcdf(path)
    else:
        to_zarr(ds, path, overwrite=overwrite)
