"""What several commands share: the report (objectives, front dims, headline cell) and its
frontier printer, the --out check, the table format, and the error for a renamed option."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import xarray as xr

from jaxpareto.dataset.costs import COST_VARIABLES, add_costs
from jaxpareto.dataset.pareto import TABLE_METRICS, frontier_table, pareto_front
from jaxpareto.dataset.selection import headline_cell
from jaxpareto.dataset.store import check_new_output, open_sweep
from jaxpareto.definitions.calibration_file import calibration_options
from jaxpareto.definitions.checks import check_number, check_output_folder
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ATTENTION, CACHE_MODELS, GEMM_RATES, PAUSE_DISTRIBUTIONS, PREFILL_MODELS, \
    PROFILES, ROOFLINES, SEARCH_METHODS, SEEN_BATCHES
from jaxpareto.definitions.schema import default_maximize
from jaxpareto.definitions.settings import SOLVERS
from jaxpareto.definitions.axes import AXES, AXIS_BY_NAME
from jaxpareto.search.problem import OPTIMUM_TITLE

FLOAT_FORMAT = "{:,.4g}".format


def check_file_out(path: str | Path, option: str, overwrite: bool) -> Path:
    """An output file's path, checked before any work: its folder exists, and an existing file
    is replaced only with ``--overwrite`` (never a folder).

    Raises:
        JaxparetoError: naming ``option``.
    """
    path = Path(path)
    check_output_folder(path, option)
    if path.exists() and not (overwrite and path.is_file()):
        raise JaxparetoError(option, f"{path} already exists; pass --overwrite to replace it"
                             if path.is_file() else f"{path} exists and is not a file; refusing to replace it")
    return path


SLO_FORMS = ("NAME<=LIMIT", "NAME>=LIMIT", "NAME=LIMIT (an upper limit, as NAME<=LIMIT)")


def parse_slos(items: Sequence[str] | None, *, upper_only: bool = False) -> dict[str, tuple[str, float]]:
    """``--slo`` values, one syntax for every command: ``ttft_ms<=2000``, ``output_tokens_per_s_per_user>=20``,
    or ``ttft_ms=2000`` (an upper limit). Returns name -> (operator, limit).

    Raises:
        JaxparetoError: ``--slo`` with a malformed item, a limit that is not a finite number, or
            (``upper_only``) a lower limit.
    """
    slos = {}
    for item in items or []:
        for op in ("<=", ">=", "="):
            name, sep, limit = str(item).partition(op)
            if sep:
                break
        try:
            value = float(limit) if sep and name.strip() else None
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):
            raise JaxparetoError("--slo", f"expected a name and a number, got {item!r}", SLO_FORMS)
        if upper_only and op == ">=":
            raise JaxparetoError("--slo", f"{item!r}: these SLOs are upper limits (NAME<=LIMIT)")
        if name.strip() in slos:
            raise JaxparetoError("--slo", f"{name.strip()} is given twice; give one limit per output")
        slos[name.strip()] = ("<=" if op == "=" else op, value)
    return slos


def write_csv(table, path: str | None, overwrite: bool, what: str) -> None:
    """Write a printed table to ``--csv`` as well (checked like every output file)."""
    if path:
        out = check_file_out(path, "--csv", overwrite)
        table.to_csv(out, index=False)
        print(f"wrote {len(table):,} {what} to {out}")


def add_csv_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--csv", help=f"also write {what} to this CSV file")


def add_scenario_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    """One scenario as flags (``size``, ``optimize`` without a spec); defaults shown in --help."""
    from jaxpareto.definitions.axes import AXIS_BY_NAME, TP_CHOICES
    from jaxpareto.definitions.settings import Workload

    p.add_argument("--gpu", required=required, help="catalog GPU name")
    p.add_argument("--model", required=required, help="catalog model name")
    p.add_argument("--think-time-s", type=float, default=2.0, help="pause between turns Z [s] (default 2.0)")
    p.add_argument("--context-tokens", type=int, default=32768, help="context of the turn L (default 32768)")
    p.add_argument("--hit-rate", type=float, default=0.9, help="prefix-cache hit rate h (default 0.9)")
    p.add_argument("--osl", type=float, default=Workload.osl, help=f"output tokens per turn (default {Workload.osl:g})")
    p.add_argument("--delta-tokens", type=float, default=Workload.delta_tokens,
                   help=f"tokens prefilled on a cache hit (default {Workload.delta_tokens:g})")
    p.add_argument("--slo", action="append", metavar="NAME<=LIMIT",
                   help="an SLO, e.g. ttft_ms<=2000, output_tokens_per_s_per_user>=20 (repeatable; NAME=LIMIT "
                        "is an upper limit)")
    p.add_argument("--tp", default=",".join(map(str, TP_CHOICES)),
                   help=f"TP choices (default {','.join(map(str, TP_CHOICES))})")
    p.add_argument("--max-concurrency", type=int, default=4096, help="most sessions per replica searched (default 4096)")
    p.add_argument("--engine", default=AXIS_BY_NAME["engine"].default,
                   help="serving engine: seed (default: the seed's memory and factors), vllm, sglang or trtllm")
    add_calibration_option(p)
    equations = p.add_argument_group("model equations", "the seed's unless given or adopted from --calibration "
                                                        "(docs/model.md; the library's ModelOptions)")
    for name, choices, what in MODEL_FLAGS:
        equations.add_argument("--" + name.replace("_", "-"), choices=choices, help=what)
    equations.add_argument("--cache-ttl-s", type=float, metavar="SECONDS",
                           help="how long --cache-model ttl keeps a session's prefix [s]")


# the closed-loop `ModelOptions` a scenario's flags choose (`add_scenario_options`)
MODEL_FLAGS = (
    ("prefill_model", PREFILL_MODELS, "isolated (the seed's: every prefill alone at the GPUs' full speed, "
                                      "however many there are) or shared (chunked prefill in the decode steps: "
                                      "GPU time conserved)"),
    ("cache_model", CACHE_MODELS, "the hit rate as given (the seed's), after a TTL, or from KV memory (lru)"),
    ("pause_distribution", PAUSE_DISTRIBUTIONS, "pauses around the think time, for --cache-model ttl and lru"),
    ("profile", PROFILES, "the seed's equations or the measured profile"),
    ("gemm_rate", GEMM_RATES, "matmuls at the datasheet peak (the seed's) or at the rate GEMMs measurably reach"),
    ("attention", ATTENTION, "attention as the profile counts it, or its FLOPs too"),
    ("roofline", ROOFLINES, "one roofline per decode step (the seed's) or one per operator"),
    ("seen_batch", SEEN_BATCHES, "decode steps at the mean batch (the seed's) or at the batch a session sees: "
                                 "itself and the others' binomial count, a MoE step's experts averaged over it, "
                                 "and a turn waiting for KV memory whenever it finds the slots full"),
)


def scenario_kwargs(args: argparse.Namespace) -> dict:
    """The keywords of `jaxpareto.optimize` / `size_deployment` from `add_scenario_options`' flags."""
    try:
        tp = tuple(int(t) for t in args.tp.split(","))
    except ValueError:
        raise JaxparetoError("--tp", f"expected comma-separated integers, got {args.tp!r}") from None
    axis = AXIS_BY_NAME["concurrency"]
    check_number("--max-concurrency", args.max_concurrency, low=axis.low, high=axis.high, integer=True)
    kwargs = dict(gpu=args.gpu, model=args.model, think_time_s=args.think_time_s, context_tokens=args.context_tokens,
                  hit_rate=args.hit_rate, constraints=parse_slos(args.slo), tp=tp,
                  concurrency=(1, args.max_concurrency), osl=args.osl, delta_tokens=args.delta_tokens,
                  engine=args.engine)
    if args.calibration:
        kwargs["calibration"] = args.calibration
    if args.cache_ttl_s is not None:  # it implies the TTL model, which alone takes it (the library refuses others)
        kwargs["cache_ttl_s"] = args.cache_ttl_s
    kwargs.update(_given_equations(args))
    return kwargs


def _given_equations(args: argparse.Namespace) -> dict[str, str]:
    """The model-equation flags given (`MODEL_FLAGS`), as keywords."""
    return {name: getattr(args, name) for name, _, _ in MODEL_FLAGS if getattr(args, name, None) is not None}


def describe_scenario(args: argparse.Namespace) -> str:
    """The scenario's settings as one line, defaults included (what an answer assumed)."""
    slos = ", ".join(f"{n} {op} {v:g}" for n, (op, v) in parse_slos(args.slo).items()) or "none (memory only)"
    equations = "".join(f", {name.replace('_', ' ')} {value}" for name, value in _given_equations(args).items())
    if args.cache_ttl_s is not None:
        equations += f", cache TTL {args.cache_ttl_s:g} s"
    return (f"scenario: think time {args.think_time_s:g} s, context {args.context_tokens:,} tokens, hit rate "
            f"{args.hit_rate:g}, OSL {args.osl:g}, {args.delta_tokens:,.0f} tokens prefilled on a hit, engine "
            f"{args.engine}{f', calibration {args.calibration}' if args.calibration else ''}{equations}; SLOs: {slos}")


def prefill_model_of(args: argparse.Namespace) -> str:
    """The prefill model a scenario's answer used: --prefill-model, else its calibration's, else
    the seed's ("isolated")."""
    if getattr(args, "prefill_model", None):
        return args.prefill_model
    fitted = calibration_options(args.calibration) if getattr(args, "calibration", None) else {}
    return fitted.get("prefill_model", "isolated")


def prefill_overcommit_note(utilization: float, prefill_model: str) -> str | None:
    """A note where the answer's point asks more of the GPUs than they have: the seed's isolated
    prefill runs every turn's prefill alone at the GPUs' full speed however many overlap, so its
    ``gpu_utilization`` (decode and prefill compute over what the GPUs deliver) can pass 1; the
    shared engine conserves GPU time (docs/model.md, "Shared prefill"). None where it does not."""
    if prefill_model != "isolated" or not utilization > 1.0:
        return None
    return (f"note: at this point the seed's isolated prefill asks for {utilization:.2f}x the compute the GPUs "
            "deliver (gpu_utilization): its turns prefill alone at full speed however many overlap, which no "
            "server does; --prefill-model shared shares the GPUs between prefill and decode")


class Report:
    """What to print: objectives, their directions, the front's dims and one headline cell."""

    def __init__(self, x: str, y: str, dims: Sequence[str], minimize: Sequence[str], available: Sequence[str],
                 axes: Sequence[str] = AXES):
        for field, name in (("x", x), ("y", y)):
            if name not in available:
                raise JaxparetoError(f"report {field}", f"unknown or unselected variable {name!r}", available)
        if x == y:
            raise JaxparetoError("report y", f"is x too ({x!r}): a front of one objective against itself is its best")
        dims = tuple(dims)
        self.axes = tuple(axes)
        for d in dims:
            if d not in self.axes:
                raise JaxparetoError("report dims", f"unknown dimension {d!r}", self.axes)
        if len(set(dims)) != len(dims) or not dims:
            raise JaxparetoError("report dims", f"need one or more distinct dimensions, got {list(dims)}")
        if len(set(minimize)) != len(minimize):
            raise JaxparetoError("minimize", f"names an objective twice: {list(minimize)}")
        for name in minimize:
            if name not in (x, y):
                raise JaxparetoError("minimize", f"{name!r} is neither objective", (x, y))
        self.x, self.y, self.dims = x, y, dims
        # a latency or a cost is minimised whether named or not (`default_maximize`)
        self.maximize = tuple(name not in minimize and best for name, best in zip((x, y), default_maximize(x, y)))

    def cell(self, coords: Mapping[str, Sequence], headline: Mapping, source: str) -> dict:
        """The headline cell (`jaxpareto.dataset.selection.headline_cell`) outside the front's dims."""
        return headline_cell(coords, headline, self.dims, self.axes, source)

    def print_frontier(self, ds: xr.Dataset, selection: dict, prices: Mapping | None = None) -> pd.DataFrame:
        """Print the headline cell's frontier (with ``prices``, a spec's [prices], its costs too)
        and return it."""
        cell = ds.sel(selection)
        if prices:
            cell = add_costs(cell, **prices)
        costs = [name for name in COST_VARIABLES if name in cell.data_vars]
        front = pareto_front(cell, x=self.x, y=self.y, dims=self.dims, maximize=self.maximize)
        table = frontier_table(cell, front, x=self.x, y=self.y, dims=self.dims, drop_ties=True,
                               metrics=(*TABLE_METRICS, *costs))
        where = ", ".join(f"{k}={v}" for k, v in selection.items())
        senses = " and ".join(f"{'max' if m else 'min'} {n}" for n, m in zip((self.x, self.y), self.maximize))
        print(f"\nPareto frontier ({senses}) over {', '.join(self.dims)} at {where}:")
        if table.empty:
            print("  (no feasible, converged point in this cell)")
            return table
        with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", FLOAT_FORMAT):
            print(table.to_string(index=False))
        ties = int(front.sum()) - len(table)
        if ties:
            print(f"({ties} more frontier configurations tie exactly with a row above, e.g. concurrency beyond "
                  "what KV memory admits; `jaxpareto pareto --csv` lists them all)")
        return table


def new_output(args: argparse.Namespace) -> Path | None:
    """--out as a path, refused now (before computing) when it exists without --overwrite."""
    if not args.out:
        return None
    out = Path(args.out)
    check_new_output(out, args.overwrite)
    return out


def add_output_options(p: argparse.ArgumentParser, help: str) -> None:
    """--out (a zarr store) and --overwrite."""
    p.add_argument("--out", help=help)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out zarr store")


def add_solver_option(p: argparse.ArgumentParser) -> None:
    """``--solver``: the closed-loop fixed-point solver (the library's ``solver=``)."""
    p.add_argument("--solver", choices=SOLVERS, help="closed-loop fixed-point solver (default: the spec's, damped)")


class SearchMethod(argparse.Action):
    """``--method`` of a search: one of `SEARCH_METHODS`; a solver's name is an error (exit
    status 2, one line) saying that the solver is ``--solver``."""

    def __call__(self, parser, namespace, value, option_string=None):
        if value in SOLVERS:
            raise JaxparetoError("--method", f"is the search ({', '.join(SEARCH_METHODS)}); the fixed-point "
                                             f"solver is --solver {value}")
        if value not in SEARCH_METHODS:
            raise JaxparetoError("--method", f"unknown search {value!r}", SEARCH_METHODS)
        setattr(namespace, self.dest, value)


def add_calibration_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", help="TOML of fitted efficiency factors (`jaxpareto calibrate`) to use")


class Renamed(argparse.Action):
    """An option that was renamed: using it is an error (exit status 2) saying the new spelling.
    Raised while parsing, so `jaxpareto.cli.app.main` prints it as one line."""

    def __init__(self, option_strings, dest, renamed_to: str, **kwargs):
        self.renamed_to = renamed_to
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        raise JaxparetoError(option_string or self.option_strings[0], f"renamed: {self.renamed_to}")


def open_sweep_store(path: str | Path) -> xr.Dataset:
    """A stored sweep for ``pareto`` and ``plot`` (`jaxpareto.open_sweep`), refusing by name a
    store of ``jaxpareto optimize`` results, the optimum per scenario, which has no TP or
    concurrency dimension to take a front over or to plot.

    Raises:
        JaxparetoError: on ``store``.
    """
    ds = open_sweep(Path(path))  # an interrupted store is refused, never read as a result
    if ds.attrs.get("title") == OPTIMUM_TITLE:
        raise JaxparetoError("store", f"{path} holds `jaxpareto optimize` results (the optimum per scenario), not a "
                                      "sweep: read them with xarray.open_zarr; pareto and plot read the stores of "
                                      "`jaxpareto sweep --out`")
    return ds
