"""Rebuild the figures of the README's "Solvers" section: how closely the exact solver (the
closed-form fixed point) agrees with the default damped iteration, that it never fails to
converge, and how much faster it is.

Sweeps one grid over every catalog GPU and model (dense, MoE and MLA; infeasible points included)
with both solvers through ``jp.sweep``, and prints as a Markdown table: the largest relative
difference of the continuous outputs where the damped iteration converged quickly (< 200
updates) and wherever it converged, the unconverged counts, and the configs/s of both (steady
state, end to end in memory). The README's figures come from tests/test_exact_solver.py (12,000
random points); this grid is larger and regular, so its largest differences can sit a little
lower or higher than the test's bounds (1e-5 fast, 1e-4 everywhere).

Run time on a 2-core CPU: about 20 s (1,267,200 configurations, each solver run three times);
``--quick`` uses 3 GPUs x 4 models and a coarser grid (about 6 s).

Usage: python scripts/solver_agreement.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import jaxpareto as jp
from _common import markdown_table

CONTINUOUS = ("ttft_ms", "tpot_ms", "latency_ms", "batch_eff", "gpu_active_ratio", "turns_per_s",
              "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu", "t_weight_ms", "t_kv_ms", "t_compute_ms")
FAST_ITERATIONS = 200


def grid(quick: bool) -> dict:
    gpus, models = list(jp.catalog.gpus()), list(jp.catalog.models())
    if quick:
        gpus = ["h100-sxm", "b200", "mi300x"]
        models = ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "qwen3-235b-a22b"]
    return dict(
        gpu=gpus, model=models,
        tp=[1, 8, 32] if quick else [1, 2, 4, 8, 16, 32],
        concurrency=np.unique(np.round(np.geomspace(1, 4096, 8 if quick else 10))).astype(int).tolist(),
        think_time_s=[0.0, 0.1, 2.0, 60.0] if quick else [0.0, 0.01, 0.3, 2.0, 10.0, 120.0],
        context_tokens=np.unique(np.round(np.geomspace(64, 400_000, 6 if quick else 8))).astype(int).tolist(),
        hit_rate=[0.0, 0.5, 0.9, 1.0],
    )


def timed_sweep(g: dict, solver: str, repeat: int) -> tuple:
    """(best seconds of ``repeat`` calls after a first, compiling one; the dataset)."""
    ds = jp.sweep(**g, solver=solver)
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        ds = jp.sweep(**g, solver=solver)
        best = min(best, time.perf_counter() - start)
    return best, ds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 GPUs x 4 models, coarser grid (checks the script)")
    args = parser.parse_args()
    g = grid(args.quick)
    repeat = 1 if args.quick else 2
    t_damped, damped = timed_sweep(g, "damped", repeat)
    t_exact, exact = timed_sweep(g, "exact", repeat)
    points = int(damped.feasible.size)
    feasible = damped.feasible.values
    moe = np.asarray([jp.catalog.models()[m].is_moe for m in g["model"]])[None, :, None, None, None, None, None]
    if not np.array_equal(feasible, exact.feasible.values):
        sys.exit("the two solvers disagree on feasibility")
    both = feasible & damped.converged.values
    fast = both & (damped.iterations.values < FAST_ITERATIONS)

    def largest(where):
        worst, name = 0.0, ""
        for var in CONTINUOUS:
            a, b = damped[var].values[where], exact[var].values[where]
            rel = float(np.max(np.abs(a - b) / np.abs(b))) if a.size else 0.0
            if rel > worst:
                worst, name = rel, var
        return f"{worst:.1e} ({name})"

    rows = [
        ["configurations (feasible, MoE among them)",
         f"{points:,} ({int(feasible.sum()):,}, {int((feasible & moe).sum()):,})"],
        [f"largest relative difference, damped converged in < {FAST_ITERATIONS} updates", largest(fast)],
        ["largest relative difference, every converged point", largest(both)],
        ["feasible points not converged, damped / exact",
         f"{int((feasible & ~damped.converged.values).sum())} / {int((feasible & ~exact.converged.values).sum())}"],
        ["configs/s end to end in memory, damped / exact",
         f"{points / t_damped / 1e6:.1f} M / {points / t_exact / 1e6:.1f} M ({t_damped / t_exact:.1f}x)"],
    ]
    print(f"exact against damped solver over {len(g['gpu'])} GPUs x {len(g['model'])} models"
          + (" (--quick: a coarser grid than the full run)" if args.quick else ""))
    print()
    print(markdown_table(["figure", "value"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
