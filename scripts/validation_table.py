"""Rebuild the README's MAPE table (section "Measurements", after **Calibration.**): MAPE (%) over
all 106 rows of the validation set, and on the held-out rows, before and after calibration, plus
the "Fitted: ..." line below it.

Columns: the seed's equations with the isolated prefill (``jp.validate()``), the same with the
shared prefill engine (``prefill_model="shared"``), the calibrated factors with the shared
engine, the measured GEMM rate, attention's FLOPs and the per-operator roofline
(``gemm_rate="measured"``, ``attention="flops"``, ``roofline="operator"``, as
``sweeps/calibration.toml`` is fitted), and the held-out rows (``jp.calibrate``'s default split: 30 % of each source x metric
group, seed 0) before -> after. The calibrated factors come from a fresh ``jp.calibrate`` fit
(400 Adam steps, as ``jaxpareto calibrate --gemm-rate measured --attention flops --roofline operator
--arrivals poisson`` wrote
``sweeps/calibration.toml``), or from a calibration file with ``--calibration FILE``. Every column
evaluates the runs alike: by default the MLPerf server rows in the open loop, Poisson arrivals as
the benchmark runs them (with ``--calibration``: as that file's fit did, its ``[fit] arrivals``);
``--arrivals staggered`` matches them in the closed loop instead.

Run time on a 2-core CPU: about 6 minutes for the full fit in the open loop (about 3 in the
closed loop); ``--quick`` fits 15 steps instead (about 1 minute; the
calibrated columns then differ from the README's); ``--calibration sweeps/calibration.toml``
skips the fit (the held-out split is `jp.calibrate`'s, without fitting) and reproduces the
README's numbers (about a minute).

Usage: python scripts/validation_table.py [--quick | --steps N | --calibration FILE.toml]
                                          [--arrivals staggered|synchronised|poisson]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

import jaxpareto as jp
from jaxpareto.definitions.calibration_file import calibration_arrivals, calibration_efficiency, calibration_options
from jaxpareto.measure.calibrate import split_rows
from jaxpareto.measure.predict import validation_rows
from jaxpareto.definitions.options import ARRIVALS
from _common import REPO, markdown_table, timed

HEADER = ["metric", "seed, isolated prefill", "seed, shared prefill",
          "calibrated, shared, measured GEMM rate, attention FLOPs, per-operator roofline",
          "held out: before → after"]
# README row label per validation-set metric, in the README's order; then "all".
METRICS = {"output_tokens_per_s_total": "output tokens/s", "tpot_ms": "TPOT", "itl_ms": "ITL (vLLM, Llama-3.1-8B)",
           "ttft_ms": "TTFT"}


def mape(table: pd.DataFrame, mask=None) -> dict[str, float]:
    """MAPE (%) per metric and over all rows of a ``jp.validate`` table: mean |predicted /
    measured - 1| x 100 over the scored rows (no flag, a finite prediction), as ``validate``
    reports it."""
    if mask is not None:
        table = table[np.asarray(mask)]
    scored = table[table["flag"].eq("") & np.isfinite(table["rel_error"])]
    out = {metric: float(group["rel_error"].abs().mean() * 100) for metric, group in scored.groupby("metric")}
    out["all"] = float(scored["rel_error"].abs().mean() * 100) if len(scored) else np.nan
    return out


# the model of the calibrated column, as `jaxpareto calibrate` fitted sweeps/calibration.toml
FITTED_MODEL = {"prefill_model": "shared", "gemm_rate": "measured", "attention": "flops", "roofline": "operator"}


def read_efficiency(path: str) -> jp.Efficiency:
    """The factors of a calibration file, which must have been fitted with the model of the
    table's calibrated column (`FITTED_MODEL`)."""
    fitted_with = {key: calibration_options(path).get(key) for key in FITTED_MODEL}
    if fitted_with != FITTED_MODEL:
        sys.exit(f"{path} was fitted with {fitted_with}; the table's calibrated column is {FITTED_MODEL}")
    return calibration_efficiency(path)


def fitted_line(eff: jp.Efficiency) -> str:
    return (f"Fitted: η_p {eff.eta_prefill:.2f}, η_d {eff.eta_decode:.2f}, decode overhead "
            f"{eff.decode_overhead_ms:.1f} ms, TTFT overhead {eff.ttft_overhead_ms:.0f} ms, all-reduce at "
            f"{eff.allreduce_scale:.2f}x the link's peak time plus {eff.allreduce_latency_us:.0f} µs each.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="fit 15 steps only (checks the script; numbers differ)")
    group.add_argument("--steps", type=int, default=400, help="Adam steps of the fit (default 400, as `jaxpareto "
                                                                "calibrate`)")
    group.add_argument("--calibration", metavar="FILE.toml",
                       help=f"use this file's factors instead of fitting (e.g. {REPO / 'sweeps' / 'calibration.toml'})")
    parser.add_argument("--arrivals", choices=ARRIVALS,
                        help="how every column scores the server rows (default: the --calibration file's fit's, "
                             "else poisson)")
    args = parser.parse_args()
    arrivals = args.arrivals or (calibration_arrivals(args.calibration) if args.calibration else "poisson")
    shared = jp.ModelOptions(prefill_model="shared", arrivals=arrivals)
    fitted_model = shared._replace(**FITTED_MODEL)  # what sweeps/calibration.toml is fitted with

    with timed("validate, seed equations"):
        seed_table = jp.validate(options=jp.ModelOptions(arrivals=arrivals))
        isolated = mape(seed_table)
    with timed("validate, seed equations with the shared prefill"):
        before = jp.validate(options=shared)
    if args.calibration:
        efficiency = read_efficiency(args.calibration)
        with timed("validate, calibrated"):
            after = jp.validate(efficiency=efficiency, options=fitted_model)
        test = split_rows(validation_rows(None))  # `jp.calibrate`'s default split, without a fit
    else:
        steps = 15 if args.quick else args.steps
        with timed(f"calibrate ({steps} steps)"):
            result = jp.calibrate(steps=steps, options=fitted_model)
        efficiency, after, test = result.efficiency, result.after, result.test
    seed_shared, calibrated = mape(before), mape(after)
    held_before, held_after = mape(before, test), mape(after, test)

    rows = []
    for metric, label in [*METRICS.items(), ("all", "all")]:
        rows.append([label, f"{isolated[metric]:.1f}", f"{seed_shared[metric]:.1f}", f"{calibrated[metric]:.1f}",
                     f"{held_before[metric]:.1f} → {held_after[metric]:.1f}"])
    n_rows, n_test = len(before), int(np.sum(test))
    loop = "in the open loop (Poisson arrivals)" if arrivals == "poisson" else "by the closed loop's matching"
    print(f"MAPE (%) over all {n_rows} rows, and on the {n_test} held-out rows (before → after calibration); "
          f"server rows {loop}:")
    unscored = int((seed_table["flag"] != "").sum())
    if unscored:
        print(f"(seed, isolated prefill: {unscored} rows flagged, not scored: `jaxpareto validate` names why)")
    if args.quick:
        print(f"(--quick: the factors were fitted with {steps} steps only; the calibrated columns are not the README's)")
    elif args.calibration:
        print(f"(calibrated factors from {args.calibration})")
    print()
    print(markdown_table(HEADER, rows))
    print()
    print(fitted_line(efficiency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
