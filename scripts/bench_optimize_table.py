"""Rebuild the optimiser's benchmark figures that the README quotes (section "Optimal
configurations under SLOs", **Methods**: exhaustive and gradient search equally fast, about 300
scenarios/s each, at 16,384 points per scenario; the gradient search 3x faster at 65,536; every
gradient answer within 0.06 % of the exhaustive one) from a run of ``benchmarks/bench_optimize.py``.

Runs ``python benchmarks/bench_optimize.py`` (which writes
``benchmarks/results/bench_optimize_<platform>.json``) and prints its result as a Markdown table,
one row per concurrency range, followed by the crossover and the largest error. The README has
these figures in its text, not as a table. ``--from-recorded`` only formats the recorded JSON
(seconds).

Run time on a 2-core CPU: about 1 minute (128 scenarios, 5 ranges, each search compiled once
and timed once, and a hardware what-if). ``--quick`` runs the benchmark's 2 ranges on 64
scenarios (about 15 s) in a scratch copy, so the recorded results are left alone; its figures
are not the README's.

Usage: python scripts/bench_optimize_table.py [--quick] [--from-recorded]
"""

from __future__ import annotations

import sys

from _common import benchmark_parser, benchmark_result, markdown_table

HEADER = ["points per scenario", "exhaustive (scenarios/s)", "gradient (scenarios/s)", "gradient / exhaustive",
          "gradient's largest error"]


def table(rows: list[dict]) -> str:
    body = []
    for row in rows:
        ex, gr = row["exhaustive_scenarios_per_s"], row["gradient_scenarios_per_s"]
        body.append([f"{row['points_per_scenario']:,}", f"{ex:,.0f}", f"{gr:,.0f}", f"{gr / ex:.1f}x",
                     f"{row['gradient_max_rel_error'] * 100:.2g} %"])
    return markdown_table(HEADER, body)


def summary(result: dict) -> list[str]:
    rows = result["rows"]
    lines = []
    faster = [r for r in rows if r["gradient_scenarios_per_s"] >= r["exhaustive_scenarios_per_s"]]
    if faster:
        first = faster[0]
        beyond = ", ".join(f"{r['gradient_scenarios_per_s'] / r['exhaustive_scenarios_per_s']:.0f}x at "
                           f"{r['points_per_scenario']:,}" for r in faster[1:])
        lines.append(f"the gradient search is at least as fast from {first['points_per_scenario']:,} points per "
                     f"scenario ({first['exhaustive_scenarios_per_s']:,.0f} vs {first['gradient_scenarios_per_s']:,.0f}"
                     f" scenarios/s)" + (f"; beyond: {beyond}" if beyond else ""))
    else:
        lines.append("the exhaustive search is faster at every range measured")
    worst = max(r["gradient_max_rel_error"] for r in rows)
    within = min(r["gradient_within_0.5pct"] for r in rows)
    lines.append(f"every gradient answer within {worst * 100:.2g} % of the exhaustive one "
                 f"({within * 100:.0f} % of scenarios within 0.5 %)")
    lines.append(f"hardware what-if (bandwidth and memory, 3 scenarios): {result['whatif_bandwidth_memory_3_scenarios_s']:.1f} s"
                 f" -> {result['whatif_result']['bandwidth_gbs']:,.0f} GB/s, {result['whatif_result']['memory_gb']:.1f} GB")
    return lines


def main() -> int:
    args = benchmark_parser(__doc__, "bench_optimize", what="run").parse_args()
    result = benchmark_result("bench_optimize", args)
    print(f"device {result['device']}, {result['rows'][0]['scenarios']} scenarios per batch, SLOs TTFT <= 2 s and "
          f">= 20 tokens/s per user" + (" (--quick: not the README's figures)" if args.quick else ""))
    print()
    print(table(result["rows"]))
    print()
    for line in summary(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
