"""What the opt-in model options cost (not part of CI): configs/s of `jp.sweep` on one grid with
the seed's equations and with each option of `jaxpareto.definitions.options.ModelOptions`, in one run, as
ratios to the seed's damped solver.

Grid: Llama-3.1-70B and Qwen3-235B-A22B on H100 and B200, TP 1/2/4/8, 64 log-spaced
concurrencies 1-1024, 4 think times 0-30 s, 8 contexts 4K-128K, 5 hit rates (133,120 points
once rounded concurrencies repeat, every output kept). Under Poisson arrivals as many
log-spaced request rates, 0.01-100 per second, stand in for the concurrencies (the points
beyond capacity are flagged and cost little). Compilation is timed separately (the first call); the steady
state is the best of three further calls, each blocking on the result.

Usage: python benchmarks/bench_models.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np

import jaxpareto as jp

VARIANTS = {
    "seed (damped)": {},
    "seed (exact)": {"solver": "exact"},
    "ttl": {"cache_ttl_s": 60.0},
    "measured profile": {"profile": "measured"},
    "measured profile (exact)": {"profile": "measured", "solver": "exact"},
    "lru": {"cache_model": "lru"},
    "shared prefill": {"prefill_model": "shared"},
    "shared prefill (newton)": {"prefill_model": "shared", "solver": "newton"},
    "measured profile + shared prefill": {"profile": "measured", "prefill_model": "shared"},
    "shared + lru": {"prefill_model": "shared", "cache_model": "lru"},
    "shared + lru (newton)": {"prefill_model": "shared", "cache_model": "lru", "solver": "newton"},
    "lru, lognormal pauses": {"cache_model": "lru", "pause_distribution": "lognormal"},
    "lru, lognormal pauses (newton)": {"cache_model": "lru", "pause_distribution": "lognormal", "solver": "newton"},
    "shared + lru + host tier": {"prefill_model": "shared", "cache_model": "lru", "tier_capacity_gb": 1024.0,
                                 "tier_bandwidth_gbs": 64.0},
    # Poisson arrivals of agent sessions of 8 turns: the load axis is request_rate (as many rates as
    # concurrencies), percentiles on
    "open loop, shared prefill": {"arrivals": "poisson", "prefill_model": "shared", "turns_per_session": 8},
}


def grid(quick: bool) -> dict:
    return dict(gpu=["h100-sxm", "b200"], model=["llama-3.1-70b", "qwen3-235b-a22b"], tp=[1, 2, 4, 8],
                concurrency=np.unique(np.round(np.geomspace(1, 1024, 16 if quick else 64))).astype(int).tolist(),
                think_time_s=[0.0, 2.0, 10.0, 30.0],
                context_tokens=np.unique(np.round(np.geomspace(4096, 131072, 4 if quick else 8))).astype(int).tolist(),
                hit_rate=[0.0, 0.5, 0.8, 0.9, 0.95])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    args = parser.parse_args()
    g = grid(args.quick)
    results = {}
    base = None
    for name, options in VARIANTS.items():
        axes = g
        if options.get("arrivals") == "poisson":  # the same number of points, rates for concurrencies
            axes = {**{k: v for k, v in g.items() if k != "concurrency"},
                    "request_rate": np.geomspace(0.01, 100.0, len(g["concurrency"])).tolist()}
        start = time.perf_counter()
        ds = jp.sweep(**axes, **options)
        first = time.perf_counter() - start
        best = np.inf
        for _ in range(3):
            start = time.perf_counter()
            ds = jp.sweep(**axes, **options)
            best = min(best, time.perf_counter() - start)
        points = int(ds.feasible.size)
        rate = points / best
        base = base or rate
        feasible = ds.feasible.values
        results[name] = {"points": points, "compile_and_first_s": round(first, 3), "steady_s": round(best, 3),
                         "configs_per_s": round(rate), "ratio_to_seed_damped": round(rate / base, 3),
                         "converged_share_of_feasible": float(ds.converged.values[feasible].mean())}
        print(f"{name:28s} {points:>9,} points  first {first:6.2f} s  steady {best:6.2f} s  "
              f"{rate / 1e6:6.2f} M/s  x{rate / base:.2f}  converged {results[name]['converged_share_of_feasible']:.4f}")
    out = Path(__file__).parent / "results" / f"bench_models_{jax.devices()[0].platform}.json"
    out.write_text(json.dumps({"device": str(jax.devices()[0]), "machine": platform.machine(),
                               "jax": jax.__version__, "quick": args.quick, "results": results}, indent=2) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
