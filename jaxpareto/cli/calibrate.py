"""``jaxpareto calibrate``: fit efficiency factors to measurements (`jaxpareto.measure.calibrate`)."""

from __future__ import annotations

import argparse

import pandas as pd

from jaxpareto.cli._common import check_file_out
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ARRIVALS, ATTENTION, GEMM_RATES, PREFILL_MODELS, PROFILES, ROOFLINES, \
    ModelOptions
from jaxpareto.measure.calibrate import at_bounds, calibrate


def _cmd_calibrate(args: argparse.Namespace) -> int:
    out = check_file_out(args.out, "--out", args.overwrite)  # checked before the fit, not after it
    fields = None if args.fit is None else tuple(f.strip() for f in args.fit.split(",") if f.strip())
    if fields == ():  # an empty list is no choice of fields: the default set would be fitted silently
        raise JaxparetoError("--fit", "names no field: give comma-separated Efficiency fields, or leave --fit out "
                                      "for the profile's set")
    if args.train is not None and not args.train.strip():  # else taken as no --train: a random split
        raise JaxparetoError("--train", "is empty: give COLUMN=V1,V2[;COLUMN=...], or leave it out for a random split")
    if args.train and args.test_fraction is not None:  # --train chooses the rows itself
        raise JaxparetoError("--test-fraction", "applies without --train only: --train holds out every other row")
    options = ModelOptions(prefill_model=args.prefill_model, profile=args.profile, arrivals=args.arrivals,
                           gemm_rate=args.gemm_rate, attention=args.attention, roofline=args.roofline)
    held_out = {} if args.test_fraction is None else {"test_fraction": args.test_fraction}  # else the library's
    result = calibrate(args.data, fields=fields, seed=args.seed, steps=args.steps, options=options, train=args.train,
                       **held_out)
    out.write_text(result.to_toml())
    split = f"train rows where {args.train}" if args.train else "a random split"
    print(f"fitted {', '.join(result.fields)} on {int((~result.test).sum())} rows ({split}), "
          f"{int(result.test.sum())} held out (profile {args.profile}, prefill_model {args.prefill_model}, "
          f"gemm_rate {args.gemm_rate}, attention {args.attention}, roofline {args.roofline}); "
          f"training loss {result.loss[0]:.4g} -> {result.loss[-1]:.4g}")
    factors = result.efficiency if isinstance(result.efficiency, dict) else {"all rows": result.efficiency}
    for name, efficiency in factors.items():
        print(f"  {name}: " + ", ".join(f"{f} {float(getattr(result.start, f)):.4g} -> "
                                        f"{float(getattr(efficiency, f)):.4g}" for f in result.fields))
    for hit in at_bounds(result):
        print(f"  {hit}")
    if result.uninformed:
        print(f"  not informed by any training row, kept at their start: {', '.join(result.uninformed)}")
    with pd.option_context("display.width", 200, "display.float_format", "{:,.1f}".format):
        print("\nMAPE (%) before and after:")
        print(result.summary().to_string(index=False))
    print(f"\nwritten to {out}; use it with `jaxpareto sweep --calibration {out}` (which adopts "
          f"profile \"{args.profile}\", prefill_model \"{args.prefill_model}\", gemm_rate \"{args.gemm_rate}\", "
          f"attention \"{args.attention}\" and roofline \"{args.roofline}\", "
          "the model it was fitted with)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``jaxpareto calibrate`` on an argparse sub-parser set."""
    p = subparsers.add_parser("calibrate", help="fit efficiency factors to measurements (optax) and write them to a "
                                                "TOML that sweep/optimize/validate accept")
    p.add_argument("--out", default="calibration.toml", help="calibration TOML to write (default calibration.toml)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--data", metavar="FILE.csv", help="validation set (default: the shipped one)")
    p.add_argument("--train", metavar="COLUMN=V1,V2[;COLUMN=...]",
                   help="fit on these rows only, e.g. 'gpu=h100-sxm,h200-sxm'; every other row is held out and never "
                        "read by the fit (default: a random --test-fraction split)")
    p.add_argument("--fit", help="comma-separated Efficiency fields to fit (default: the profile's set)")
    p.add_argument("--steps", type=int, default=400, help="Adam steps (default 400)")
    p.add_argument("--test-fraction", type=float,
                   help="without --train: held-out share of each source x metric group (0.3; at least one row of a "
                        "group of two or more unless 0; 0 fits on every row)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random split")
    p.add_argument("--profile", choices=PROFILES, default="seed",
                   help="the seed's equations, or the measured profile's added physics (default seed)")
    p.add_argument("--prefill-model", choices=PREFILL_MODELS, default="shared",
                   help="model the factors are fitted with (default shared: TTFT includes prefill queueing)")
    p.add_argument("--gemm-rate", choices=GEMM_RATES, default="peak",
                   help="the matmuls at the datasheet's peak, or at the rate large GEMMs measurably reach on the GPU "
                        "(default peak)")
    p.add_argument("--attention", choices=ATTENTION, default="profile",
                   help="attention as the profile counts it (the seed's: its KV reads alone), or its FLOPs too "
                        "(default profile)")
    p.add_argument("--roofline", choices=ROOFLINES, default="step",
                   help="one roofline for the whole decode step (the seed's), or the projections' and attention's "
                        "one after the other (operator) (default step)")
    p.add_argument("--arrivals", choices=ARRIVALS, default="staggered",
                   help="how the measured runs' turns fell in time (default staggered; poisson: the server rows in "
                        "the open loop); recorded as [fit] arrivals, which `jaxpareto validate` follows")
    p.set_defaults(func=_cmd_calibrate)
    return p
