"""``jaxpareto validate``: the model against published measurements (`jaxpareto.measure.validate`)."""

from __future__ import annotations

import argparse

import pandas as pd

from jaxpareto.definitions.settings import DTYPES
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import PREFILL_MODELS, ModelOptions
from jaxpareto.definitions.settings import Efficiency
from jaxpareto.definitions.calibration_file import calibration_efficiency, calibration_options
from jaxpareto.measure.row_inputs import PREFILL
from jaxpareto.measure.validate import validate


def _cmd_validate(args: argparse.Namespace) -> int:
    efficiency = calibration_efficiency(args.calibration) if args.calibration else Efficiency()
    fitted_with = calibration_options(args.calibration).get("prefill_model") if args.calibration else None
    if args.prefill_model is None:
        args.prefill_model = fitted_with or "isolated"
    elif fitted_with not in (None, args.prefill_model):
        raise JaxparetoError("--prefill-model", f"the calibration's factors were fitted with {fitted_with!r}")
    table = validate(args.data, efficiency=efficiency, dtype=args.dtype, prefill=args.prefill,
                     options=ModelOptions(prefill_model=args.prefill_model))
    summary = table.attrs["mape"]
    shown = table.assign(error_pct=table["rel_error"] * 100)[
        ["id", "metric", "load", "concurrency", "measured", "predicted", "error_pct", "unit", "flag"]]
    print(f"validation set: {args.data or 'shipped jaxpareto/data/validation.csv'} ({len(table)} rows); "
          f"efficiency: {args.calibration or 'seed defaults'} ({efficiency}); prefill: {args.prefill}, "
          f"prefill_model: {args.prefill_model}")
    with pd.option_context("display.width", 250, "display.max_rows", 1000, "display.max_colwidth", 70,
                           "display.float_format", "{:,.4g}".format):
        print(shown.to_string(index=False))
        for group, title in (("source", "MAPE per source"), ("metric", "MAPE per metric"), ("all", "MAPE overall")):
            part = summary[summary["group"].eq(group)].drop(columns="group")
            print(f"\n{title} (%; flagged rows are not scored):")
            print(part.to_string(index=False))
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``jaxpareto validate`` on an argparse sub-parser set."""
    p = subparsers.add_parser("validate", help="compare the model with published measurements (MAPE per source "
                                               "and per metric)")
    p.add_argument("--calibration", metavar="FILE.toml",
                   help="efficiencies from the [efficiency] table of a TOML file (default: the seed's)")
    p.add_argument("--data", metavar="FILE.csv", help="validation set (default: the shipped one)")
    p.add_argument("--dtype", choices=DTYPES, default="float64", help="floating point type (default float64)")
    p.add_argument("--prefill", choices=PREFILL, default="isl",
                   help="TTFT prefills the ISL prompt (default) or the whole ISL + OSL/2 context")
    p.add_argument("--prefill-model", choices=PREFILL_MODELS,
                   help="the seed's isolated prefill or the shared chunked-prefill engine (default: the one a "
                        "--calibration file was fitted with, else isolated)")
    p.set_defaults(func=_cmd_validate)
    return p
