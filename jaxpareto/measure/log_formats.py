"""Readers of benchmark tools' result files: vLLM's ``bench serve`` JSON and GuideLLM's report.

Each turns a parsed JSON document into per-request records (the columns of
`jaxpareto.measure.records`), which `jaxpareto.measure.records.read_records` then checks.

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

import math

import numpy as np
import pandas as pd

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.measure.values import fail, flatten, number_lists, numbers, real_number, row_mask

_VLLM_LISTS = ("ttfts", "itls", "output_lens", "errors", "latencies", "input_lens")  # one entry per request


def _vllm_counts(values: list, key: str) -> np.ndarray:
    x = numbers(values, f"vllm.{key}", "token counts")
    fail(f"vllm.{key}", np.isnan(x) | (x < 0) | (x != np.round(x)), "not a whole number >= 0", "0, 1, 2, ...")
    return x


def read_vllm(data: dict) -> pd.DataFrame:
    """Per-request records of a ``vllm bench serve --save-result --save-detailed`` JSON.

    A request succeeded iff its error is empty and it produced something: vLLM's
    ``RequestFuncOutput`` starts with ``error = ""``, ``ttft = 0.0`` and no output tokens, and a
    request answered with a non-200 status keeps them but for ``error = response.reason or ""``
    (``vllm/benchmarks/lib/endpoint_request_func.py``), which is empty when the server gives no
    reason. Such a request is told apart by ttft = 0 and output_lens = 0 (vLLM saves 0 output
    tokens for every failure); a success has a measured, positive TTFT. The count must still
    equal the file's ``completed`` (vLLM's own count of ``success``), so a file this rule misreads
    is refused rather than summarised wrongly.

    Raises:
        JaxparetoError: a key missing, a per-request list of another length than ``ttfts``, a
            ``duration`` that is not a positive number, a time, count or error message that is
            not one (naming the ``vllm.`` field and row), or a success count other than the
            file's ``completed``.
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
    duration = real_number(data["duration"])
    if duration is None or not 0 < duration < math.inf:
        raise JaxparetoError("vllm.duration", f"{data['duration']!r} is not a positive number of seconds")
    ttft = numbers(data["ttfts"], "vllm.ttfts", "seconds")
    fail("vllm.ttfts", np.isnan(ttft) | (ttft < 0), "not a time >= 0 s", "seconds")
    output_lens = _vllm_counts(data["output_lens"], "output_lens")
    errors = data["errors"]
    fail("vllm.errors", np.array([e is not None and not isinstance(e, str) for e in errors], dtype=bool),
          "not an error message (text, empty for none)")
    ok = np.array([not e for e in errors], dtype=bool) & ~((ttft == 0) & (output_lens == 0))
    completed = real_number(data.get("completed", 0))
    if completed is None or not (math.isfinite(completed) and completed >= 0 and completed == round(completed)):
        raise JaxparetoError("vllm.completed", f"{data['completed']!r} is not a count of requests (a whole number >= 0)")
    if "completed" in data and int(ok.sum()) != completed:
        raise JaxparetoError("vllm.errors", f"{int(ok.sum())} requests succeeded (no error, and a TTFT or output "
                                            f"tokens) but completed = {data['completed']}")
    itls = number_lists(data["itls"], "vllm.itls")
    flat, row = flatten(itls)
    fail("vllm.itls", row_mask(n, row[flat < 0]), "itl gaps must be >= 0 s", "seconds")
    if "latencies" in data:
        end = numbers(data["latencies"], "vllm.latencies", "seconds")
        fail("vllm.latencies", np.isnan(end) | (end < 0), "not a time >= 0 s", "seconds")
        fail("vllm.latencies", ok & (end < ttft), "the latency is shorter than the request's ttft", "seconds")
    else:  # ttft + sum(itl), summed in order as Python's sum
        end = ttft + np.bincount(row, weights=flat, minlength=n)
    frame = pd.DataFrame({"start": np.zeros(n), "first_token": np.where(ok, ttft, np.nan), "end": end,
                          "output_tokens": output_lens, "success": ok,
                          "itl": [x if good else None for x, good in zip(itls, ok)]})
    if "input_lens" in data:
        frame["input_tokens"] = _vllm_counts(data["input_lens"], "input_lens")
    frame.attrs.update(duration_s=duration, duration_source="the vLLM result's duration field")
    return frame


def read_guidellm(data: dict, benchmark: int | None) -> pd.DataFrame:
    """Per-request records of one benchmark of a GuideLLM ``GenerativeBenchmarksReport`` JSON.

    Args:
        data: the parsed report.
        benchmark: index of the benchmark; None for a report that holds one.

    Raises:
        JaxparetoError: no benchmarks, several and no ``benchmark`` chosen, an index out of range,
            a request list holding a sample of the requests made, or a layout without
            ``info.timings``.
    """
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
