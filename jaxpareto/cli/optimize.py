"""``jaxpareto optimize SPEC``: the best TP and concurrency per scenario under the spec's
``[optimize]`` SLOs, as a table."""

from __future__ import annotations

import argparse
import time

import pandas as pd

from jaxpareto.cli._common import FLOAT_FORMAT, add_calibration_option, add_output_options, add_solver_option, \
    SearchMethod, new_output
from jaxpareto.definitions.options import SEARCH_METHODS
from jaxpareto.dataset.store import to_zarr
from jaxpareto.definitions.spec import load_spec
from jaxpareto.search.optimize import optimize


def _cmd_optimize(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    kwargs = spec.optimize_kwargs()
    for option in ("method", "solver"):
        if getattr(args, option):
            kwargs[option] = getattr(args, option)
    if args.calibration:
        kwargs["calibration"] = args.calibration
    out = new_output(args)
    start = time.perf_counter()
    ds = optimize(**kwargs)
    elapsed = time.perf_counter() - start
    if out is not None:
        to_zarr(ds, out, overwrite=args.overwrite)
    cells = int(ds.feasible.size)
    print(f"spec: {args.spec}")
    if spec.description:
        print(f"  {spec.description}")
    print(f"{ds.attrs['sense']} {ds.attrs['objective']} subject to {ds.attrs['constraints'] or 'memory only'}; "
          f"TP in {ds.attrs['tp_choices']}, concurrency in {ds.attrs['concurrency_range']}")
    print(f"{cells:,} scenarios in {elapsed:.2f} s ({ds.attrs['method']} search), {int(ds.feasible.sum()):,} feasible"
          f"{f'; written to {out}' if out else ''}\n")
    columns = ["feasible", "tp", "concurrency", "value", *[c for c in ("ttft_ms", "output_tokens_per_s_per_user")
                                                           if c in ds], "binding", "reason"]
    table = ds[columns].to_dataframe().reset_index()
    with pd.option_context("display.width", 250, "display.max_rows", 500, "display.max_colwidth", 60,
                           "display.float_format", FLOAT_FORMAT):
        print(table.to_string(index=False))
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("optimize", help="best TP and concurrency per scenario under the spec's [optimize] SLOs")
    p.add_argument("spec", help="spec TOML with [grid] scenarios and an [optimize] table")
    add_output_options(p, "zarr store for the optimum per scenario")
    p.add_argument("--method", action=SearchMethod, metavar="{" + ",".join(SEARCH_METHODS) + "}",
                   help="search method (default: the spec's)")
    add_solver_option(p)
    add_calibration_option(p)
    p.set_defaults(func=_cmd_optimize)
    return p
