"""Optimisation benchmark (not part of CI): scenarios solved per second by the exhaustive search
and by the batched gradient search, at equal accuracy, for growing concurrency ranges, and the
time of a continuous hardware what-if. Its crossover sets `AUTO_EXHAUSTIVE_MAX_POINTS`.

Usage: python benchmarks/bench_optimize.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

import jaxpareto as jp

SLO = {"ttft_ms": ("<=", 2000.0), "output_tokens_per_s_per_user": (">=", 20.0)}


def scenarios(n_think: int) -> dict:
    return dict(gpu=["h100-sxm", "h200-sxm", "b200", "mi300x"], model=["llama-3.1-70b", "llama-3.1-8b"],
                think_time_s=np.round(np.linspace(0.5, 20, n_think), 3).tolist(), context_tokens=[16384, 65536],
                hit_rate=[0.0, 0.9])


def timed(fn):
    fn()  # compile
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    grid = scenarios(2 if args.quick else 4)
    n = int(np.prod([len(v) for v in grid.values()]))
    device = jax.devices()[0]
    rows = []
    for hi in ([256, 4096] if args.quick else [256, 1024, 4096, 16384, 65536]):
        kw = dict(constraints=SLO, tp=(1, 2, 4, 8), concurrency=(1, hi))
        t_ex, ex = timed(lambda: jp.optimize(**grid, **kw, method="exhaustive"))
        t_gr, gr = timed(lambda: jp.optimize(**grid, **kw, method="gradient"))
        ok = ex.feasible.values
        rel = np.abs(gr.value.values[ok] - ex.value.values[ok]) / ex.value.values[ok]
        rows.append({"points_per_scenario": 4 * hi, "scenarios": n,
                     "exhaustive_scenarios_per_s": n / t_ex, "gradient_scenarios_per_s": n / t_gr,
                     "gradient_within_0.5pct": float((rel <= 0.005).mean()), "gradient_max_rel_error": float(rel.max())})
        print(rows[-1])
    t_whatif, best = timed(lambda: jp.optimize(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=2.0,
                                               context_tokens=[16384, 32768, 65536], hit_rate=0.9, tp=8, concurrency=16,
                                               constraints=SLO, variables=("bandwidth_gbs", "memory_gb")))
    result = {"device": f"{device.platform}:{device.device_kind}", "rows": rows,
              "whatif_bandwidth_memory_3_scenarios_s": t_whatif,
              "whatif_result": {"bandwidth_gbs": best.hardware.bandwidth_gbs, "memory_gb": best.hardware.memory_gb}}
    out = Path(__file__).parent / "results" / f"bench_optimize_{device.platform}{'_quick' if args.quick else ''}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
