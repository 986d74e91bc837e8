"""``jaxpareto sweep [SPEC]``: a grid sweep (streamed, distributed or ``--reduce``d to its fronts)
or, for a spec with a ``[session]`` table, a session sweep; prints its size, speed and the
frontier of the spec's headline cell."""

from __future__ import annotations

import argparse
import json
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd

from jaxpareto.cli._common import FLOAT_FORMAT, Renamed, Report, add_calibration_option, add_csv_option, \
    add_output_options, add_solver_option, check_file_out, new_output, write_csv
from jaxpareto.dataset.costs import add_costs
from jaxpareto.dataset.goodput import peak_goodput
from jaxpareto.dataset.reduce import pareto_sweep
from jaxpareto.dataset.selection import best_task_configuration, session_axes, session_coords
from jaxpareto.dataset.session import TASK_VARIABLES, session_sweep
from jaxpareto.dataset.pareto import default_dims
from jaxpareto.dataset.store import sweep_to_zarr, to_zarr
from jaxpareto.dataset.plan import output_variables, plan_sweep
from jaxpareto.dataset.sweep import sweep
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.settings import DTYPES
from jaxpareto.definitions.schema import FLAG_VARIABLES, OUTPUTS
from jaxpareto.definitions.spec import load_spec


def _overrides(args: argparse.Namespace, kwargs: dict, options: tuple[str, ...]) -> None:
    """Command-line options given override the spec's keywords of the same name (in place):
    --solver is the library's ``solver=``, as the spec's [solver] name is."""
    for option in options:
        if getattr(args, option) is not None:
            kwargs[option] = getattr(args, option)


def _cmd_session(args: argparse.Namespace, spec) -> int:
    """A spec with a [session] table: whole sessions, in memory (then written to --out)."""
    kwargs = spec.session_kwargs()
    _overrides(args, kwargs, ("dtype", "solver", "calibration"))
    if args.scheduler or args.reduce or args.variables or args.chunk_points or args.progress:
        raise JaxparetoError("--scheduler/--reduce/--variables/--chunk-points/--progress",
                             "apply to grid sweeps, not to [session] specs")
    grid = spec.grid_axes()  # with a layout's or a disaggregated replica's axes where the grid gives them
    axes = session_axes(grid)
    # the report and the output path are checked before anything runs
    report = Report(spec.report.x, spec.report.y, spec.report.dims or list(default_dims(axes)), spec.report.minimize,
                    [*OUTPUTS, *TASK_VARIABLES], axes)
    selection = report.cell(session_coords(kwargs, spec.session.turns, grid), spec.report.headline,
                            "report.headline")
    out = new_output(args)
    start = time.perf_counter()
    ds = session_sweep(**kwargs)
    prices = spec.prices.model_dump(exclude_none=True) if spec.prices is not None else {}
    if prices:  # an empty [prices] table prices nothing
        ds = add_costs(ds, **prices)
    elapsed = time.perf_counter() - start
    selection = report.cell(ds.coords, {**spec.report.headline, **selection}, "report.headline")
    ds.attrs["report"] = json.dumps(spec.report.model_dump(mode="json"))
    if out is not None:
        to_zarr(ds, out, overwrite=args.overwrite)
    points = int(np.prod([ds.sizes[a] for a in axes]))
    print(f"spec: {args.spec}")
    if spec.description:
        print(f"  {spec.description}")
    print(f"sessions: {points:,} points, configurations by turns ({' x '.join(f'{a} {ds.sizes[a]}' for a in axes)})"
          f"{f', written to {out}' if out else ''}")
    print(f"wall time: {elapsed:.2f} s, {_rate(points, elapsed)} configs/s; KV demand {ds.attrs['kv_demand']}")
    # a session configuration fails at its first infeasible turn, for that turn's reason
    reason = ds.infeasible_reason
    first = reason.isel(turn=(reason > 0).argmax("turn"))
    infeasible = int((first > 0).sum())
    unconverged = int((ds.feasible & ~ds.converged).any("turn").sum())
    configurations = int(np.prod([ds.sizes[a] for a in axes if a != "turn"]))
    print(f"infeasible configurations: {infeasible:,} of {configurations:,} (each at its first infeasible turn)"
          f"{_reasons(first) if infeasible else ''}; unconverged: {unconverged:,}")
    if not bool(ds.task_feasible.any()):
        last = int(ds.turn.max())
        print(textwrap.fill(f"note: no task completes: every configuration has an infeasible turn or no session that "
                            f"KV memory holds for the whole task, so tasks_per_s and task_time_s are NaN throughout "
                            f"(the per-turn variables stand; turns 1-{last}, context up to "
                            f"{int(ds.context_tokens.max()):,} tokens)", width=100, subsequent_indent="  "))
    where = {k: v for k, v in selection.items() if k != "turn"}
    top = best_task_configuration(ds.sel(where))
    if top is not None:
        searched = [d for d in ds.tasks_per_s.dims if d not in where]  # tp, concurrency, a layout's axes
        print(f"most tasks/s at {', '.join(f'{k}={v}' for k, v in where.items())}: "
              f"{', '.join(f'{d} {top[d].item():g}' for d in searched)}: {float(top.tasks_per_s):.3g} tasks/s, "
              f"task time {float(top.task_time_s):,.1f} s, operational intensity at turn {selection.get('turn')} "
              f"{float(top.operational_intensity.sel(turn=selection['turn'])):,.0f} FLOP/byte "
              f"(ridge {float(top.ridge_point):,.0f})")
    write_csv(report.print_frontier(ds, selection), args.csv, args.overwrite, "frontier points")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    if args.csv:  # refused now, not after the sweep
        check_file_out(args.csv, "--csv", args.overwrite)
    spec = load_spec(args.spec)
    if spec.session is not None:
        return _cmd_session(args, spec)
    kwargs = spec.sweep_kwargs()
    _overrides(args, kwargs, ("dtype", "solver", "chunk_points", "calibration"))
    if args.variables is not None:
        names = [v.strip() for v in args.variables.split(",") if v.strip()]
        if not names:
            raise JaxparetoError("--variables", "name at least one output", list(OUTPUTS))
        output_variables(names)  # an unknown name is refused here, named, before anything runs
        kwargs["variables"] = sorted({*names, spec.report.x, spec.report.y}, key=list(OUTPUTS).index) \
            if spec.report.x in OUTPUTS and spec.report.y in OUTPUTS else names  # the report needs its x and y
    kwargs["attrs"] = {"spec": json.dumps(spec.model_dump(mode="json")),
                       "report": json.dumps(spec.report.model_dump(mode="json"))}
    # Every input is checked before anything runs or is written.
    plan = plan_sweep(**kwargs)
    report = Report(spec.report.x, spec.report.y, spec.report.dims or list(default_dims(plan.dims)),
                    spec.report.minimize, plan.variables, plan.dims)
    selection = report.cell(plan.coords, spec.report.headline, "report.headline")
    if args.max_front_points is not None and not args.reduce:  # the reduced store keeps the front's points
        raise JaxparetoError("--max-front-points", "applies with --reduce only")
    if args.reduce:
        if args.scheduler:
            raise JaxparetoError("--reduce", "runs locally; it cannot be combined with --scheduler")
        out = new_output(args)  # a reduced store is written whole at the end: never resumed
        return _reduced_sweep(args, plan, report, selection, out, time.perf_counter())
    out = Path(args.out) if args.out else None  # sweep_to_zarr refuses a bad store before computing
    if out is None and args.scheduler:
        raise JaxparetoError("--scheduler", "needs --out: dask workers write their blocks into the store")

    start, resumed = time.perf_counter(), 0
    if out is None:
        ds = sweep(plan)
        infeasible = int((~ds.feasible).sum())
        unconverged = int((ds.feasible & ~ds.converged).sum())
    else:
        client = _dask_client(args.scheduler) if args.scheduler else None
        try:
            ds = sweep_to_zarr(out, plan, overwrite=args.overwrite, progress=args.progress, client=client)
        finally:
            if client is not None:
                client.close()
        infeasible, unconverged = ds.attrs["infeasible_points"], ds.attrs["unconverged_points"]
        resumed = ds.attrs["points_resumed"]
    elapsed = time.perf_counter() - start

    points = int(np.prod(plan.shape))
    print(f"spec: {args.spec or '(built-in default: seed code agent)'}")
    if spec.description:
        print(f"  {spec.description}")
    print(f"grid: {points:,} configurations ({' x '.join(f'{a} {n}' for a, n in zip(plan.dims, plan.shape))})")
    where = f", written to {out}" if out else ""
    if resumed:
        print(f"resumed {out}: {resumed:,} configurations were computed by an earlier run, "
              f"{points - resumed:,} by this one")
    print(f"wall time: {elapsed:.2f} s (compilation included{where}), {_rate(points - resumed, elapsed)} "
          f"configs/s, solver {plan.solver.name}, {plan.dtype}")
    reasons = _reasons(ds.infeasible_reason) if infeasible and "infeasible_reason" in ds.data_vars else ""
    print(f"infeasible: {infeasible:,}{reasons}; unconverged: {unconverged:,}")
    prices = spec.prices.model_dump(exclude_none=True) if spec.prices is not None else None
    write_csv(report.print_frontier(ds, selection, prices), args.csv, args.overwrite, "frontier points")
    if plan.options.open_loop and "request_goodput" in ds.data_vars:
        _print_goodput(ds, selection, plan)
    return 0


def _print_goodput(ds, selection: dict, plan) -> None:
    """The open loop's goodput peak per TP in the headline cell (`jaxpareto.peak_goodput`)."""
    cell = {k: v for k, v in selection.items() if k not in ("tp", "request_rate")}
    peak = peak_goodput(ds.sel(cell)[["request_goodput"]]).load()
    targets = json.loads(plan.attrs()["slo"]) or "none (goodput = throughput)"
    print(f"\nGoodput (requests/s within the SLO: {targets}) at its peak over request_rate:")
    best = np.asarray(peak.request_goodput_peak.values, dtype=float)
    # peak_goodput: 0 where every served rate misses the SLO, NaN where every rate is beyond capacity
    note = np.where(np.isnan(best), "every rate beyond capacity", np.where(best > 0, "", "no served rate meets the SLO"))
    table = pd.DataFrame({"tp": peak.tp.values, "request_goodput_peak": best,
                          "request_rate_at_peak": peak.request_rate_at_peak.values, "note": note})
    with pd.option_context("display.width", 250, "display.float_format", FLOAT_FORMAT):
        print(table.to_string(index=False))


def _rate(points: int, elapsed: float) -> str:
    """Configurations per second, with 3 significant digits below 100 (not "0 configs/s")."""
    rate = points / max(elapsed, 1e-9)
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def _reasons(reason) -> str:
    """`` (12 context beyond model maximum, 30 no session fits kv memory)``: the infeasible points
    by reason, from ``infeasible_reason`` flags."""
    codes, counts = np.unique(np.asarray(reason.values), return_counts=True)
    labels = FLAG_VARIABLES["infeasible_reason"][1]
    parts = [f"{labels[int(c)].replace('_', ' ')} {n:,}" for c, n in zip(codes, counts) if c > 0]
    return f" ({', '.join(parts)})"


def _reduced_sweep(args, plan, report: Report, selection: dict, out: Path | None, start: float) -> int:
    """--reduce: keep each cell's front and best configurations, not every point."""
    limit = {} if args.max_front_points is None else {"max_front_points": args.max_front_points}  # else the library's
    reduced = pareto_sweep(plan, x=report.x, y=report.y, dims=report.dims, maximize=report.maximize, **limit)
    elapsed = time.perf_counter() - start
    if out is not None:
        to_zarr(reduced, out, overwrite=args.overwrite)
    points = int(np.prod(plan.shape))
    cells = int(reduced.front_size.size)
    print(f"spec: {args.spec or '(built-in default: seed code agent)'}")
    print(f"grid: {points:,} configurations reduced to the Pareto fronts of {cells:,} cells"
          f"{f', written to {out}' if out else ''}")
    print(f"wall time: {elapsed:.2f} s, {_rate(points, elapsed)} configs/s")
    cell = reduced.sel(selection)
    k = int(cell.front_size)
    print(f"\nPareto front at {', '.join(f'{a}={v}' for a, v in selection.items())}: {k} configurations")
    table = pd.DataFrame({name.removeprefix("front_"): cell[name].values[: min(k, cell.sizes['front_point'])]
                          for name in cell.data_vars if name.startswith("front_") and name != "front_size"})
    kept = len(table)
    table = table.drop_duplicates(subset=[report.x, report.y], keep="first")
    with pd.option_context("display.width", 250, "display.float_format", FLOAT_FORMAT):
        print(table.to_string(index=False))
    if kept > len(table):
        print(f"({kept - len(table)} more frontier configurations tie exactly with a row above, e.g. concurrency "
              "beyond what KV memory admits; the reduced store's front_* variables keep them all)")
    if k > kept:
        print(f"(the front holds {k} configurations; {kept} kept: --max-front-points)")
    write_csv(table, args.csv, args.overwrite, "frontier points")
    return 0


def _dask_client(address: str):
    try:
        from distributed import Client
    except ImportError:
        raise JaxparetoError("--scheduler", "needs dask.distributed: pip install 'jaxpareto[dask]'") from None
    return Client(address)


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("sweep", help="run a sweep spec (default: the seed's code agent) and print its frontier")
    p.add_argument("spec", nargs="?", help="sweep spec TOML or a preset name (default: built-in code agent)")
    add_output_options(p, "zarr store to stream into; an unfinished one of the same spec is resumed, "
                          "anything else existing is refused unless --overwrite")
    add_csv_option(p, "the printed frontier of the headline cell (every cell: jaxpareto pareto --csv)")
    p.add_argument("--dtype", choices=DTYPES, help="override the spec's floating point type")
    add_solver_option(p)
    p.add_argument("--method", action=Renamed, default=argparse.SUPPRESS,
                   renamed_to="the fixed-point solver is --solver (damped, exact, newton)")
    p.add_argument("--variables", help="comma-separated outputs to keep (default all)")
    p.add_argument("--chunk-points", type=int, help="points per compute block and zarr chunk")
    add_calibration_option(p)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: only when stderr is a terminal)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run the blocks on a dask.distributed scheduler (needs --out)")
    p.add_argument("--reduce", action="store_true",
                   help="keep only each cell's Pareto front and best configurations (for grids too large to store)")
    p.add_argument("--max-front-points", type=int, help="with --reduce: front points kept per cell (default 64)")
    p.set_defaults(func=_cmd_sweep)
    return p
