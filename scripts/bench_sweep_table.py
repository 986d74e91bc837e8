"""Rebuild the README's first "Benchmarks" table (configs/s of the Python loop, NumPy, jaxpareto's
damped and exact solvers, ``jp.sweep``, ``sweep_to_zarr`` and the Pareto front) from a run of
``benchmarks/bench_sweep.py``.

Runs ``python benchmarks/bench_sweep.py`` with the options given (``--quick``, ``--huge N``),
which writes ``benchmarks/results/bench_sweep_<platform>.json``, and prints that result as the
README's Markdown table. ``--from-recorded`` only formats the recorded JSON (seconds).
The README's (d) row quotes the range seen over several runs ("8 to 19 M"); one run gives one
figure. The ``--huge`` row appears only when the run had ``--huge``.

Run time on a 2-core CPU: about 1 minute (968,000 configurations); ``--huge 1e9`` adds about
2 minutes. ``--quick`` runs the benchmark's smaller grid (about 15 s) in a scratch copy, so the
recorded results are left alone; its figures are not the README's.

Usage: python scripts/bench_sweep_table.py [--quick] [--huge 1e9] [--from-recorded]
"""

from __future__ import annotations

import sys

from _common import benchmark_parser, benchmark_result, markdown_table

HEADER = ["what", "configs/s", "ratio"]


def rate(value: float) -> str:
    """28 K, 150 K, 6.0 M, 19 M: configurations per second as the README writes them."""
    if value >= 1e7:
        return f"{value / 1e6:.0f} M"
    if value >= 1e6:
        return f"{value / 1e6:.1f} M"
    return f"{value / 1e3:.0f} K" if value >= 1e3 else f"{value:.0f}"


def power_of_ten(value: float, short: bool = True) -> str:
    """1e7 (short) or 1.0e7 for 10,000,000; 2.5e6 for 2,500,000."""
    mantissa, exponent = f"{value:.1e}".split("e")
    if short:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def output_count() -> int:
    """How many output variables a sweep writes (the "every variable (26)" of the table)."""
    import jaxpareto as jp

    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1, think_time_s=0.0,
                  context_tokens=4096, hit_rate=0.0)
    return len(ds.data_vars)


def table(result: dict) -> str:
    r = result
    rows = [
        ["(a) plain Python loop of the model", rate(r["a_python_loop_configs_per_s"]), ""],
        ["(b) NumPy, vectorised, same damped stopping rule, gathering the active points",
         rate(r["b_numpy_configs_per_s"]), ""],
        ["(b') NumPy, the same with masked whole-array updates (the fair baseline)",
         rate(r["b_numpy_masked_configs_per_s"]), f"{r['b_numpy_masked_configs_per_s'] / r['b_numpy_configs_per_s']:.0f}x (b)"],
        [f"(c) jaxpareto, damped solver (model alone; compile {r['c_damped_compile_and_first_run_s']:.1f} s, separate)",
         rate(r["c_damped_configs_per_s"]),
         f"{r['c_damped_vs_numpy_masked']:.1f}x (b'), {r['c_damped_vs_numpy']:.0f}x (b), {r['c_damped_vs_python']:.0f}x (a)"],
        ["(d) jaxpareto, exact solver", rate(r["d_exact_configs_per_s"]),
         f"{r['exact_vs_damped']:.1f}x (c), {r['d_exact_vs_numpy_masked']:.1f}x (b')"],
        *([["(d) the same, 4 variables kept (TTFT, TPOT, output tokens/s per GPU and per user)",
             rate(r["d_exact_4_variables_configs_per_s"]),
             f"{r['d_exact_4_variables_configs_per_s'] / r['c_damped_configs_per_s']:.1f}x (c)"]]
          if "d_exact_4_variables_configs_per_s" in r else []),
        ["`jp.sweep` end to end, in memory, damped / exact",
         f"{rate(r['c_damped_sweep_configs_per_s'])} / {rate(r['d_exact_sweep_configs_per_s'])}",
         f"{r['c_damped_sweep_vs_numpy_masked']:.1f}x / {r['d_exact_sweep_vs_numpy_masked']:.1f}x (b')"],
        [f"`sweep_to_zarr`, every variable ({output_count()}), compressed, damped / exact",
         f"{rate(r['sweep_to_zarr_damped_configs_per_s'])} / {rate(r['sweep_to_zarr_exact_configs_per_s'])}", ""],
    ]
    if "e_reduced_exact_configs_per_s" in r:
        rows.append(["`jp.pareto_sweep`, exact: each cell's front over TP x concurrency and best points only",
                     rate(r["e_reduced_exact_configs_per_s"]), ""])
    if "huge" in r:
        h = r["huge"]
        rows.append([f"`sweep_to_zarr`, {power_of_ten(h['points'], short=False)} points, 3 variables, exact (`--huge {power_of_ten(h['points'])}`)",
                     f"{rate(h['configs_per_s'])} ({h['seconds']:.0f} s)",
                     f"peak RSS {h['peak_rss_mb']:.0f} MB, {h['disk_bytes_per_point']:.1f} bytes/point on disk"])
    rows.append([f"Pareto front of {power_of_ten(r['pareto_points'])} points (1e4 groups)", f"{r['pareto_s']:.1f} s", ""])
    return markdown_table(HEADER, rows)


def main() -> int:
    parser = benchmark_parser(__doc__, "bench_sweep")
    parser.add_argument("--huge", type=float, default=0, help="passed on: also stream this many points (e.g. 1e9)")
    args = parser.parse_args()
    result = benchmark_result("bench_sweep", args, ["--huge", f"{args.huge:g}"] if args.huge else [])
    print(f"device {result['device']}, {result['grid_points']:,} configurations per run"
          + (" (--quick: the benchmark's smaller grid; not the README's figures)" if args.quick else ""))
    print()
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
