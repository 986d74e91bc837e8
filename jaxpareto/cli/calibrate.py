"""``jaxpareto calibrate``: fit efficiency factors to the validation set (`jaxpareto.measure.calibrate`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import PREFILL_MODELS, ModelOptions
from jaxpareto.measure.calibrate import DEFAULT_FIELDS, at_bounds, calibrate


def _cmd_calibrate(args: argparse.Namespace) -> int:
    fields = tuple(f for f in args.fit.split(",") if f) if args.fit else DEFAULT_FIELDS
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise JaxparetoError("--out", f"{out} exists; pass --overwrite to replace it")
    if out.is_dir() or not out.parent.is_dir():  # checked before the fit, not after it
        raise JaxparetoError("--out", f"{out} is a folder, or its folder {out.parent} does not exist")
    result = calibrate(args.data, fields=fields, test_fraction=args.test_fraction, seed=args.seed, steps=args.steps,
                       options=ModelOptions(prefill_model=args.prefill_model))
    out.write_text(result.to_toml())
    print(f"fitted {', '.join(fields)} on {int((~result.test).sum())} rows, {int(result.test.sum())} held out "
          f"(prefill_model {args.prefill_model}); training loss {result.loss[0]:.4g} -> {result.loss[-1]:.4g}")
    for field in fields:
        print(f"  {field:22s} {float(getattr(result.start, field)):>10.4g} -> {float(getattr(result.efficiency, field)):.4g}")
    for hit in at_bounds(result):
        print(f"  {hit}")
    with pd.option_context("display.width", 200, "display.float_format", "{:,.1f}".format):
        print("\nMAPE (%) before and after:")
        print(result.summary().to_string(index=False))
    print(f"\nwritten to {out}; use it with `jaxpareto sweep --calibration {out}` (which adopts "
          f"prefill_model = \"{args.prefill_model}\", the model it was fitted with)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``jaxpareto calibrate`` on an argparse sub-parser set."""
    p = subparsers.add_parser("calibrate", help="fit efficiency factors to the validation set (optax) and write "
                                                "them to a TOML that sweep/optimize accept")
    p.add_argument("--out", default="calibration.toml", help="calibration TOML to write (default calibration.toml)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--data", metavar="FILE.csv", help="validation set (default: the shipped one)")
    p.add_argument("--fit", help=f"comma-separated Efficiency fields to fit (default: {','.join(DEFAULT_FIELDS)})")
    p.add_argument("--steps", type=int, default=400, help="Adam steps (default 400)")
    p.add_argument("--test-fraction", type=float, default=0.3,
                   help="held-out share of each source x metric group (0.3; at least one row of a group of two or "
                        "more unless 0; 0 fits on every row)")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/test split")
    p.add_argument("--prefill-model", choices=PREFILL_MODELS, default="shared",
                   help="model the factors are fitted with (default shared: TTFT includes prefill queueing)")
    p.set_defaults(func=_cmd_calibrate)
    return p
