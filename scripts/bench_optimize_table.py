"""Rebuild the optimiser's benchmark figures that the README quotes (section "Optimal
configurations under SLOs", **Methods** and **Many scenarios**) from a run of
``benchmarks/bench_optimize.py``: scenarios/s of the exhaustive, bracketing and gradient searches
per concurrency range, with the bracketing and gradient searches' largest error against the
exhaustive one; the 10,000-scenario batch (first call, once compiled, a fresh process with the
compilation cache warm, and the exhaustive search once compiled); one scenario.

Runs ``python benchmarks/bench_optimize.py`` (which writes
``benchmarks/results/bench_optimize_<platform>.json``) and prints its result as a Markdown table,
one row per concurrency range, then the batch and one-scenario figures. ``--from-recorded`` only
formats the recorded JSON (seconds).

Run time on a 2-core CPU: about 5 minutes. ``--quick`` runs 2 ranges on 64 scenarios and a
batch of 1,000 (about 1 minute) in a scratch copy, so the recorded results are left alone; its
figures are not the README's.

Usage: python scripts/bench_optimize_table.py [--quick] [--from-recorded]
"""

from __future__ import annotations

import sys

from _common import benchmark_parser, benchmark_result, markdown_table

HEADER = ["concurrencies per TP", "exhaustive (scenarios/s)", "bracket", "gradient", "bracket / exhaustive",
          "bracket's largest error", "gradient's largest error"]
TP_CHOICES = 4  # the benchmark's TP 1/2/4/8


def table(rows: list[dict]) -> str:
    body = []
    for row in rows:
        ex, br, gr = (row[f"{m}_scenarios_per_s"] for m in ("exhaustive", "bracket", "gradient"))
        body.append([f"{row['points_per_scenario'] // TP_CHOICES:,}", f"{ex:,.0f}", f"{br:,.0f}", f"{gr:,.0f}",
                     f"{br / ex:.2g}x" if br / ex < 100 else f"{br / ex:,.0f}x",
                     f"{row['bracket_max_rel_error'] * 100:.2g} %", f"{row['gradient_max_rel_error'] * 100:.2g} %"])
    return markdown_table(HEADER, body)


def summary(result: dict) -> list[str]:
    batch, one = result["batch"], result["one_scenario"]
    return [
        f"{batch['scenarios']:,} scenarios ({batch['method']} search): {batch['first_call_s']:.1f} s first call, "
        f"{batch['compiled_s']:.2f} s once compiled, {batch['fresh_process_warm_cache_s']:.1f} s in a fresh process "
        f"with the compilation cache warm; the exhaustive search {batch['exhaustive_compiled_s']:.1f} s once compiled "
        f"({batch['exhaustive_compiled_s'] / batch['compiled_s']:.0f}x); same feasibility: {batch['same_feasibility']}, "
        f"largest error {batch['max_rel_error_vs_exhaustive']:.1g}",
        f"one scenario: {one['compiled_median_ms']:.1f} ms once compiled (median of 20), "
        f"{one['fresh_process_warm_cache_s']:.2f} s in a fresh process with the compilation cache warm",
        f"hardware what-if (bandwidth and memory, 3 scenarios): {result['whatif_bandwidth_memory_3_scenarios_s']:.1f} s"
        f" -> {result['whatif_result']['bandwidth_gbs']:,.0f} GB/s, {result['whatif_result']['memory_gb']:.1f} GB",
    ]


def main() -> int:
    args = benchmark_parser(__doc__, "bench_optimize", what="run").parse_args()
    result = benchmark_result("bench_optimize", args)
    print(f"device {result['device']}, {result['rows'][0]['scenarios']} scenarios per range, SLOs TTFT <= 2 s and "
          f">= 20 tokens/s per user" + (" (--quick: not the README's figures)" if args.quick else ""))
    print()
    print(table(result["rows"]))
    print()
    for line in summary(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
