"""``jaxpareto pareto STORE``: the Pareto frontier of a stored sweep (one cell printed, every
cell's front optionally written to a CSV)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from jaxpareto.cli._common import Report, check_file_out, open_sweep_store
from jaxpareto.dataset.pareto import DEFAULT_DIMS, DEFAULT_X, DEFAULT_Y, default_dims, frontier_table, pareto_front
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.axes import dataset_table


def _open_sweep(path: Path) -> tuple[xr.Dataset, list[str]]:
    """A stored sweep or session sweep, and its axes (``turn`` in place of ``context_tokens``)."""
    ds = open_sweep_store(path)
    if ds.attrs.get("reduction") == "pareto":
        raise JaxparetoError("store", f"{path} holds reduced fronts already (`sweep --reduce`): read its front_* "
                                      "and best_* variables")
    axes = [a.name if a.name != "context_tokens" or "turn" not in ds.dims else "turn"
            for a in dataset_table(ds.dims)]
    missing = [a for a in axes if a not in ds.dims]
    if missing:
        raise JaxparetoError("store", f"{path} is not a jaxpareto sweep: no dimension {missing[0]!r}")
    return ds, axes


def _parse_selection(items: Sequence[str], ds: xr.Dataset) -> dict:
    selection = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise JaxparetoError("--sel", f"expected AXIS=VALUE, got {item!r}", [str(d) for d in ds.dims])
        if key not in ds.dims:
            raise JaxparetoError("--sel", f"unknown axis {key!r} in {item!r}", [str(d) for d in ds.dims])
        if key in selection:  # the last had silently won
            raise JaxparetoError(f"--sel {key}", "selected twice")
        if ds[key].dtype.kind in "US":
            selection[key] = raw
            continue
        try:
            selection[key] = float(raw)
        except ValueError:
            raise JaxparetoError(f"--sel {key}", f"not a number: {raw!r}") from None
    return selection


def _cmd_pareto(args: argparse.Namespace) -> int:
    ds, axes = _open_sweep(Path(args.store))
    stored = json.loads(ds.attrs.get("report", "{}"))
    # an objective not given keeps the sweep's report's, with its direction
    x = args.x or stored.get("x", DEFAULT_X)
    y = args.y or stored.get("y", DEFAULT_Y)
    kept = {name for name, given in ((x, args.x), (y, args.y)) if not given}
    given_minimize = args.minimize or []
    minimize = [*given_minimize, *(name for name in stored.get("minimize", [])
                                   if name in kept and name not in given_minimize)]
    dims = [d.strip() for d in args.dims.split(",") if d.strip()] if args.dims is not None else \
        stored.get("dims") or list(default_dims(ds.dims))  # an empty --dims is refused by the report, not skipped
    report = Report(x, y, dims, minimize, [str(v) for v in ds.data_vars], axes)
    headline = {k: v for k, v in stored.get("headline", {}).items() if k not in report.dims}
    requested = _parse_selection(args.sel or [], ds)
    selection = report.cell(ds.coords, {**headline, **requested}, "--sel")
    if args.csv:
        csv = check_file_out(args.csv, "--csv", args.overwrite)
        front = pareto_front(ds, x=report.x, y=report.y, dims=report.dims, maximize=report.maximize)
        table = frontier_table(ds, front, x=report.x, y=report.y, dims=report.dims)
        table.to_csv(csv, index=False)
        print(f"wrote {len(table):,} frontier points of {int(np.prod(front.shape)):,} to {csv}")
    report.print_frontier(ds, selection)
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("pareto", help="print (and export) the Pareto frontier of a stored sweep")
    p.add_argument("store", help="zarr store written by `jaxpareto sweep --out`")
    p.add_argument("--x", help=f"x objective (default: the sweep's report, with its direction, else {DEFAULT_X})")
    p.add_argument("--y", help=f"y objective (default: the sweep's report, with its direction, else {DEFAULT_Y})")
    p.add_argument("--minimize", action="append", metavar="NAME",
                   help="minimise this objective (repeatable; an objective given is maximised unless named here; a "
                        "latency *_ms, task_time_s or a cost *_usd is always minimised)")
    p.add_argument("--dims", help=f"comma-separated front dimensions (default {','.join(DEFAULT_DIMS)}, and a "
                                  "layout store's pp,ep,dp_attention or a disaggregated store's "
                                  "prefill_tp,prefill_workers,decode_workers)")
    p.add_argument("--sel", action="append", metavar="AXIS=VALUE", help="cell to print (repeatable)")
    p.add_argument("--csv", help="write the frontier of every cell to this CSV file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    p.set_defaults(func=_cmd_pareto)
    return p
