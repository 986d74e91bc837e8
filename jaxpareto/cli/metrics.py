"""``jaxpareto metrics FILE``: the summary of a benchmark log (`jaxpareto.measure.metrics`)."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from jaxpareto.cli._common import parse_slos
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.measure.metrics import PERCENTILE_METHODS, SLO_NAMES, check_summary_path, metrics, write_summary
from jaxpareto.measure.records import FORMATS


def summary_table(ds: xr.Dataset) -> str:
    """The summary as a readable table: metric, value, units, definition."""
    def show(v: object) -> str:
        v = np.asarray(v).item()
        return "-" if isinstance(v, float) and math.isnan(v) else f"{v:,}" if isinstance(v, int) else f"{v:,.6g}"
    rows = [("metric", "value", "units", "definition")] + [
        (name, show(ds[name].values), ds[name].attrs["units"], ds[name].attrs["long_name"]) for name in ds.data_vars]
    width = [max(len(row[k]) for row in rows) for k in range(3)]
    return "\n".join(f"{m:<{width[0]}}  {v:>{width[1]}}  {u:<{width[2]}}  {d}" for m, v, u, d in rows)


def _parse_slo(items: Sequence[str] | None) -> dict[str, float]:
    """``--slo`` upper limits in ms (``ttft_ms<=2000`` or ``ttft_ms=2000``), checked by name."""
    limits = {name: value for name, (_, value) in parse_slos(items, upper_only=True).items()}
    for name in limits:
        if name not in SLO_NAMES:
            raise JaxparetoError("--slo", f"unknown SLO {name!r}", SLO_NAMES)
    return limits


def _cmd_metrics(args: argparse.Namespace) -> int:
    try:
        qs = [float(q) for q in args.percentiles.split(",")]
    except ValueError:
        raise JaxparetoError("--percentiles", f"expected comma-separated numbers, got {args.percentiles!r}") from None
    out = Path(args.out) if args.out else None
    if out is not None:
        check_summary_path(out, "--out", args.overwrite)
    csv = Path(args.csv) if args.csv else None
    if csv is not None:
        if csv.suffix.lower() != ".csv":  # as --out reads suffixes: .CSV is a CSV file
            raise JaxparetoError("--csv", f"writes a .csv file, got {csv.name!r}")
        check_summary_path(csv, "--csv", args.overwrite)
        if out is not None and out.resolve() == csv.resolve():
            raise JaxparetoError("--csv", f"names the --out file {out}: give one of them, or two paths")
    ds = metrics(args.file, args.format, percentiles=qs, percentile_method=args.percentile_method,
                 slo=_parse_slo(args.slo), benchmark=args.benchmark)
    slo = ", ".join(f"{k} <= {v:g}" for k, v in json.loads(ds.attrs["slo_ms"]).items()) or "none"
    print(f"{args.file}: {ds.attrs['format']}, {ds.attrs['requests']:,} requests; percentiles {ds.attrs['percentile_method']};"
          f" SLO {slo}; ITL {ds.attrs['itl_source']}\n")
    print(summary_table(ds))
    for path, field in ((out, "--out"), (csv, "--csv")):
        if path is not None:
            write_summary(ds, path, overwrite=args.overwrite, field=field)
            print(f"\nwrote {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``jaxpareto metrics FILE`` to the CLI's subcommands."""
    p = subparsers.add_parser("metrics", help="TTFT/TPOT/ITL/E2EL percentiles, throughput and goodput of a benchmark log")
    p.add_argument("file", help="per-request CSV or JSONL, vLLM --save-result --save-detailed JSON, or GuideLLM report")
    p.add_argument("--format", choices=FORMATS, help="input format (default: from the extension and keys)")
    p.add_argument("--percentiles", default="50,90,95,99", help="comma-separated percentiles (default 50,90,95,99)")
    p.add_argument("--percentile-method", choices=PERCENTILE_METHODS, default="linear",
                   help="linear (numpy's default, seed 002 appendix A) or nearest_rank")
    p.add_argument("--slo", action="append", metavar="NAME<=LIMIT_MS",
                   help=f"goodput SLO in ms, one of {', '.join(SLO_NAMES)} (repeatable)")
    p.add_argument("--benchmark", type=int, help="GuideLLM report: index of the benchmark to summarise")
    p.add_argument("--out", help="also write the summary: .json, .csv, .nc (netCDF3) or .zarr")
    p.add_argument("--csv", help="also write the summary table to this CSV file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out or --csv file")
    p.set_defaults(func=_cmd_metrics)
    return p
