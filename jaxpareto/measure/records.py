"""Per-request benchmark records: reading a log file or DataFrame and checking every record.

Formats (``format=``, else by extension; a ``.json`` file is told apart by its keys). Files are
UTF-8 text, a leading byte-order mark allowed; another encoding is refused, naming the line
(`jaxpareto.measure.text_files`).

* ``csv`` / ``jsonl`` / a pandas DataFrame: one request per row. Required: ``start``,
  ``first_token``, ``end`` (s, float64, one clock), ``output_tokens``, ``success`` (true/false,
  1/0). Optional: ``last_token`` (s), ``token_times`` (s, absolute; a JSON list in CSV; at most
  ``output_tokens`` of them, one per streamed chunk) or ``itl`` (s, gaps; at most one fewer),
  ``input_tokens``, ``cached_tokens``, ``timeout`` (true/false; gives ``timeout_rate``,
  else NaN; a timed-out request must have ``success`` false). A failed request may leave
  ``first_token`` and ``output_tokens`` empty. Other columns are ignored.
* ``vllm`` (``vllm bench serve --save-result --save-detailed``) and ``guidellm`` (a GuideLLM
  report): read by `jaxpareto.measure.log_formats` into the same records.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.measure.log_formats import read_guidellm, read_vllm
from jaxpareto.measure.text_files import read_csv, read_json, read_jsonl
from jaxpareto.measure.values import fail, flags, flatten, number_lists, numbers, row_mask

REQUIRED = ("start", "first_token", "end", "output_tokens", "success")
OPTIONAL = ("last_token", "token_times", "itl", "input_tokens", "cached_tokens", "timeout")
FORMATS = ("csv", "jsonl", "vllm", "guidellm")
_TIMES = ("start", "first_token", "last_token", "end")
_TOKENS = ("output_tokens", "input_tokens", "cached_tokens")
_ORDER = "start <= first_token <= last_token <= end"


def _validated(df: pd.DataFrame, counts_streamed: bool = True) -> pd.DataFrame:
    """Check every record and return the canonical frame (float64 times and token counts).

    ``counts_streamed``: ``output_tokens`` counts the tokens streamed, so a successful request has
    at most that many ``token_times`` (at most one less ``itl`` gaps; a chunk may carry several
    tokens). False for vLLM's and GuideLLM's files, whose counts may come from tokenising the
    text again and can fall a token short of the chunks.

    Raises:
        JaxparetoError: a required column missing, no rows, both ``token_times`` and ``itl``, or
            a record with a bad value, naming the field and row.
    """
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise JaxparetoError(missing[0], "required column is missing",
                             f"required {', '.join(REQUIRED)}; optional {', '.join(OPTIONAL)}")
    if len(df) == 0:
        raise JaxparetoError("records", "no requests")
    if "token_times" in df.columns and "itl" in df.columns:
        raise JaxparetoError("itl", "give token_times or itl, not both")
    col = {c: numbers(df[c], c, "seconds" if c in _TIMES else "token counts") for c in (*_TIMES, *_TOKENS)
           if c in df.columns}
    col["success"] = ok = flags(df["success"], "success")
    for c in ("start", "end"):
        fail(c, np.isnan(col[c]), f"{c} is empty (every request needs one, failed ones too)", "seconds")
    for c in ("first_token", "output_tokens"):
        fail(c, ok & np.isnan(col[c]), f"{c} is empty for a successful request")
    for c in _TOKENS:
        if c in col:
            x = col[c]
            fail(c, ~np.isnan(x) & ((x < 0) | (x != np.round(x))), f"{c} is not a whole number >= 0", "0, 1, 2, ...")
    times = [c for c in _TIMES if c in col]
    for j, later in enumerate(times):
        for earlier in times[:j]:  # NaN compares false: a failure without first_token passes
            fail(later, col[later] < col[earlier], f"{later} is before {earlier}", _ORDER)
    if "timeout" in df.columns:
        col["timeout"] = flags(df["timeout"], "timeout")
        fail("timeout", col["timeout"] & ok, "a timed-out request cannot have success true")
    if "cached_tokens" in col and "input_tokens" in col:
        fail("cached_tokens", col["cached_tokens"] > col["input_tokens"], "cached_tokens exceed input_tokens")
    n = len(df)
    if "token_times" in df.columns:
        col["token_times"] = lists = number_lists(df["token_times"], "token_times")
        flat, row = flatten(lists)
        falls = row[1:][(row[1:] == row[:-1]) & (np.diff(flat) < 0)]
        outside = row[(flat < col["start"][row]) | (flat > col["end"][row])]
        fail("token_times", row_mask(n, falls) | row_mask(n, outside),
             "token_times must rise and lie within [start, end]")
        # a streamed chunk may carry several tokens (fewer times than tokens), never the reverse
        fail("token_times", counts_streamed & ok & (np.bincount(row, minlength=n) > col["output_tokens"]),
             "more token_times than output_tokens (one time per streamed chunk of tokens at most)")
    if "itl" in df.columns:
        col["itl"] = lists = number_lists(df["itl"], "itl")
        flat, row = flatten(lists)
        fail("itl", row_mask(n, row[flat < 0]), "itl gaps must be >= 0 s")
        fail("itl", counts_streamed & ok & (np.bincount(row, minlength=n) > col["output_tokens"] - 1),
             "more itl gaps than output_tokens - 1 (one gap per streamed chunk after the first at most)")
        # the gaps follow the first token: together they fit between it and the request's end
        span = np.bincount(row, weights=flat, minlength=n)
        room = col["end"] - col["first_token"]  # NaN (a failure without a first token) passes
        fail("itl", span > room + 1e-6 + 1e-9 * np.abs(col["end"]),
             "itl gaps add up to more than the time from first_token to end")
    order = [c for c in (*_TIMES, "output_tokens", "success", "token_times", "itl", "input_tokens",
                         "cached_tokens", "timeout") if c in col]
    out = pd.DataFrame({c: col[c] for c in order})
    out.attrs = dict(df.attrs)
    return out

def _format_of(path: Path, data: object | None) -> str:
    """The format of a file: by its extension, a JSON document by its keys."""
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
        JaxparetoError: an unknown ``format`` (or one given with a DataFrame), a ``benchmark``
            that is not an index or not for a GuideLLM report, a ``source`` that is neither a
            path nor a DataFrame; a missing or unreadable file, or one whose format cannot be
            told; a missing required column, a value that is not a number, times out of order
            (start <= first_token <= last_token <= end), and the like, naming the field and row.
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
        data = read_json(path) if as_json else None
        fmt, origin = format or _format_of(path, data), str(path)
        if benchmark is not None and fmt != "guidellm":
            raise JaxparetoError("benchmark", "applies to GuideLLM reports only")
        if fmt in ("vllm", "guidellm") and not isinstance(data, dict):
            raise JaxparetoError("file", f"{path} is not a JSON object, as a {fmt} result is")
        frame = {"csv": lambda: read_csv(path), "jsonl": lambda: read_jsonl(path),
                 "vllm": lambda: read_vllm(data), "guidellm": lambda: read_guidellm(data, benchmark)}[fmt]()
    frame = _validated(frame, counts_streamed=fmt not in ("vllm", "guidellm"))
    frame.attrs.update(format=fmt, source=origin)
    return frame
