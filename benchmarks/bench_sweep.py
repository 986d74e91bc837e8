"""Sweep throughput benchmark (not part of CI): configs/s of a plain Python scalar loop of the
model against jaxpareto's vmapped sweep, the sweep end to end into a zarr store, and Pareto
extraction, all in one run on the same grid, results written as JSON.

Grid (issue 4's named grid): Llama-3.1-70B FP16 on H200, TP 1-8, 160 log-spaced concurrencies
1-1024, think time 0-30 s (5 values), 40 contexts 2K-200K, 11 hit rates: 968,000 points when
the rounded concurrencies are unique... (the exact count is printed).

Usage: python benchmarks/bench_sweep.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

import jaxpareto as jp
from jaxpareto.grid import evaluate_block
from jaxpareto.pareto import front_mask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference import reference_point  # noqa: E402  (the plain-Python scalar model)


def grid(quick: bool) -> dict:
    return dict(
        gpu="h200-sxm", model="llama-3.1-70b", tp=[1, 2, 4, 8],
        concurrency=np.unique(np.round(np.geomspace(1, 1024, 40 if quick else 160))).astype(int).tolist(),
        think_time_s=[0.0, 1.0, 5.0, 15.0, 30.0],
        context_tokens=np.unique(np.round(np.geomspace(2048, 200_000, 10 if quick else 40))).astype(int).tolist(),
        hit_rate=np.linspace(0.0, 1.0, 11).tolist(),
    )


def timed(fn, repeat=3):
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smaller grid for a smoke run")
    args = parser.parse_args()
    g = grid(args.quick)
    points = int(np.prod([len(v) if isinstance(v, list) else 1 for v in g.values()]))
    results = {"device": str(jax.devices()[0]), "platform": platform.platform(), "jax": jax.__version__,
               "grid_points": points}

    # Compilation and steady state, separately (the first call compiles).
    start = time.perf_counter()
    jp.sweep(**g)
    results["first_sweep_s_with_compile"] = time.perf_counter() - start
    assert evaluate_block._cache_size() >= 1
    steady, ds = timed(lambda: jp.sweep(**g))
    results["jaxpareto_damped_configs_per_s"] = points / steady
    results["mean_iterations"] = float(ds.iterations.where(ds.feasible).mean())

    # Plain Python scalar loop on a random sample of the same grid, extrapolated per config.
    gpu = jp.catalog.gpus()["h200-sxm"].to_dict()
    model = jp.catalog.models()["llama-3.1-70b"].to_dict()
    rng = np.random.default_rng(0)
    sample = [(int(rng.choice(g["tp"])), int(rng.choice(g["concurrency"])), float(rng.choice(g["think_time_s"])),
               int(rng.choice(g["context_tokens"])), float(rng.choice(g["hit_rate"]))) for _ in range(2000)]
    start = time.perf_counter()
    for tp, c, z, ctx, h in sample:
        reference_point(gpu, model, tp, c, z, ctx, h)
    python_rate = len(sample) / (time.perf_counter() - start)
    results["python_loop_configs_per_s"] = python_rate
    results["speedup_vs_python_loop"] = results["jaxpareto_damped_configs_per_s"] / python_rate

    # End to end: sweep and write a compressed zarr store.
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        jp.to_zarr(jp.sweep(**g), Path(tmp) / "bench.zarr")
        results["sweep_to_zarr_configs_per_s"] = points / (time.perf_counter() - start)

    # Pareto extraction on 1e7 points (1e6 with --quick) in 1e4 groups.
    n = 1_000_000 if args.quick else 10_000_000
    x = rng.random((10_000, n // 10_000))
    y = rng.random((10_000, n // 10_000))
    valid = rng.random(x.shape) > 0.05
    pareto_s, _ = timed(lambda: front_mask(x, y, valid), repeat=1)
    results["pareto_points"] = n
    results["pareto_s"] = pareto_s
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    out = Path(__file__).parent / "results" / f"bench_sweep{'_quick' if args.quick else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    for key, value in results.items():
        print(f"{key:40s} {value:,.3f}" if isinstance(value, float) else f"{key:40s} {value}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
