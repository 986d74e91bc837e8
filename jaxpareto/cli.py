"""Command line: ``jaxpareto sweep | pareto | catalog`` (SPEC.md sections 5 and 6)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from jaxpareto import catalog
from jaxpareto.errors import JaxparetoError
from jaxpareto.pareto import DEFAULT_DIMS, DEFAULT_X, DEFAULT_Y, frontier_table, pareto_front
from jaxpareto.schema import AXES
from jaxpareto.spec import load_spec
from jaxpareto.store import sweep_to_zarr
from jaxpareto.sweep import plan_sweep, sweep


def _headline_selection(ds: xr.Dataset, headline: Mapping, dims: Sequence[str]) -> dict:
    """One value for every axis outside ``dims``: the headline's where given, else the first."""
    selection = {}
    for axis in AXES:
        if axis in dims:
            continue
        if axis in headline:
            value = headline[axis]
            if value not in ds[axis].values:
                raise JaxparetoError(f"report.headline.{axis}", f"{value!r} is not on the grid",
                                     [str(v) for v in ds[axis].values])
            selection[axis] = value
        else:
            selection[axis] = ds[axis].values[0].item()
    return selection


def _print_frontier(ds: xr.Dataset, selection: dict, x: str, y: str, dims: Sequence[str]) -> None:
    cell = ds.sel(selection)
    front = pareto_front(cell, x=x, y=y, dims=dims)
    table = frontier_table(cell, front, x=x, y=y, dims=dims, drop_ties=True)
    where = ", ".join(f"{k}={v}" for k, v in selection.items())
    print(f"\nPareto frontier ({y} vs {x}) over {', '.join(dims)} at {where}:")
    if table.empty:
        print("  (no feasible, converged point in this cell)")
        return
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:,.4g}".format):
        print(table.to_string(index=False))
    ties = int(front.sum()) - len(table)
    if ties:
        print(f"({ties} more frontier configurations tie exactly with a row above, e.g. concurrency beyond "
              "what KV memory admits; `jaxpareto pareto --csv` lists them all)")


def _cmd_sweep(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    kwargs = spec.sweep_kwargs()
    for option in ("dtype", "method", "chunk_points"):
        if getattr(args, option) is not None:
            kwargs[option] = getattr(args, option)
    if args.variables:
        kwargs["variables"] = args.variables.split(",")
    kwargs["attrs"] = {"spec": json.dumps(spec.model_dump(mode="json")),
                       "report_headline": json.dumps(spec.report.headline)}
    out = Path(args.out) if args.out else None
    plan = plan_sweep(**kwargs)  # every input checked before anything runs or is written
    start = time.perf_counter()
    if out is None:
        if args.scheduler:
            raise JaxparetoError("--scheduler", "needs --out: dask workers write their blocks into the store")
        ds = sweep(**kwargs)
        infeasible = int((~ds.feasible).sum())
        unconverged = int((ds.feasible & ~ds.converged).sum())
    else:
        client = _dask_client(args.scheduler) if args.scheduler else None
        try:
            ds = sweep_to_zarr(out, overwrite=args.overwrite, progress=args.progress, client=client, **kwargs)
        finally:
            if client is not None:
                client.close()
        infeasible, unconverged = ds.attrs["infeasible_points"], ds.attrs["unconverged_points"]
    elapsed = time.perf_counter() - start
    points = int(np.prod(plan.shape))
    print(f"spec: {args.spec or '(built-in default: seed code agent)'}")
    if spec.description:
        print(f"  {spec.description}")
    shape = " x ".join(f"{a} {n}" for a, n in zip(AXES, plan.shape))
    print(f"grid: {points:,} configurations ({shape})")
    what = "compilation included" + (f", written to {out}" if out else "")
    print(f"wall time: {elapsed:.2f} s ({what}), {points / elapsed:,.0f} configs/s, solver {plan.method}, {plan.dtype}")
    print(f"infeasible (KV memory): {infeasible:,}; unconverged: {unconverged:,}")
    dims = spec.report.dims
    _print_frontier(ds, _headline_selection(ds, spec.report.headline, dims), spec.report.x, spec.report.y, dims)
    return 0


def _dask_client(address: str):
    try:
        from distributed import Client
    except ImportError:  # pragma: no branch - depends on the installation
        raise JaxparetoError("--scheduler", "needs dask.distributed: pip install 'jaxpareto[dask]'") from None
    return Client(address)


def _parse_selection(items: Sequence[str], ds: xr.Dataset) -> dict:
    selection = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in AXES:
            raise JaxparetoError("--sel", f"expected AXIS=VALUE, got {item!r}", AXES)
        kind = ds[key].dtype.kind
        try:
            selection[key] = raw if kind in "US" else (int(raw) if kind == "i" else float(raw))
        except ValueError:
            raise JaxparetoError(f"--sel {key}", f"not a number: {raw!r}") from None
    return selection


def _cmd_pareto(args: argparse.Namespace) -> int:
    path = Path(args.store)
    if not path.exists():
        raise JaxparetoError("store", f"no such zarr store: {path}")
    ds = xr.open_zarr(path)
    dims = tuple(args.dims.split(",")) if args.dims else DEFAULT_DIMS
    x, y = args.x or DEFAULT_X, args.y or DEFAULT_Y
    if args.csv:
        front = pareto_front(ds, x=x, y=y, dims=dims)
        table = frontier_table(ds, front, x=x, y=y, dims=dims)
        table.to_csv(args.csv, index=False)
        print(f"wrote {len(table):,} frontier points of {int(np.prod(front.shape)):,} to {args.csv}")
    headline = json.loads(ds.attrs.get("report_headline", "{}"))
    headline.update(_parse_selection(args.sel or [], ds))
    _print_frontier(ds, _headline_selection(ds, headline, dims), x, y, dims)
    return 0


def _cmd_catalog(args: argparse.Namespace) -> int:
    gpus = pd.DataFrame([g.model_dump(exclude={"sources"}) for g in catalog.gpus().values()])
    models = pd.DataFrame(
        [{**m.model_dump(exclude={"sources"}), "kv_bytes_per_token": m.kv_bytes_per_token}
         for m in catalog.models().values()]
    )
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print("GPUs (memory GB, bandwidth GB/s, dense TFLOPS, interconnect GB/s one way):")
        print(gpus.to_string(index=False, na_rep="-"))
        print("\nModels (params in billions, KV bytes per token):")
        print(models.dropna(axis=1, how="all").to_string(index=False, na_rep="-"))
    if args.sources:
        print("\nSources:")
        for kind, entries in (("gpu", catalog.gpus()), ("model", catalog.models())):
            for name, entry in entries.items():
                for field, source in entry.sources.items():
                    print(f"  {kind} {name}.{field}: {source}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxpareto", description="Agent-serving Pareto sweeps in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("sweep", help="run a sweep spec (default: the seed's code agent) and print its frontier")
    p.add_argument("spec", nargs="?", help="sweep spec TOML (default: built-in code agent)")
    p.add_argument("--out", help="zarr store to write (refused if it exists, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out store")
    p.add_argument("--dtype", choices=("float32", "float64"), help="override the spec's floating point type")
    p.add_argument("--method", choices=("damped", "exact"), help="closed-loop solver (default: the spec's, damped)")
    p.add_argument("--variables", help="comma-separated outputs to keep (default all)")
    p.add_argument("--chunk-points", type=int, help="points per compute block and zarr chunk")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: only when stderr is a terminal)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run the blocks on a dask.distributed scheduler (needs --out)")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("pareto", help="print (and export) the Pareto frontier of a stored sweep")
    p.add_argument("store", help="zarr store written by `jaxpareto sweep --out`")
    p.add_argument("--x", help=f"x objective (default {DEFAULT_X})")
    p.add_argument("--y", help=f"y objective (default {DEFAULT_Y})")
    p.add_argument("--dims", help=f"comma-separated front dimensions (default {','.join(DEFAULT_DIMS)})")
    p.add_argument("--sel", action="append", metavar="AXIS=VALUE", help="cell to print (repeatable)")
    p.add_argument("--csv", help="write the frontier of every cell to this CSV file")
    p.set_defaults(func=_cmd_pareto)

    p = sub.add_parser("catalog", help="list the catalog's GPUs and models")
    p.add_argument("--sources", action="store_true", help="also print where every value comes from")
    p.set_defaults(func=_cmd_catalog)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except JaxparetoError as error:
        print(f"jaxpareto: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
