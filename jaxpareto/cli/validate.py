"""``jaxpareto validate``: the model against measurements (`jaxpareto.measure.validate`)."""

from __future__ import annotations

import argparse

import pandas as pd

from jaxpareto.cli._common import check_file_out
from jaxpareto.definitions.calibration_file import calibration_arrivals, calibration_engines, calibration_factors, \
    calibration_options
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ARRIVALS, ATTENTION, GEMM_RATES, PREFILL_MODELS, PROFILES, ROOFLINES, \
    ModelOptions
from jaxpareto.definitions.settings import DTYPES, Efficiency
from jaxpareto.measure.predict import Predictor, validation_rows
from jaxpareto.measure.row_inputs import PREFILL, engine_names
from jaxpareto.measure.validate import comparison_table, prediction_rows


def _adopted(args: argparse.Namespace, field: str, default: str) -> str:
    """The option a calibration file was fitted with, unless the command line asks for another."""
    fitted_with = calibration_options(args.calibration) if args.calibration else {}
    fitted, given = fitted_with.get(field), getattr(args, field)
    if field == "attention" and fitted_with.get("profile") == "measured":
        fitted = None  # the measured profile counts attention's FLOPs whatever the option says
    if given is not None and fitted not in (None, given):
        raise JaxparetoError(f"--{field.replace('_', '-')}", f"the calibration's factors were fitted with {fitted!r}")
    return given or fitted or default


def _cmd_validate(args: argparse.Namespace) -> int:
    out = check_file_out(args.out, "--csv", args.overwrite) if args.out else None
    # the runs are evaluated as the calibration's fit evaluated them, unless asked otherwise
    arrivals = args.arrivals or (calibration_arrivals(args.calibration) if args.calibration else "staggered")
    options = ModelOptions(prefill_model=_adopted(args, "prefill_model", "isolated"),
                           profile=_adopted(args, "profile", "seed"), arrivals=arrivals,
                           gemm_rate=_adopted(args, "gemm_rate", "peak"),
                           attention=_adopted(args, "attention", "profile"),
                           roofline=_adopted(args, "roofline", "step"))
    rows = validation_rows(args.data)
    efficiency = calibration_factors(args.calibration, engine_names(rows)) if args.calibration else Efficiency()
    # the rows are checked once, above: the predictor takes them as they are
    table = comparison_table(Predictor(rows, dtype=args.dtype, prefill=args.prefill, options=options), efficiency)
    summary = table.attrs["mape"]
    print(f"validation set: {args.data or 'shipped jaxpareto/data/validation.csv'} ({len(table)} rows); "
          f"efficiency: {args.calibration or 'seed defaults'}; profile: {options.profile}, "
          f"prefill_model: {options.prefill_model}; gemm_rate: {options.gemm_rate}; attention: {options.attention}; "
          f"roofline: {options.roofline}; "
          f"arrivals: {options.arrivals}, "
          f"server rows: {'Poisson arrivals' if options.open_loop else 'closed-loop matching'}")
    own = calibration_engines(args.calibration) if args.calibration else {}
    shared = sorted(set(engine_names(rows)) - set(own)) if own else []
    if shared:  # a per-engine fit's [efficiency] is where its fit started: say which rows take it
        print(f"note: {args.calibration} has no factors of its own for engines {shared}; their rows take its "
              "shared [efficiency]")
    if out is not None:
        prediction_rows(rows, table).to_csv(out, index=False)
        print(f"wrote {len(table):,} rows with their predictions to {out}")
    else:
        shown = table.assign(error_pct=table["rel_error"] * 100)[
            ["id", "metric", "load", "concurrency", "measured", "predicted", "error_pct", "unit", "flag"]]
        with pd.option_context("display.width", 250, "display.max_rows", 1000, "display.max_colwidth", 70,
                               "display.float_format", "{:,.4g}".format):
            print(shown.to_string(index=False))
    with pd.option_context("display.width", 250, "display.float_format", "{:,.4g}".format):
        for group, title in (("source", "MAPE per source"), ("metric", "MAPE per metric"), ("all", "MAPE overall")):
            part = summary[summary["group"].eq(group)].drop(columns="group")
            print(f"\n{title} (%; flagged rows are not scored):")
            print(part.to_string(index=False))
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``jaxpareto validate`` on an argparse sub-parser set."""
    p = subparsers.add_parser("validate", help="compare the model with measurements (MAPE per source and per "
                                               "metric); --csv writes every row with its prediction")
    p.add_argument("--calibration", metavar="FILE.toml",
                   help="factors of a calibration file (`jaxpareto calibrate`), per engine where it has them; "
                        "its profile, prefill model, GEMM rate and attention are adopted, and its server rows scored "
                        "as its fit scored them (default: the seed's factors)")
    p.add_argument("--data", metavar="FILE.csv", help="validation set (default: the shipped one)")
    p.add_argument("--csv", "--out", dest="out", metavar="FILE.csv",
                   help="write every input row with `predicted`, `error_pct` and `reason` (why a row has no "
                        "prediction or is not scored) columns (--out is the same option)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    p.add_argument("--dtype", choices=DTYPES, default="float64", help="floating point type (default float64)")
    p.add_argument("--prefill", choices=PREFILL,
                   help="how a row's prompt is prefilled (default: 'prompt' under the measured profile, else 'isl')")
    p.add_argument("--prefill-model", choices=PREFILL_MODELS,
                   help="the seed's isolated prefill or the shared chunked-prefill engine (default: the one a "
                        "--calibration file was fitted with, else isolated)")
    p.add_argument("--profile", choices=PROFILES,
                   help="the seed's equations or the measured profile (default: the calibration's, else seed)")
    p.add_argument("--gemm-rate", choices=GEMM_RATES,
                   help="the matmuls at the datasheet's peak or at the rate large GEMMs measurably reach (default: "
                        "the calibration's, else peak)")
    p.add_argument("--attention", choices=ATTENTION,
                   help="attention as the profile counts it, or its FLOPs too (default: the calibration's, else "
                        "profile)")
    p.add_argument("--roofline", choices=ROOFLINES,
                   help="one roofline for the whole decode step, or the projections' and attention's one after the "
                        "other (default: the calibration's, else step)")
    p.add_argument("--arrivals", choices=ARRIVALS,
                   help="how the runs' turns fall in time: the closed loop's staggered (the server rows matched by "
                        "Little's law) or synchronised turns, or Poisson arrivals (the server rows in the open "
                        "loop) (default: as the --calibration file's fit evaluated them, its [fit] arrivals; "
                        "else staggered)"),
    p.set_defaults(func=_cmd_validate)
    return p
