"""Rebuild the README's second "Benchmarks" table (what the opt-in model options cost: configs/s
of ``jp.sweep`` with the seed's equations and with each option) from a run of
``benchmarks/bench_models.py``.

Runs ``python benchmarks/bench_models.py`` (which writes
``benchmarks/results/bench_models_<platform>.json``) and prints its result as the README's
Markdown table. ``--from-recorded`` only formats the recorded JSON (seconds).

Run time on a 2-core CPU: a few minutes (133,120 points, 15 variants, each compiled once and
timed 3 times). ``--quick`` runs the benchmark's smaller grid (about 25 s) in a scratch copy,
so the recorded results are left alone; its figures are not the README's.

Usage: python scripts/bench_models_table.py [--quick] [--from-recorded]
"""

from __future__ import annotations

import sys

from _common import benchmark_parser, benchmark_result, markdown_table

HEADER = ["equations", "configs/s", "ratio to the seed's damped solver"]
# README label -> the benchmark's variant name, in the README's order (the two seed solvers share a row).
ROWS = {
    '`cache_model="ttl"`': "ttl",
    '`profile="measured"`': "measured profile",
    '`profile="measured"`, `solver="exact"`': "measured profile (exact)",
    '`cache_model="lru"` (exponential pauses)': "lru",
    '`prefill_model="shared"`': "shared prefill",
    '`prefill_model="shared"`, `solver="newton"`': "shared prefill (newton)",
    "measured profile + shared prefill": "measured profile + shared prefill",
    "shared + LRU (exponential pauses)": "shared + lru",
    'shared + LRU, `solver="newton"`': "shared + lru (newton)",
    "LRU with lognormal pauses": "lru, lognormal pauses",
    'LRU with lognormal pauses, `solver="newton"`': "lru, lognormal pauses (newton)",
    "shared + LRU + host tier": "shared + lru + host tier",
    '`arrivals="poisson"`, shared prefill (52 request rates in place of the concurrencies)':
        "open loop, shared prefill",
}


def rate(value: float) -> str:
    """1.8 M, 0.89 M, 74 K: configurations per second as the README writes them."""
    if value >= 1e6:
        return f"{value / 1e6:.1f} M"
    if value >= 1e5:
        return f"{value / 1e6:.2f} M"
    return f"{value / 1e3:.0f} K"


def ratio(value: float) -> str:
    if value < 0.01:  # two significant digits: 0.0041, not 0.00
        return f"{value:.2g}"
    return f"{value:.1f}" if value >= 0.995 else f"{value:.2f}"


def table(results: dict) -> str:
    base = results["seed (damped)"]["configs_per_s"]
    exact = results["seed (exact)"]["configs_per_s"]
    rows = [["seed, damped / exact solver", f"{rate(base)} / {rate(exact)}", f"1 / {ratio(exact / base)}"]]
    for label, variant in ROWS.items():
        if variant in results:
            value = results[variant]["configs_per_s"]
            rows.append([label, rate(value), ratio(value / base)])
    return markdown_table(HEADER, rows)


def main() -> int:
    args = benchmark_parser(__doc__, "bench_models").parse_args()
    result = benchmark_result("bench_models", args, quick_suffix=False)
    results = result["results"]
    points = results["seed (damped)"]["points"]
    unconverged = {k: v["converged_share_of_feasible"] for k, v in results.items() if v["converged_share_of_feasible"] < 1}
    print(f"device {result['device']}, {points:,} points per variant, steady state after compilation"
          + (" (--quick: the benchmark's smaller grid; not the README's figures)" if result.get("quick") else ""))
    print("every point converged" if not unconverged else f"converged share of feasible points: {unconverged}")
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
