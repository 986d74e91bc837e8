"""Command line: ``jaxpareto sweep | pareto | catalog`` (SPEC.md sections 5 and 6).

Every input is checked before anything is computed or written; errors print one line
``jaxpareto: error: ...`` and exit with status 2.
"""

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

from jaxpareto.cli import calibrate, metrics, plot, validate
from jaxpareto.definitions import catalog
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.dataset.pareto import DEFAULT_DIMS, DEFAULT_X, DEFAULT_Y, frontier_table, pareto_front
from jaxpareto.definitions.schema import AXES, OUTPUTS
from jaxpareto.dataset.costs import add_costs
from jaxpareto.dataset.session import TASK_VARIABLES, session_sweep
from jaxpareto.definitions.spec import load_spec, presets
from jaxpareto.search.optimize import optimize
from jaxpareto.dataset.reduce import pareto_sweep
from jaxpareto.search.sizing import size_deployment
from jaxpareto.dataset.store import check_new_output, sweep_to_zarr, to_zarr
from jaxpareto.dataset.sweep import plan_sweep, sweep


class Report:
    """What to print: objectives, their directions, the front's dims and one headline cell."""

    def __init__(self, x: str, y: str, dims: Sequence[str], minimize: Sequence[str], available: Sequence[str],
                 axes: Sequence[str] = AXES):
        for field, name in (("x", x), ("y", y)):
            if name not in available:
                raise JaxparetoError(f"report {field}", f"unknown or unselected variable {name!r}", available)
        dims = tuple(dims)
        self.axes = tuple(axes)
        for d in dims:
            if d not in self.axes:
                raise JaxparetoError("report dims", f"unknown dimension {d!r}", self.axes)
        if len(set(dims)) != len(dims) or not dims:
            raise JaxparetoError("report dims", f"need one or more distinct dimensions, got {list(dims)}")
        for name in minimize:
            if name not in (x, y):
                raise JaxparetoError("minimize", f"{name!r} is neither objective", (x, y))
        self.x, self.y, self.dims = x, y, dims
        self.maximize = (x not in minimize, y not in minimize)

    def cell(self, coords: Mapping[str, Sequence], headline: Mapping, source: str) -> dict:
        """One coordinate value for every axis outside ``dims``: the headline's, else the first."""
        for key in headline:
            if key not in self.axes:
                raise JaxparetoError(f"{source}.{key}", "unknown axis", [a for a in self.axes if a not in self.dims])
            if key in self.dims:
                raise JaxparetoError(f"{source}.{key}", f"is a dimension of the front ({', '.join(self.dims)}); "
                                                        "the front is taken over all its values")
        selection = {}
        for axis in self.axes:
            if axis in self.dims:
                continue
            values = np.asarray(coords[axis])
            if axis not in headline:
                selection[axis] = values[0].item()
                continue
            wanted = headline[axis]
            if values.dtype.kind in "US":
                hits = np.flatnonzero(values == str(wanted))
            else:
                hits = np.flatnonzero(np.isclose(values.astype(float), float(wanted), rtol=1e-9, atol=0))
            if not len(hits):
                raise JaxparetoError(f"{source}.{axis}", f"{wanted!r} is not on the grid", [v.item() for v in values])
            selection[axis] = values[hits[0]].item()
        return selection

    def print_frontier(self, ds: xr.Dataset, selection: dict) -> None:
        cell = ds.sel(selection)
        front = pareto_front(cell, x=self.x, y=self.y, dims=self.dims, maximize=self.maximize)
        table = frontier_table(cell, front, x=self.x, y=self.y, dims=self.dims, drop_ties=True)
        where = ", ".join(f"{k}={v}" for k, v in selection.items())
        senses = " and ".join(f"{'max' if m else 'min'} {n}" for n, m in zip((self.x, self.y), self.maximize))
        print(f"\nPareto frontier ({senses}) over {', '.join(self.dims)} at {where}:")
        if table.empty:
            print("  (no feasible, converged point in this cell)")
            return
        with pd.option_context("display.width", 250, "display.max_columns", 30,
                               "display.float_format", "{:,.4g}".format):
            print(table.to_string(index=False))
        ties = int(front.sum()) - len(table)
        if ties:
            print(f"({ties} more frontier configurations tie exactly with a row above, e.g. concurrency beyond "
                  "what KV memory admits; `jaxpareto pareto --csv` lists them all)")


def _cmd_session(args: argparse.Namespace, spec) -> int:
    """A spec with a [session] table: whole sessions, in memory (then written to --out)."""
    kwargs = spec.session_kwargs()
    for option in ("dtype", "method", "calibration"):
        if getattr(args, option) is not None:
            kwargs[option] = getattr(args, option)
    if args.scheduler or args.reduce or args.variables or args.chunk_points or args.progress:
        raise JaxparetoError("--scheduler/--reduce/--variables/--chunk-points/--progress",
                             "apply to grid sweeps, not to [session] specs")
    axes = [a if a != "context_tokens" else "turn" for a in AXES]
    # the report and the output path are checked before anything runs
    report = Report(spec.report.x, spec.report.y, spec.report.dims, spec.report.minimize,
                    [*OUTPUTS, *TASK_VARIABLES], axes)
    coords = {a: np.atleast_1d(kwargs[a] if a != "turn" else np.arange(1, spec.session.turns + 1)) for a in axes}
    coords["gpu"] = [g if isinstance(g, str) else g.name for g in np.atleast_1d(coords["gpu"])]
    coords["model"] = [m if isinstance(m, str) else m.name for m in np.atleast_1d(coords["model"])]
    selection = report.cell(coords, spec.report.headline, "report.headline")
    out = _new_output(args)
    start = time.perf_counter()
    ds = session_sweep(**kwargs)
    if spec.prices is not None:
        ds = add_costs(ds, **spec.prices.model_dump(exclude_none=True))
    elapsed = time.perf_counter() - start
    selection = report.cell(ds.coords, {**spec.report.headline, **selection}, "report.headline")
    ds.attrs["report"] = json.dumps(spec.report.model_dump(mode="json"))
    if out is not None:
        to_zarr(ds, out, overwrite=args.overwrite)
    points = int(np.prod([ds.sizes[a] for a in axes]))
    print(f"spec: {args.spec}")
    if spec.description:
        print(f"  {spec.description}")
    print(f"sessions: {points:,} configurations x turns ({' x '.join(f'{a} {ds.sizes[a]}' for a in axes)})"
          f"{f', written to {out}' if out else ''}")
    print(f"wall time: {elapsed:.2f} s, {points / elapsed:,.0f} configs/s; KV demand {ds.attrs['kv_demand']}")
    cell = ds.sel({k: v for k, v in selection.items() if k != "turn"})
    # only concurrencies the KV memory admits in full for a whole task
    best = cell.tasks_per_s.where((cell.task_concurrency_eff >= 1) & (cell.concurrency <= cell.task_concurrency_eff))
    if bool(best.notnull().any()):
        where = best.argmax(dim=["tp", "concurrency"])
        top = cell.isel(where)
        print(f"most tasks/s at {', '.join(f'{k}={v}' for k, v in selection.items() if k != 'turn')}: "
              f"tp {int(top.tp)}, concurrency {int(top.concurrency)}: {float(top.tasks_per_s):.3g} tasks/s, "
              f"task time {float(top.task_time_s):,.1f} s, operational intensity at turn {selection.get('turn')} "
              f"{float(top.operational_intensity.sel(turn=selection['turn'])):,.0f} FLOP/byte "
              f"(ridge {float(top.ridge_point):,.0f})")
    report.print_frontier(ds, selection)
    return 0


def _new_output(args: argparse.Namespace) -> Path | None:
    """--out as a path, refused now (before computing) when it exists without --overwrite."""
    if not args.out:
        return None
    out = Path(args.out)
    check_new_output(out, args.overwrite)
    return out


def _cmd_presets(args: argparse.Namespace) -> int:
    for name, description in presets().items():
        print(f"{name:24s} {description}")
    print("\nrun one with: jaxpareto sweep NAME  (files: sweeps/presets/NAME.toml)")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    if spec.session is not None:
        return _cmd_session(args, spec)
    kwargs = spec.sweep_kwargs()
    for option in ("dtype", "method", "chunk_points", "calibration"):
        if getattr(args, option) is not None:
            kwargs[option] = getattr(args, option)
    if args.variables is not None:
        names = [v for v in args.variables.split(",") if v]
        if not names:
            raise JaxparetoError("--variables", "name at least one output", list(OUTPUTS))
        kwargs["variables"] = sorted({*names, spec.report.x, spec.report.y}, key=list(OUTPUTS).index) \
            if spec.report.x in OUTPUTS and spec.report.y in OUTPUTS else names  # the report needs its x and y
    kwargs["attrs"] = {"spec": json.dumps(spec.model_dump(mode="json")),
                       "report": json.dumps(spec.report.model_dump(mode="json"))}
    # Every input is checked before anything runs or is written.
    plan = plan_sweep(**kwargs)
    report = Report(spec.report.x, spec.report.y, spec.report.dims, spec.report.minimize, plan.variables)
    selection = report.cell(plan.coords, spec.report.headline, "report.headline")
    if args.reduce:
        if args.scheduler:
            raise JaxparetoError("--reduce", "runs locally; it cannot be combined with --scheduler")
        out = _new_output(args)  # a reduced store is written whole at the end: never resumed
        return _reduced_sweep(args, plan, kwargs, report, selection, out, time.perf_counter())
    out = Path(args.out) if args.out else None  # sweep_to_zarr refuses a bad store before computing
    if out is None and args.scheduler:
        raise JaxparetoError("--scheduler", "needs --out: dask workers write their blocks into the store")

    start = time.perf_counter()
    if out is None:
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
    print(f"grid: {points:,} configurations ({' x '.join(f'{a} {n}' for a, n in zip(AXES, plan.shape))})")
    where = f", written to {out}" if out else ""
    print(f"wall time: {elapsed:.2f} s (compilation included{where}), {points / elapsed:,.0f} configs/s, "
          f"solver {plan.method}, {plan.dtype}")
    print(f"infeasible (KV memory): {infeasible:,}; unconverged: {unconverged:,}")
    report.print_frontier(ds, selection)
    return 0


def _reduced_sweep(args, plan, kwargs, report: Report, selection: dict, out: Path | None, start: float) -> int:
    """--reduce: keep each cell's front and best configurations, not every point."""
    kwargs.pop("variables", None)
    reduced = pareto_sweep(**kwargs, x=report.x, y=report.y, dims=report.dims, maximize=report.maximize,
                           max_front_points=args.max_front_points)
    elapsed = time.perf_counter() - start
    if out is not None:
        to_zarr(reduced, out, overwrite=args.overwrite)
    points = int(np.prod(plan.shape))
    cells = int(reduced.front_size.size)
    print(f"spec: {args.spec or '(built-in default: seed code agent)'}")
    print(f"grid: {points:,} configurations reduced to the Pareto fronts of {cells:,} cells"
          f"{f', written to {out}' if out else ''}")
    print(f"wall time: {elapsed:.2f} s, {points / elapsed:,.0f} configs/s")
    cell = reduced.sel(selection)
    k = int(cell.front_size)
    print(f"\nPareto front at {', '.join(f'{a}={v}' for a, v in selection.items())}: {k} configurations")
    table = pd.DataFrame({name.removeprefix("front_"): cell[name].values[: min(k, cell.sizes['front_point'])]
                          for name in cell.data_vars if name.startswith("front_") and name != "front_size"})
    table = table.drop_duplicates(subset=[report.x, report.y], keep="first")
    with pd.option_context("display.width", 250, "display.float_format", "{:,.4g}".format):
        print(table.to_string(index=False))
    return 0


def _dask_client(address: str):
    try:
        from distributed import Client
    except ImportError:
        raise JaxparetoError("--scheduler", "needs dask.distributed: pip install 'jaxpareto[dask]'") from None
    return Client(address)


def _open_sweep(path: Path) -> tuple[xr.Dataset, list[str]]:
    """A stored sweep or session sweep, and its axes (``turn`` in place of ``context_tokens``)."""
    if not (path / "zarr.json").is_file():
        raise JaxparetoError("store", f"{path} is not a zarr store (written by `jaxpareto sweep --out`)")
    ds = xr.open_zarr(path)
    if ds.attrs.get("reduction") == "pareto":
        raise JaxparetoError("store", f"{path} holds reduced fronts already (`sweep --reduce`): read its front_* "
                                      "and best_* variables")
    axes = [a if a != "context_tokens" or "turn" not in ds.dims else "turn" for a in AXES]
    missing = [a for a in axes if a not in ds.dims]
    if missing:
        raise JaxparetoError("store", f"{path} is not a jaxpareto sweep: no dimension {missing[0]!r}")
    return ds, axes


def _parse_selection(items: Sequence[str], ds: xr.Dataset) -> dict:
    selection = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in ds.dims:
            raise JaxparetoError("--sel", f"expected AXIS=VALUE, got {item!r}", [str(d) for d in ds.dims])
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
    x = args.x or (stored.get("x", DEFAULT_X) if not args.y else DEFAULT_X)
    y = args.y or (stored.get("y", DEFAULT_Y) if not args.x else DEFAULT_Y)
    dims = args.dims.split(",") if args.dims else stored.get("dims", list(DEFAULT_DIMS))
    minimize = args.minimize or ([] if (args.x or args.y) else stored.get("minimize", []))
    report = Report(x, y, dims, minimize, [str(v) for v in ds.data_vars], axes)
    headline = {k: v for k, v in stored.get("headline", {}).items() if k not in report.dims}
    requested = _parse_selection(args.sel or [], ds)
    selection = report.cell(ds.coords, {**headline, **requested}, "--sel")
    if args.csv:
        csv = Path(args.csv)
        if not csv.resolve().parent.is_dir():
            raise JaxparetoError("--csv", f"the folder {csv.resolve().parent} does not exist")
        front = pareto_front(ds, x=report.x, y=report.y, dims=report.dims, maximize=report.maximize)
        table = frontier_table(ds, front, x=report.x, y=report.y, dims=report.dims)
        table.to_csv(csv, index=False)
        print(f"wrote {len(table):,} frontier points of {int(np.prod(front.shape)):,} to {csv}")
    report.print_frontier(ds, selection)
    return 0


def _cmd_optimize(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    kwargs = spec.optimize_kwargs()
    if args.method:
        kwargs["method"] = args.method
    if args.calibration:
        kwargs["calibration"] = args.calibration
    out = _new_output(args)
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
                           "display.float_format", "{:,.4g}".format):
        print(table.to_string(index=False))
    return 0


def _parse_slo(items: Sequence[str]) -> dict:
    constraints = {}
    for item in items or []:
        for op in ("<=", ">="):
            name, sep, limit = item.partition(op)
            if sep:
                try:
                    constraints[name.strip()] = (op, float(limit))
                except ValueError:
                    raise JaxparetoError("--slo", f"not a number in {item!r}") from None
                break
        else:
            raise JaxparetoError("--slo", f"expected NAME<=LIMIT or NAME>=LIMIT, got {item!r}")
    return constraints


def _cmd_size(args: argparse.Namespace) -> int:
    try:
        tp = tuple(int(t) for t in args.tp.split(","))
    except ValueError:
        raise JaxparetoError("--tp", f"expected comma-separated integers, got {args.tp!r}") from None
    result = size_deployment(
        args.gpu, args.model, args.think_time_s, args.context_tokens, args.hit_rate, sessions=args.sessions,
        turns_per_s=args.turns_per_s, constraints=_parse_slo(args.slo), tp=tp,
        concurrency=(1, args.max_concurrency), osl=args.osl, delta_tokens=args.delta_tokens)
    target = f"{args.sessions} concurrent sessions" if args.sessions else f"{args.turns_per_s} turns/s"
    if result.feasible:
        print(f"{target} of {args.model} on {args.gpu}: {result.gpus} GPUs = {result.replicas} replicas x TP "
              f"{result.tp}, {result.sessions_per_replica} sessions and {result.turns_per_s_per_replica:,.2f} turns/s "
              "per replica")
    else:
        print(f"{target} of {args.model} on {args.gpu}: not possible ({result.reason})")
    with pd.option_context("display.width", 250, "display.float_format", "{:,.4g}".format):
        print("\n" + result.options.to_string(index=False))
    return 0 if result.feasible else 1


def _cmd_catalog(args: argparse.Namespace) -> int:
    gpus = pd.DataFrame([g.model_dump(exclude={"sources"}) for g in catalog.gpus().values()])
    models = pd.DataFrame(
        [{**m.model_dump(exclude={"sources"}), "kv_bytes_per_token": int(m.kv_bytes_per_token)}
         for m in catalog.models().values()]
    ).convert_dtypes()
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print("GPUs (memory GB, bandwidth GB/s, dense TFLOPS, interconnect GB/s one way):")
        print(gpus.to_string(index=False, na_rep="-"))
        print("\nModels (params in billions, KV bytes per token):")
        shown = models.dropna(axis=1, how="all")
        print(shown.astype(object).where(shown.notna(), "-").to_string(index=False))
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
    p.add_argument("spec", nargs="?", help="sweep spec TOML or a preset name (default: built-in code agent)")
    p.add_argument("--out", help="zarr store to stream into; an unfinished one of the same spec is resumed, "
                                 "anything else existing is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out zarr store")
    p.add_argument("--dtype", choices=("float32", "float64"), help="override the spec's floating point type")
    p.add_argument("--method", choices=("damped", "exact"), help="closed-loop solver (default: the spec's, damped)")
    p.add_argument("--variables", help="comma-separated outputs to keep (default all)")
    p.add_argument("--chunk-points", type=int, help="points per compute block and zarr chunk")
    p.add_argument("--calibration", help="TOML of fitted efficiency factors (`jaxpareto calibrate`) to use")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: only when stderr is a terminal)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run the blocks on a dask.distributed scheduler (needs --out)")
    p.add_argument("--reduce", action="store_true",
                   help="keep only each cell's Pareto front and best configurations (for grids too large to store)")
    p.add_argument("--max-front-points", type=int, default=64, help="with --reduce: front points kept per cell")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("pareto", help="print (and export) the Pareto frontier of a stored sweep")
    p.add_argument("store", help="zarr store written by `jaxpareto sweep --out`")
    p.add_argument("--x", help=f"x objective (default: the sweep's report, else {DEFAULT_X})")
    p.add_argument("--y", help=f"y objective (default: the sweep's report, else {DEFAULT_Y})")
    p.add_argument("--minimize", action="append", metavar="NAME", help="minimise this objective (repeatable)")
    p.add_argument("--dims", help=f"comma-separated front dimensions (default {','.join(DEFAULT_DIMS)})")
    p.add_argument("--sel", action="append", metavar="AXIS=VALUE", help="cell to print (repeatable)")
    p.add_argument("--csv", help="write the frontier of every cell to this CSV file")
    p.set_defaults(func=_cmd_pareto)

    p = sub.add_parser("optimize", help="best TP and concurrency per scenario under the spec's [optimize] SLOs")
    p.add_argument("spec", help="spec TOML with [grid] scenarios and an [optimize] table")
    p.add_argument("--out", help="zarr store for the optimum per scenario")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out zarr store")
    p.add_argument("--method", choices=("auto", "exhaustive", "gradient"), help="search method (default: the spec's)")
    p.add_argument("--calibration", help="TOML of fitted efficiency factors (`jaxpareto calibrate`) to use")
    p.set_defaults(func=_cmd_optimize)

    p = sub.add_parser("size", help="fewest GPUs (replicas x TP) serving a target load under SLOs")
    p.add_argument("--gpu", required=True)
    p.add_argument("--model", required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--sessions", type=int, help="target concurrent agent sessions")
    target.add_argument("--turns-per-s", type=float, help="target turn rate")
    p.add_argument("--think-time-s", type=float, default=2.0)
    p.add_argument("--context-tokens", type=int, default=32768)
    p.add_argument("--hit-rate", type=float, default=0.9)
    p.add_argument("--osl", type=float, default=128)
    p.add_argument("--delta-tokens", type=float, default=2128)
    p.add_argument("--slo", action="append", metavar="NAME<=LIMIT", help="an SLO, e.g. ttft_ms<=2000 (repeatable)")
    p.add_argument("--tp", default="1,2,4,8", help="TP choices per replica (default 1,2,4,8)")
    p.add_argument("--max-concurrency", type=int, default=4096, help="most sessions per replica searched")
    p.set_defaults(func=_cmd_size)

    p = sub.add_parser("presets", help="list the shipped workload presets, one line each")
    p.set_defaults(func=_cmd_presets)

    p = sub.add_parser("catalog", help="list the catalog's GPUs and models")
    p.add_argument("--sources", action="store_true", help="also print where every value comes from")
    p.set_defaults(func=_cmd_catalog)
    for command in (metrics, plot, validate, calibrate):
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except JaxparetoError as error:
        print(f"jaxpareto: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # unreadable or unwritable files: one line, not a traceback
        if isinstance(error, BrokenPipeError):  # output piped into `head` and closed early
            sys.stderr.close()
            return 0
        print(f"jaxpareto: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
