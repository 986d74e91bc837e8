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
  only. Counts, ``success_rate``, ``timeout_rate``, throughput and goodput cover every request, and
  ``duration_s`` = last end - first start over all requests (seed 002 section 14.3 item 3: failures
  and timeouts are never dropped from a denominator).
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

Formats (``format=``, else by extension; a ``.json`` file is told apart by its keys). Files are
UTF-8 text, a leading byte-order mark allowed; another encoding is refused, naming the line.

* ``csv`` / ``jsonl`` / a pandas DataFrame: one request per row. Required: ``start``,
  ``first_token``, ``end`` (s, float64, one clock), ``output_tokens``, ``success`` (true/false,
  1/0). Optional: ``last_token`` (s), ``token_times`` (s, absolute; a JSON list in CSV) or ``itl``
  (s, gaps), ``input_tokens``, ``cached_tokens``, ``timeout`` (true/false; gives ``timeout_rate``,
  else NaN; a timed-out request must have ``success`` false). A failed request may leave
  ``first_token`` and ``output_tokens`` empty. Other columns are ignored.
* ``vllm``: the JSON of ``vllm bench serve --save-result --save-detailed`` (checked against
  vllm-project/vllm ``vllm/benchmarks/serve.py`` and ``benchmarks/benchmark_serving.py``). Used:
  ``duration``, ``ttfts``, ``itls``, ``output_lens``, ``errors`` (a request succeeded iff its error
  is empty and it is not a failure's unfilled record, ttft = 0 with 0 output tokens: vLLM saves an
  empty error for a non-200 response without a reason; the count is checked against
  ``completed``), ``latencies`` if present (older files lack it: then
  ttft + sum(itl), as vLLM's own timeline plot rebuilds it), ``input_lens``. vLLM's times are
  relative to each request's own start, so every request starts at 0 here and ``duration_s`` is
  the file's ``duration`` (vLLM's own throughput denominator), not an end-minus-start span.
  Timeouts are not recorded separately: ``timeout_rate`` is NaN.
* ``guidellm``: a GuideLLM ``GenerativeBenchmarksReport`` JSON (checked against vllm-project/
  guidellm ``src/guidellm/benchmark/schemas/generative/{report,benchmark,accumulator}.py``,
  ``src/guidellm/schemas/request_stats.py`` and ``info.py``, the layout whose requests carry
  ``info.timings``). One benchmark per summary (``benchmark=`` picks one). Per request:
  start = ``request_start`` (else ``resolve_start``), first_token = ``first_token_iteration``,
  last_token = ``last_token_iteration``, end = ``request_end`` (else ``resolve_end``), and the
  computed ``output_tokens`` and ``prompt_tokens``; ``successful`` requests succeed, ``errored``
  and ``incomplete`` ones fail. A report that keeps only a sample of its requests
  (``--sample-requests``) is refused. ``duration_s`` spans the listed requests, not GuideLLM's
  ``duration`` (its measurement window excludes warmup and cooldown, its request lists do not).
  GuideLLM's own ``inter_token_latency_ms`` equals TPOT here; its ``time_per_output_token_ms``
  includes the first token. Its older layouts (flat per-request ``start_time`` fields) and YAML
  reports were not checked and are refused.
"""

from __future__ import annotations

import argparse
import codecs
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.units import MS_PER_S

REQUIRED = ("start", "first_token", "end", "output_tokens", "success")
OPTIONAL = ("last_token", "token_times", "itl", "input_tokens", "cached_tokens", "timeout")
FORMATS = ("csv", "jsonl", "vllm", "guidellm")
PERCENTILE_METHODS = ("linear", "nearest_rank")
DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)
SLO_NAMES = ("ttft_ms", "tpot_ms", "e2el_ms")
LATENCIES = {  # name -> what it is (seed 002 section 3)
    "ttft": "time to first token",
    "tpot": "time per output token after the first",
    "itl": "inter-token latency",
    "e2el": "end-to-end request latency",
}
_TIMES = ("start", "first_token", "last_token", "end")
_TOKENS = ("output_tokens", "input_tokens", "cached_tokens")
_ORDER = "start <= first_token <= last_token <= end"


def _fail(field: str, rows: np.ndarray, problem: str, allowed: str | None = None) -> None:
    """Raise for the first row where ``rows`` is true."""
    if rows.any():
        raise JaxparetoError(field, f"row {int(np.argmax(rows))}: {problem}", allowed)


def _missing(v: object) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _number(v: object) -> float | None:
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        x = float(v)
    elif isinstance(v, str):
        try:
            x = float(v)
        except ValueError:
            return None
    else:
        return None
    return x if math.isfinite(x) else None


def _real(v: object) -> float | None:
    """``v`` as a float if it is a real number (not a bool, not a string), else None."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    return float(v)


def _series(values: pd.Series | Sequence) -> pd.Series:
    return values if isinstance(values, pd.Series) else pd.Series(list(values), dtype=object)


def _item(s: pd.Series, i: int) -> object:
    """Row ``i`` (by position) as a plain Python value, for messages."""
    v = s.iloc[int(i)]
    return v.item() if isinstance(v, np.generic) else v


# Column contents whose values numpy converts to float exactly as float() does: numbers, numeric
# strings and missing values, never bools (float(True) is 1.0) or containers.
_NUMBER_KINDS = frozenset({"string", "floating", "integer", "mixed-integer-float", "empty"})


def _numbers_each(values: list, field: str, unit: str) -> np.ndarray:
    """The per-value reading of :func:`_numbers`: slow, but it names the first bad row."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if _missing(v):
            continue
        x = _number(v)
        if x is None:
            raise JaxparetoError(field, f"row {i}: {v!r} is not a finite number", unit)
        out[i] = x
    return out


def _numbers(values: pd.Series | Sequence, field: str, unit: str | None = None) -> np.ndarray:
    """float64 values; missing (None, NaN, blank) -> NaN; a bool, an infinity or text that is not
    a number is refused, naming its row. Vectorised; the per-value reading runs only to find the
    row of a bad value (and for columns of mixed types)."""
    unit = unit or ("seconds" if field in _TIMES else "token counts")
    s = _series(values)
    if pd.api.types.is_bool_dtype(s.dtype):  # true/false where a number belongs: refused
        given = s.notna().to_numpy()
        if given.any():
            i = int(np.argmax(given))
            raise JaxparetoError(field, f"row {i}: {_item(s, i)!r} is not a finite number", unit)
        return np.full(len(s), np.nan)
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_complex_dtype(s.dtype):
        x = s.to_numpy(dtype=np.float64, na_value=np.nan)  # NaN: missing, as before
        bad = np.isinf(x)
        if bad.any():
            i = int(np.argmax(bad))
            raise JaxparetoError(field, f"row {i}: {_item(s, i)!r} is not a finite number", unit)
        return x
    if not (s.dtype == object or pd.api.types.is_string_dtype(s.dtype)) or \
            pd.api.types.infer_dtype(s, skipna=True) not in _NUMBER_KINDS:
        return _numbers_each(s.tolist(), field, unit)
    values = s.to_numpy(dtype=object)
    present = s.notna().to_numpy() & (values != "")
    x = np.full(len(s), np.nan)
    try:
        x[present] = values[present].astype(np.float64)  # float() per value, in C: exact as float()
    except (TypeError, ValueError):  # text that is no number, or blank with spaces: find the row
        return _numbers_each(s.tolist(), field, unit)
    if not np.isfinite(x[present]).all():  # "inf", "nan" and the like
        return _numbers_each(s.tolist(), field, unit)
    return x


def _flag(v: object, field: str, i: int) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)) and v in (0, 1):
        return bool(v)
    word = v.strip().lower() if isinstance(v, str) else None
    if word in ("true", "1", "false", "0"):
        return word in ("true", "1")
    raise JaxparetoError(field, f"row {i}: {v!r} is not true or false", "true/false, 1/0")


_FLAG_WORDS = {"true": True, "false": False, "True": True, "False": False, "TRUE": True, "FALSE": False,
               "1": True, "0": False, True: True, False: False}  # True == 1 and False == 0 as keys


def _flags(values: pd.Series | Sequence, field: str) -> np.ndarray:
    """bool values from true/false, 1/0 (any case, spaces allowed) or booleans; vectorised."""
    s = _series(values)
    if pd.api.types.is_bool_dtype(s.dtype) and not s.isna().any():
        return s.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        x = s.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = (x != 0) & (x != 1)
        if bad.any():
            _flag(_item(s, np.argmax(bad)), field, int(np.argmax(bad)))
        return x == 1
    try:
        mapped = s.map(_FLAG_WORDS)
    except TypeError:  # unhashable values (lists): read one by one
        return np.array([_flag(v, field, i) for i, v in enumerate(s.tolist())], dtype=bool)
    unknown = mapped.isna().to_numpy()
    out = np.zeros(len(s), dtype=bool)
    out[~unknown] = mapped.to_numpy(dtype=object)[~unknown].astype(bool)
    for i in np.flatnonzero(unknown):  # " True ", "tRUE", 1.0 as text... or the bad row
        out[i] = _flag(_item(s, i), field, i)
    return out


def _list(v: object, field: str, i: int) -> np.ndarray:
    """One row's list of finite numbers (a list, tuple, 1-D array or JSON text) as float64."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            v = None
    x = None
    if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iuf":
        x = v.astype(np.float64)
    elif isinstance(v, (list, tuple)) and set(map(type, v)) <= {int, float}:
        x = np.array(v, dtype=np.float64) if len(v) else np.empty(0)
    elif isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind == "O"):
        xs = [_number(e) for e in v]  # numeric text and numpy scalars, but no bools
        x = None if any(e is None for e in xs) else np.array(xs, dtype=np.float64)
    if x is None or not np.isfinite(x).all():
        raise JaxparetoError(field, f"row {i}: expected a list of finite numbers (seconds)",
                             "a JSON list such as [0.8, 0.85, 0.9]")
    return x


def _lists(values: pd.Series | Sequence, field: str) -> list[np.ndarray | None]:
    return [None if not isinstance(v, (list, tuple, np.ndarray)) and _missing(v) else _list(v, field, i)
            for i, v in enumerate(_series(values).tolist())]


def _flat(lists: Sequence[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """The per-row arrays (None: no values) end to end, and the row of each value."""
    sizes = np.fromiter((0 if x is None else x.size for x in lists), dtype=np.int64, count=len(lists))
    parts = [x for x in lists if x is not None and x.size]
    flat = np.concatenate(parts) if parts else np.empty(0)
    return flat, np.repeat(np.arange(len(lists)), sizes)


def _rows(n: int, rows: np.ndarray) -> np.ndarray:
    """A mask of ``n`` rows, true at ``rows``."""
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask


def _validated(df: pd.DataFrame) -> pd.DataFrame:
    """Check every record and return the canonical frame (float64 times and token counts)."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise JaxparetoError(missing[0], "required column is missing",
                             f"required {', '.join(REQUIRED)}; optional {', '.join(OPTIONAL)}")
    if len(df) == 0:
        raise JaxparetoError("records", "no requests")
    if "token_times" in df.columns and "itl" in df.columns:
        raise JaxparetoError("itl", "give token_times or itl, not both")
    col = {c: _numbers(df[c], c) for c in (*_TIMES, *_TOKENS) if c in df.columns}
    col["success"] = ok = _flags(df["success"], "success")
    for c in ("start", "end"):
        _fail(c, np.isnan(col[c]), f"{c} is empty (every request needs one, failed ones too)", "seconds")
    for c in ("first_token", "output_tokens"):
        _fail(c, ok & np.isnan(col[c]), f"{c} is empty for a successful request")
    for c in _TOKENS:
        if c in col:
            x = col[c]
            _fail(c, ~np.isnan(x) & ((x < 0) | (x != np.round(x))), f"{c} is not a whole number >= 0", "0, 1, 2, ...")
    times = [c for c in _TIMES if c in col]
    for j, later in enumerate(times):
        for earlier in times[:j]:  # NaN compares false: a failure without first_token passes
            _fail(later, col[later] < col[earlier], f"{later} is before {earlier}", _ORDER)
    if "timeout" in df.columns:
        col["timeout"] = _flags(df["timeout"], "timeout")
        _fail("timeout", col["timeout"] & ok, "a timed-out request cannot have success true")
    if "cached_tokens" in col and "input_tokens" in col:
        _fail("cached_tokens", col["cached_tokens"] > col["input_tokens"], "cached_tokens exceed input_tokens")
    n = len(df)
    if "token_times" in df.columns:
        col["token_times"] = lists = _lists(df["token_times"], "token_times")
        flat, row = _flat(lists)
        falls = row[1:][(row[1:] == row[:-1]) & (np.diff(flat) < 0)]
        outside = row[(flat < col["start"][row]) | (flat > col["end"][row])]
        _fail("token_times", _rows(n, falls) | _rows(n, outside), "token_times must rise and lie within [start, end]")
    if "itl" in df.columns:
        col["itl"] = lists = _lists(df["itl"], "itl")
        flat, row = _flat(lists)
        _fail("itl", _rows(n, row[flat < 0]), "itl gaps must be >= 0 s")
    order = [c for c in (*_TIMES, "output_tokens", "success", "token_times", "itl", "input_tokens",
                         "cached_tokens", "timeout") if c in col]
    out = pd.DataFrame({c: col[c] for c in order})
    out.attrs = dict(df.attrs)
    return out


def _not_utf8(path: Path, error: UnicodeDecodeError) -> JaxparetoError:
    """The error for a file that is not UTF-8 text, naming the line of the first bad byte.

    ``error`` may come from a reader that decodes block by block (its offsets are then within a
    block), so the file is decoded again here to find the line.
    """
    line = None
    try:
        raw = path.read_bytes()
        skip = 3 if raw.startswith(codecs.BOM_UTF8) else 0
        raw[skip:].decode("utf-8")
    except UnicodeDecodeError as again:
        line, error = raw.count(b"\n", 0, skip + again.start) + 1, again
    except OSError:
        pass
    where = f" (line {line}: {error.reason})" if line else f" ({error.reason})"
    return JaxparetoError("file", f"{path} is not UTF-8 text{where}", "UTF-8, with or without a byte-order mark")


def _read_text(path: Path) -> str:
    """The file's text: UTF-8, a leading byte-order mark dropped."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    except OSError as error:
        raise JaxparetoError("file", f"{path} cannot be read ({error.strerror or error})") from None


def _read_csv(path: Path) -> pd.DataFrame:
    # Columns are typed by pandas' parser (exact, as float()); one holding anything else stays
    # text, checked value by value in _validated. Only an empty field is missing: "NaN", "NA" and
    # "null" stay text and are refused as numbers.
    try:
        return pd.read_csv(path, encoding="utf-8-sig", keep_default_na=False, na_values=[""], low_memory=False)
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, OSError) as error:
        raise JaxparetoError("file", f"{path} is not a readable CSV file ({error})") from None


_JSONL_CHUNK = 65536  # rows turned into a DataFrame at a time: the dicts of one chunk live at once


def _read_jsonl(path: Path) -> pd.DataFrame:
    frames, rows, n = [], [], 0
    loads = json.loads
    try:
        with path.open(encoding="utf-8-sig") as lines:
            for n, line in enumerate(lines, 1):
                if line.isspace():
                    continue
                try:
                    row = loads(line)
                except json.JSONDecodeError:
                    row = None
                if type(row) is not dict:
                    raise JaxparetoError("file", f"{path} line {n} is not a JSON object", "one JSON object per line")
                rows.append(row)
                if len(rows) == _JSONL_CHUNK:
                    frames.append(pd.DataFrame(rows))
                    rows = []
    except UnicodeDecodeError as error:  # raised for a block read ahead: _not_utf8 finds its line
        raise _not_utf8(path, error) from None
    except OSError as error:
        raise JaxparetoError("file", f"{path} cannot be read ({error.strerror or error})") from None
    if rows or not frames:
        frames.append(pd.DataFrame(rows))
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def _read_json(path: Path) -> object:
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise JaxparetoError("file", f"{path} is not one JSON document ({error}); a file written with vLLM's "
                                     "--append-result holds several and must be split") from None


_VLLM_LISTS = ("ttfts", "itls", "output_lens", "errors", "latencies", "input_lens")  # one entry per request


def _vllm_counts(values: list, key: str) -> np.ndarray:
    x = _numbers(values, f"vllm.{key}", "token counts")
    _fail(f"vllm.{key}", np.isnan(x) | (x < 0) | (x != np.round(x)), "not a whole number >= 0", "0, 1, 2, ...")
    return x


def _read_vllm(data: dict) -> pd.DataFrame:
    """Per-request records of a ``vllm bench serve --save-result --save-detailed`` JSON.

    A request succeeded iff its error is empty and it produced something: vLLM's
    ``RequestFuncOutput`` starts with ``error = ""``, ``ttft = 0.0`` and no output tokens, and a
    request answered with a non-200 status keeps them but for ``error = response.reason or ""``
    (``vllm/benchmarks/lib/endpoint_request_func.py``), which is empty when the server gives no
    reason. Such a request is told apart by ttft = 0 and output_lens = 0 (vLLM saves 0 output
    tokens for every failure); a success has a measured, positive TTFT. The count must still
    equal the file's ``completed`` (vLLM's own count of ``success``), so a file this rule misreads
    is refused rather than summarised wrongly.
    """
    for key in ("duration", "ttfts", "itls", "output_lens", "errors"):
        if key not in data:
            raise JaxparetoError(f"vllm.{key}", "missing from the result file; vLLM saves its per-request "
                                                "arrays only with --save-result --save-detailed")
    if not isinstance(data["ttfts"], list):
        raise JaxparetoError("vllm.ttfts", f"expected a list with one entry per request, got "
                                           f"{type(data['ttfts']).__name__} {data['ttfts']!r:.40}")
    n = len(data["ttfts"])
    for key in _VLLM_LISTS[1:]:
        if key in data and (not isinstance(data[key], list) or len(data[key]) != n):
            got = f"{len(data[key])} entries" if isinstance(data[key], list) else \
                f"{type(data[key]).__name__} {data[key]!r:.40}"
            raise JaxparetoError(f"vllm.{key}", f"expected a list of {n} entries, one per request like ttfts; "
                                                f"got {got}")
    duration = _real(data["duration"])
    if duration is None or not 0 < duration < math.inf:
        raise JaxparetoError("vllm.duration", f"{data['duration']!r} is not a positive number of seconds")
    ttft = _numbers(data["ttfts"], "vllm.ttfts", "seconds")
    _fail("vllm.ttfts", np.isnan(ttft) | (ttft < 0), "not a time >= 0 s", "seconds")
    output_lens = _vllm_counts(data["output_lens"], "output_lens")
    errors = data["errors"]
    _fail("vllm.errors", np.array([e is not None and not isinstance(e, str) for e in errors], dtype=bool),
          "not an error message (text, empty for none)")
    ok = np.array([not e for e in errors], dtype=bool) & ~((ttft == 0) & (output_lens == 0))
    if "completed" in data and int(ok.sum()) != data["completed"]:
        raise JaxparetoError("vllm.errors", f"{int(ok.sum())} requests succeeded (no error, and a TTFT or output "
                                            f"tokens) but completed = {data['completed']}")
    itls = _lists(data["itls"], "vllm.itls")
    flat, row = _flat(itls)
    _fail("vllm.itls", _rows(n, row[flat < 0]), "itl gaps must be >= 0 s", "seconds")
    if "latencies" in data:
        end = _numbers(data["latencies"], "vllm.latencies", "seconds")
        _fail("vllm.latencies", np.isnan(end) | (end < 0), "not a time >= 0 s", "seconds")
        _fail("vllm.latencies", ok & (end < ttft), "the latency is shorter than the request's ttft", "seconds")
    else:  # ttft + sum(itl), summed in order as Python's sum
        end = ttft + np.bincount(row, weights=flat, minlength=n)
    frame = pd.DataFrame({"start": np.zeros(n), "first_token": np.where(ok, ttft, np.nan), "end": end,
                          "output_tokens": output_lens, "success": ok,
                          "itl": [x if good else None for x, good in zip(itls, ok)]})
    if "input_lens" in data:
        frame["input_tokens"] = _vllm_counts(data["input_lens"], "input_lens")
    frame.attrs.update(duration_s=duration, duration_source="the vLLM result's duration field")
    return frame


def _read_guidellm(data: dict, benchmark: int | None) -> pd.DataFrame:
    """Per-request records of one benchmark of a GuideLLM ``GenerativeBenchmarksReport`` JSON."""
    benches = data.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise JaxparetoError("guidellm.benchmarks", "the report holds no benchmarks")
    if benchmark is None and len(benches) > 1:
        raise JaxparetoError("benchmark", f"the report holds {len(benches)} benchmarks; choose one",
                             range(len(benches)))
    index = 0 if benchmark is None else benchmark
    if not 0 <= index < len(benches):
        raise JaxparetoError("benchmark", f"{index} is out of range", range(len(benches)))
    rows = []
    try:
        bench = benches[index]
        made = bench["scheduler_metrics"]["requests_made"]
        for status in ("successful", "incomplete", "errored"):
            kept = bench["requests"][status] or []
            if len(kept) > made[status] or (status != "incomplete" and len(kept) < made[status]):
                raise JaxparetoError(f"guidellm.requests.{status}", f"holds {len(kept)} of {made[status]} requests "
                                     "(sampled with --sample-requests); per-request metrics need all of them")
            for r in kept:
                t = r["info"]["timings"]
                rows.append({
                    "start": t["request_start"] if t.get("request_start") is not None else t.get("resolve_start"),
                    "first_token": t.get("first_token_iteration"), "last_token": t.get("last_token_iteration"),
                    "end": t["request_end"] if t.get("request_end") is not None else t.get("resolve_end"),
                    "output_tokens": r.get("output_tokens"), "input_tokens": r.get("prompt_tokens"),
                    "success": status == "successful"})
    except (KeyError, TypeError) as error:
        raise JaxparetoError("guidellm", f"unrecognised report layout (no {error}); only reports whose requests "
                                         "carry info.timings were checked") from None
    frame = pd.DataFrame(rows, columns=["start", "first_token", "last_token", "end", "output_tokens",
                                        "input_tokens", "success"])
    frame.attrs["benchmark"] = index
    return frame


def _format_of(path: Path, data: object | None) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if isinstance(data, dict) and "benchmarks" in data:
        return "guidellm"
    if isinstance(data, dict) and ("ttfts" in data or "duration" in data):
        return "vllm"
    raise JaxparetoError("format", f"cannot tell the format of {path.name}; pass format= (CLI: --format)", FORMATS)


def read_records(source: str | Path | pd.DataFrame, format: str | None = None, *,
                 benchmark: int | None = None) -> pd.DataFrame:
    """Read and check per-request benchmark records.

    Args:
        source: a CSV, JSONL, vLLM result or GuideLLM report file, or a pandas DataFrame with the
            columns of the module docstring.
        format: ``csv``, ``jsonl``, ``vllm`` or ``guidellm``; default: from the extension (a
            ``.json`` file by its keys). Not used with a DataFrame.
        benchmark: GuideLLM only: index of the benchmark in the report (needed if it holds several).

    Returns:
        One row per request: ``start``, ``first_token``, [``last_token``], ``end`` (s, float64),
        ``output_tokens`` (float64, whole numbers), ``success`` (bool) and the optional columns
        given; ``attrs`` hold ``format``, ``source`` and, for vLLM, ``duration_s``.

    Raises:
        JaxparetoError: an unreadable file, a missing required column, a value that is not a
            number, times out of order (start <= first_token <= last_token <= end), and the like,
            naming the field and row.
    """
    if format is not None and format not in FORMATS:
        raise JaxparetoError("format", f"unknown format {format!r}", FORMATS)
    if benchmark is not None and (isinstance(benchmark, (bool, np.bool_))
                                  or not isinstance(benchmark, (int, np.integer))):
        raise JaxparetoError("benchmark", f"expected the index of a benchmark (0, 1, ...), got {benchmark!r}")
    if not isinstance(source, (pd.DataFrame, str, os.PathLike)):
        raise JaxparetoError("source", f"expected a file path or a pandas DataFrame, got {type(source).__name__}")
    if isinstance(source, pd.DataFrame):  # possibly read_records' own result: keep its provenance
        if format is not None:
            raise JaxparetoError("format", "applies to files, not to a DataFrame")
        frame, fmt, origin = source, source.attrs.get("format", "dataframe"), source.attrs.get("source", "DataFrame")
    else:
        path = Path(source)
        if not path.is_file():
            raise JaxparetoError("file", f"{path} does not exist or is not a file")
        as_json = format in ("vllm", "guidellm") or (format is None and path.suffix.lower() == ".json")
        data = _read_json(path) if as_json else None
        fmt, origin = format or _format_of(path, data), str(path)
        if benchmark is not None and fmt != "guidellm":
            raise JaxparetoError("benchmark", "applies to GuideLLM reports only")
        if fmt in ("vllm", "guidellm") and not isinstance(data, dict):
            raise JaxparetoError("file", f"{path} is not a JSON object, as a {fmt} result is")
        frame = {"csv": lambda: _read_csv(path), "jsonl": lambda: _read_jsonl(path),
                 "vllm": lambda: _read_vllm(data), "guidellm": lambda: _read_guidellm(data, benchmark)}[fmt]()
    frame = _validated(frame)
    frame.attrs.update(format=fmt, source=origin)
    return frame


def _q(q: object, field: str) -> float:
    value = _real(q)
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
    if _real(percentiles) is not None:
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
        value = _real(limit)
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
        flat, row = _flat(rec["token_times"].tolist())
        itl = np.diff(flat)[(row[1:] == row[:-1]) & ok[row[1:]]]
    elif "itl" in rec:
        flat, row = _flat(rec["itl"].tolist())
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
        JaxparetoError: bad options (of the wrong type too) or records, naming the argument or
            field, before anything is computed.
    """
    qs, limits = _check_options(percentiles, percentile_method, slo)
    if duration_s is not None and not 0 < (_real(duration_s) or 0) < math.inf:
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


def summary_table(ds: xr.Dataset) -> str:
    """The summary as a readable table: metric, value, units, definition."""
    def show(v: object) -> str:
        v = np.asarray(v).item()
        return "-" if isinstance(v, float) and math.isnan(v) else f"{v:,}" if isinstance(v, int) else f"{v:,.6g}"
    rows = [("metric", "value", "units", "definition")] + [
        (name, show(ds[name].values), ds[name].attrs["units"], ds[name].attrs["long_name"]) for name in ds.data_vars]
    width = [max(len(row[k]) for row in rows) for k in range(3)]
    return "\n".join(f"{m:<{width[0]}}  {v:>{width[1]}}  {u:<{width[2]}}  {d}" for m, v, u, d in rows)


_OUT_SUFFIXES = (".json", ".nc", ".zarr")


def _check_out(path: Path) -> None:
    if path.suffix.lower() not in _OUT_SUFFIXES:
        raise JaxparetoError("--out", f"unknown output type {path.suffix or path.name!r}", _OUT_SUFFIXES)
    if not path.resolve().parent.is_dir():
        raise JaxparetoError("--out", f"the folder {path.resolve().parent} does not exist")
    if path.exists():
        raise JaxparetoError("--out", f"{path} already exists; refusing to replace it")


def _write(ds: xr.Dataset, path: Path) -> None:
    suffix = path.suffix.lower()
    if suffix == ".json":
        data = {name: (None if isinstance(v := np.asarray(ds[name].values).item(), float) and math.isnan(v) else v)
                for name in ds.data_vars}
        path.write_text(json.dumps({**data, "attrs": ds.attrs, "units": {n: ds[n].attrs["units"] for n in ds.data_vars}},
                                   indent=1) + "\n")
    elif suffix == ".nc":  # netCDF3 (scipy) has no 64-bit integers
        ds.assign({n: ds[n].astype(np.int32) for n in ds.data_vars if ds[n].dtype == np.int64}).to_netcdf(path)
    else:
        from jaxpareto.dataset.store import to_zarr  # the sweep store's writer: zarr v3, consolidated
        to_zarr(ds, path)


def _parse_slo(items: Sequence[str] | None) -> dict[str, float]:
    limits = {}
    for item in items or []:
        name, sep, limit = item.partition("<=") if "<=" in item else item.partition("=")
        if not sep or _number(limit) is None:
            raise JaxparetoError("--slo", f"expected NAME=LIMIT_MS such as ttft_ms=2000, got {item!r}", SLO_NAMES)
        limits[name.strip()] = float(limit)
    return limits


def _cmd_metrics(args: argparse.Namespace) -> int:
    try:
        qs = [float(q) for q in args.percentiles.split(",")]
    except ValueError:
        raise JaxparetoError("--percentiles", f"expected comma-separated numbers, got {args.percentiles!r}") from None
    out = Path(args.out) if args.out else None
    if out is not None:
        _check_out(out)
    ds = metrics(args.file, args.format, percentiles=qs, percentile_method=args.percentile_method,
                 slo=_parse_slo(args.slo), benchmark=args.benchmark)
    slo = ", ".join(f"{k} <= {v:g}" for k, v in json.loads(ds.attrs["slo_ms"]).items()) or "none"
    print(f"{args.file}: {ds.attrs['format']}, {ds.attrs['requests']:,} requests; percentiles {ds.attrs['percentile_method']};"
          f" SLO {slo}; ITL {ds.attrs['itl_source']}\n")
    print(summary_table(ds))
    if out is not None:
        _write(ds, out)
        print(f"\nwrote {out}")
    return 0


def add_metrics_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``jaxpareto metrics FILE`` to the CLI's subcommands."""
    p = subparsers.add_parser("metrics", help="TTFT/TPOT/ITL/E2EL percentiles, throughput and goodput of a benchmark log")
    p.add_argument("file", help="per-request CSV or JSONL, vLLM --save-result --save-detailed JSON, or GuideLLM report")
    p.add_argument("--format", choices=FORMATS, help="input format (default: from the extension and keys)")
    p.add_argument("--percentiles", default="50,90,95,99", help="comma-separated percentiles (default 50,90,95,99)")
    p.add_argument("--percentile-method", choices=PERCENTILE_METHODS, default="linear",
                   help="linear (numpy's default, seed 002 appendix A) or nearest_rank")
    p.add_argument("--slo", action="append", metavar="NAME=LIMIT_MS",
                   help=f"goodput SLO in ms, one of {', '.join(SLO_NAMES)} (repeatable)")
    p.add_argument("--benchmark", type=int, help="GuideLLM report: index of the benchmark to summarise")
    p.add_argument("--out", help="also write the summary: .json, .nc (netCDF3) or .zarr")
    p.set_defaults(func=_cmd_metrics)
    return p
