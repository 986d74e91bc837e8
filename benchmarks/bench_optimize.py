"""Optimisation benchmark (not part of CI).

1. Scenarios solved per second by the three searches (exhaustive, bracketing, gradient) for
   growing concurrency ranges on 128 scenarios, with the bracketing and gradient searches'
   largest error against the exhaustive one, all in one run.
2. The batch of 10,000 scenarios (4 GPUs x 5 models x 10 think times x 10 contexts x 5 hit
   rates, C in [1, 1024], TP 1/2/4/8, two SLOs) by the default search: first call, once
   compiled, and the first call of a fresh process whose compilation cache is warm; and the
   exhaustive search once compiled, for the ratio.
3. One scenario: the median of 20 calls once compiled, and the first call of a fresh process
   with the compilation cache warm.
4. A continuous hardware what-if (bandwidth and memory, 3 scenarios).

The fresh processes run this file with ``--child`` and share the user compilation cache
(`jaxpareto.compilation_cache_dir`), which the parent's runs have just filled.

Usage: python benchmarks/bench_optimize.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

import jaxpareto as jp

SLO = {"ttft_ms": ("<=", 2000.0), "output_tokens_per_s_per_user": (">=", 20.0)}
ONE = dict(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=2.0, context_tokens=32768, hit_rate=0.9,
           constraints=SLO, tp=(1, 2, 4, 8), concurrency=(1, 1024))


def scenarios(n_think: int) -> dict:
    return dict(gpu=["h100-sxm", "h200-sxm", "b200", "mi300x"], model=["llama-3.1-70b", "llama-3.1-8b"],
                think_time_s=np.round(np.linspace(0.5, 20, n_think), 3).tolist(), context_tokens=[16384, 65536],
                hit_rate=[0.0, 0.9])


def many_scenarios(quick: bool) -> dict:
    """10,000 scenarios (1,000 with --quick)."""
    return dict(gpu=["h100-sxm", "h200-sxm", "b200", "mi300x"],
                model=["llama-3.1-70b", "llama-3.1-8b", "qwen3-235b-a22b", "mixtral-8x7b", "gpt-oss-120b"],
                think_time_s=np.round(np.linspace(0.5, 20, 2 if quick else 10), 3).tolist(),
                context_tokens=np.linspace(8192, 126_976, 5 if quick else 10).astype(int).tolist(),
                hit_rate=[0.0, 0.5, 0.7, 0.9, 0.95])


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def child(what: str, quick: bool) -> None:
    """A fresh process: the first call's time, printed as JSON."""
    kw = dict(**many_scenarios(quick), constraints=SLO, tp=(1, 2, 4, 8), concurrency=(1, 1024)) if what == "many" \
        else ONE
    seconds, _ = timed(lambda: jp.optimize(**kw))
    print(json.dumps({"first_call_s": seconds}))


def fresh_process(what: str, quick: bool) -> float:
    args = [sys.executable, __file__, "--child", what] + (["--quick"] if quick else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["first_call_s"]


def ranges(quick: bool) -> list[dict]:
    grid = scenarios(2 if quick else 4)
    n = int(np.prod([len(v) for v in grid.values()]))
    rows = []
    for hi in ([256, 4096] if quick else [256, 1024, 4096, 16384, 65536]):
        kw = dict(constraints=SLO, tp=(1, 2, 4, 8), concurrency=(1, hi))
        row = {"points_per_scenario": 4 * hi, "scenarios": n}
        results = {}
        for method in ("exhaustive", "bracket", "gradient"):
            jp.optimize(**grid, **kw, method=method)  # compile
            seconds, results[method] = timed(lambda: jp.optimize(**grid, **kw, method=method))
            row[f"{method}_scenarios_per_s"] = n / seconds
        exact = results["exhaustive"]
        ok = exact.feasible.values
        for method in ("bracket", "gradient"):
            rel = np.abs(results[method].value.values[ok] - exact.value.values[ok]) / exact.value.values[ok]
            row[f"{method}_within_0.5pct"] = float((rel <= 0.005).mean())
            row[f"{method}_max_rel_error"] = float(rel.max())
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", choices=("many", "one"))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.quick)
        return
    device = jax.devices()[0]
    result = {"device": f"{device.platform}:{device.device_kind}", "rows": ranges(args.quick)}

    grid = dict(**many_scenarios(args.quick), constraints=SLO, tp=(1, 2, 4, 8), concurrency=(1, 1024))
    first, found = timed(lambda: jp.optimize(**grid))
    warm, _ = timed(lambda: jp.optimize(**grid))
    jp.optimize(**grid, method="exhaustive")  # compile
    exhaustive, exact = timed(lambda: jp.optimize(**grid, method="exhaustive"))
    ok = exact.feasible.values
    same = bool((found.feasible.values == ok).all())
    rel = np.abs(found.value.values[ok] / exact.value.values[ok] - 1)
    result["batch"] = {"scenarios": int(found.feasible.size), "method": found.attrs["method"],
                       "first_call_s": first, "compiled_s": warm,
                       "fresh_process_warm_cache_s": fresh_process("many", args.quick),
                       "exhaustive_compiled_s": exhaustive, "same_feasibility": same,
                       "max_rel_error_vs_exhaustive": float(rel.max())}
    print(result["batch"], flush=True)

    jp.optimize(**ONE)
    calls = [timed(lambda: jp.optimize(**ONE))[0] for _ in range(20)]
    result["one_scenario"] = {"compiled_median_ms": 1e3 * statistics.median(calls),
                              "fresh_process_warm_cache_s": fresh_process("one", args.quick)}
    print(result["one_scenario"], flush=True)

    whatif = lambda: jp.optimize(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=2.0,  # noqa: E731
                                 context_tokens=[16384, 32768, 65536], hit_rate=0.9, tp=8, concurrency=16,
                                 constraints=SLO, variables=("bandwidth_gbs", "memory_gb"))
    whatif()
    t_whatif, best = timed(whatif)
    result["whatif_bandwidth_memory_3_scenarios_s"] = t_whatif
    result["whatif_result"] = {"bandwidth_gbs": best.hardware.bandwidth_gbs, "memory_gb": best.hardware.memory_gb}
    out = Path(__file__).parent / "results" / f"bench_optimize_{device.platform}{'_quick' if args.quick else ''}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
