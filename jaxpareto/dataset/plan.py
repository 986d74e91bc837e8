"""`plan_sweep`: every input of a sweep validated into one `SweepPlan`, before anything compiles.

The plan is the object the later stages receive whole: the in-memory sweep, the zarr store,
the Pareto reduction, sessions, the optimiser and sizing all start from one.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence

import jax
import numpy as np

from jaxpareto.definitions.axes import AXIS_BY_NAME, DISAGGREGATION_AXES, LAYOUT_AXES, LOAD_AXES, Axis, axis_table, \
    grid_axes
from jaxpareto.definitions.catalog import check_own_name
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.model import Model
from jaxpareto.definitions.options import CACHE_MODELS, SERVING_MODES, ModelOptions
from jaxpareto.definitions.schema import OUTPUTS, PERCENTILE_VARIABLES
from jaxpareto.definitions.settings import DTYPES, SOLVERS, Efficiency, LatencySlo, Solver, Workload, flat_default, \
    latency_slo, numeric_fields, solver_of
from jaxpareto.definitions.version import __version__
from jaxpareto.definitions.settings import DEFAULT_CHUNK_POINTS
from jaxpareto.mapper import GridProblem
from jaxpareto.definitions.calibration_file import MODEL_FIELDS, calibration_engines, calibration_options, \
    load_calibration
from jaxpareto.definitions.engine import Engine, resolve_engine

# The flat keywords of `plan_sweep`: every settings field, and every option.
_SETTINGS = {cls: {f.name: f for f in numeric_fields(cls)} for cls in (Workload, Efficiency, Solver)}
FLAT_KEYWORDS: dict[str, object] = {name: flat_default(f) for fields in _SETTINGS.values() for name, f in fields.items()}
FLAT_KEYWORDS.update({**ModelOptions()._asdict(), "cache_model": None})
_RENAMED = {"method": f"the fixed-point solver is solver= {SOLVERS}"}


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: definitions, axis values, scalars and options, ready to run.

    Attributes:
        definitions: categorical axis -> its definitions (`Hardware` for ``gpu``, `Model` for
            ``model``, `Engine` for ``engine``), in coordinate order.
        axes: numeric axis -> 1-D values.
        workload, efficiency, solver: the shared scalars (checked); ``solver.name`` is the solver.
        dtype: "float32" or "float64".
        variables: the outputs kept, in schema order.
        chunk_points: points per compute block and zarr chunk.
        extra_attrs: attributes added to the dataset.
        options: the model's equations.
    """

    definitions: dict[str, list]
    axes: dict[str, np.ndarray]
    workload: Workload
    efficiency: Efficiency
    solver: Solver
    dtype: str
    variables: tuple[str, ...]
    chunk_points: int
    extra_attrs: dict = dataclasses.field(default_factory=dict)
    options: ModelOptions = ModelOptions()

    @property
    def gpus(self) -> list[Hardware]:
        return self.definitions["gpu"]

    @property
    def models(self) -> list[Model]:
        return self.definitions["model"]

    def replace(self, **changes) -> "SweepPlan":
        """A copy with fields replaced (``axes`` entries merge into the plan's)."""
        if "axes" in changes:
            changes["axes"] = {**self.axes, **changes["axes"]}
        return dataclasses.replace(self, **changes)

    def problem(self, outputs: Sequence[str] | None = None, whole_axes: Sequence[int] = ()) -> GridProblem:
        return GridProblem(
            {name: [d.to_params() for d in defs] for name, defs in self.definitions.items()}, self.axes,
            self.workload, self.efficiency, self.solver, dtype=self.dtype,
            outputs=self.variables if outputs is None else tuple(outputs), chunk_points=self.chunk_points,
            whole_axes=whole_axes, options=self.options, table=self.table,
        )

    @property
    def table(self) -> tuple[Axis, ...]:
        """The grid's axes: the closed loop's, or the open loop's with ``request_rate``; with
        the layout axes where the sweep gives one, and the pools' under disaggregated serving."""
        return axis_table(self.options.open_loop, self.options.disaggregated, self.layout)

    @property
    def layout(self) -> bool:
        """The grid has the parallel-layout axes (`jaxpareto.definitions.axes.LAYOUT_AXES`)."""
        return LAYOUT_AXES[0].name in self.axes

    @property
    def dims(self) -> tuple[str, ...]:
        """The dataset's dimensions, in order."""
        return tuple(a.name for a in self.table)

    @property
    def coords(self) -> dict[str, Sequence]:
        return {a.name: [d.name for d in self.definitions[a.name]] if a.categorical else self.axes[a.name]
                for a in self.table}

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(values) for values in self.coords.values())

    def _workload_attrs(self) -> dict:
        """Every `Workload` field, in the order stores have always listed them (the cache
        settings first), with the unset TTL and KV context spelled out."""
        workload, fields = self.workload, list(self.workload.__dataclass_fields__)
        start = fields.index("cache_ttl_s")
        out = {name: float(getattr(workload, name)) for name in fields[start:] + fields[:start] if name != "slo"}
        out["slo"] = json.dumps({k: v for k, v in workload.slo._asdict().items() if math.isfinite(v)})
        if self.options.cache_model != "ttl":
            out["cache_ttl_s"] = "none (no expiry)"
        if workload.kv_context_tokens == 0:
            out["kv_context_tokens"] = "per point (context_tokens)"
        if not self.options.disaggregated:  # settings of the prefill pool, which there is not
            for name in ("kv_link_gbs", "kv_link_latency_us", "local_prefill_tokens"):
                del out[name]
        elif self.options.serving != "conditional":
            del out["local_prefill_tokens"]
        if not self.layout:  # expert parallelism's, which there is not
            del out["expert_imbalance"]
        if self.options.disaggregated and workload.kv_link_gbs == 0:
            out["kv_link_gbs"] = "the catalog's (interconnect_gbs within a scale-up domain, else scaleout_gbs)"
        return out

    def attrs(self) -> dict:
        """Provenance attributes (README, "The dataset"), JSON-serialisable."""
        return {
            "title": "jaxpareto agent-serving sweep",
            "jaxpareto_version": __version__,
            "jax_version": jax.__version__,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "model_equations": "seed 000 section 3 eqs. 1-5 as fixed by docs/model.md",
            "dtype": self.dtype,
            "solver": self.solver.name,
            **{k: v for k, v in self.options._asdict().items() if self.layout or k != "dp_prefill"},
            **self._workload_attrs(),
            **{name: float(getattr(self.efficiency, name)) for name in self.efficiency.__dataclass_fields__},
            **{f.name: getattr(self.solver, f.name) for f in numeric_fields(Solver)},
            "hardware": json.dumps([g.to_dict() for g in self.gpus]),
            "models": json.dumps([m.to_dict() for m in self.models]),
            "engines": json.dumps([e.to_dict() for e in self.definitions["engine"]]),
            **self.extra_attrs,
        }


def plan_sweep(
    gpu: str | Hardware | Sequence[str | Hardware] | None = None,
    model: str | Model | Sequence[str | Model] | None = None,
    tp: int | Sequence[int] | None = None,
    concurrency: int | Sequence[int] | None = None,
    think_time_s: float | Sequence[float] = AXIS_BY_NAME["think_time_s"].default,
    context_tokens: int | Sequence[int] = AXIS_BY_NAME["context_tokens"].default,
    hit_rate: float | Sequence[float] = AXIS_BY_NAME["hit_rate"].default,
    *,
    workload: Workload | None = None,
    efficiency: Efficiency | None = None,
    solver: str | Solver = "damped",
    options: ModelOptions | None = None,
    dtype: str = "float32",
    variables: Sequence[str] | None = None,
    chunk_points: int = DEFAULT_CHUNK_POINTS,
    hardware: Sequence[Hardware] = (),
    models: Sequence[Model] = (),
    engines: Sequence[Engine] = (),
    attrs: dict | None = None,
    calibration=None,
    slo=None,
    percentiles: bool | None = None,
    **settings,
) -> SweepPlan:
    """Validate every input of a sweep without computing anything.

    Every axis may be a scalar or a sequence (`jaxpareto.definitions.axes.AXIS_TABLE` gives
    each one's unit, bounds and default). The shared scalars come as objects, as flat keywords,
    or both (a keyword replaces that field of the object).

    Args:
        gpu: catalog names (`jaxpareto.catalog.gpus`), names from ``hardware``, or
            `Hardware` definitions.
        model: catalog names, names from ``models``, or `Model` definitions.
        tp: tensor-parallel degrees G (integers >= 1). ``gpu``, ``model`` and ``tp`` are
            required (a missing one is named, as the other axes' are).
        concurrency: concurrent sessions C (integers >= 1), the closed loop's load (required
            there).
        request_rate (keyword): requests (turns) per second λ arriving as a Poisson process per
            server (> 0), the open loop's load, required with ``arrivals="poisson"`` and taking
            the place of ``concurrency`` in the dataset.
        think_time_s: pauses between turns Z [s] (>= 0).
        context_tokens: context length of the turn L [tokens] (integers >= 1).
        hit_rate: prefix-cache hit rates h in [0, 1].
        workload: `Workload` (osl, delta_tokens, kv_context_tokens, TTL, pauses, chunk size,
            host tier); default the seed's code agent.
        efficiency: `Efficiency` factors and opt-in overheads; default the seed's.
        solver: "damped" (default: the seed's iteration, the reference), "exact" (closed form
            per linear piece of R(B); agrees with damped to 1e-5 where it converged, iterations
            reported as 0), or a `Solver` with its damping, tol and max_iter.
        options: `ModelOptions`: which equations (expert routing, prefill model, cache model,
            pause distribution); default the seed's.
        dtype: "float32" (default, fast) or "float64".
        variables: outputs to compute and keep (default all; ``feasible``,
            ``infeasible_reason`` and ``converged`` are always kept).
        chunk_points: points per compiled block (memory/compile-size trade-off).
        hardware, models, engines: custom definitions (`Hardware`, `Model`, `Engine`) that the
            name lists (``gpu``, ``model``, the ``engine`` axis) may refer to; none may take a
            catalog or shipped engine's name with other numbers.
        attrs: extra JSON-serialisable dataset attributes (e.g. the spec that produced it).
        calibration: a calibration TOML path (``jaxpareto calibrate``), or a mapping, whose
            ``[efficiency]`` values replace the efficiency factors they name; its ``[model]``
            table's ``prefill_model`` and ``profile`` (the model the factors were fitted with)
            are adopted, and asking for another is an error; its ``[engine.NAME]`` factors are
            those of the ``engine`` axis' engines of that name.
        slo: latency targets {metric: limit in ms} for ``request_goodput``, metrics among
            `jaxpareto.definitions.settings.LatencySlo`'s fields (``p99_ttft_ms``, ``p90_tpot_ms``,
            ``ttft_ms``, ...); default none (goodput = throughput), or the ``workload``'s own.
        percentiles: keep the latency percentiles (``p50_ttft_ms`` ... ``p99_e2el_ms``) and
            ``request_goodput`` among the default outputs (True, False or None). None (default):
            when they say something beyond the means, i.e. under Poisson arrivals, with an
            ``slo``, or with a length spread (``isl_cv`` or ``osl_cv`` > 0); False with an
            ``slo`` is an error (no goodput to apply it to). Outputs named in ``variables`` are
            always computed.
        **settings: any further axis of `AXIS_TABLE` (a new row needs no new argument here), and
            flat keywords, each a field of `Workload`, `Efficiency`, `Solver` (damping, tol,
            max_iter) or `ModelOptions` (`FLAT_KEYWORDS` lists them with their defaults).
            ``kv_context_tokens=None`` (default) holds each point's own context in KV;
            ``cache_ttl_s`` given implies ``cache_model="ttl"``.

    Returns:
        `SweepPlan`.

    Raises:
        JaxparetoError: naming the field and the allowed values; a renamed keyword names its
            new spelling.
    """
    # every axis of the table: the named ones above, and any other row given by keyword
    values = dict(gpu=gpu, model=model, tp=tp, concurrency=concurrency, think_time_s=think_time_s,
                  context_tokens=context_tokens, hit_rate=hit_rate)
    values.update({name: settings.pop(name) for name in list(settings) if name in AXIS_BY_NAME})
    for name in settings:
        if name in _RENAMED:
            raise JaxparetoError(name, f"renamed: {_RENAMED[name]}")
        if name not in FLAT_KEYWORDS:
            raise JaxparetoError(name, "unknown argument", sorted(FLAT_KEYWORDS))
    for field, value, cls in (("workload", workload, Workload), ("efficiency", efficiency, Efficiency),
                              ("options", options, ModelOptions)):
        if value is not None and not isinstance(value, cls):
            raise JaxparetoError(field, f"expected a jaxpareto {cls.__name__}, got {type(value).__name__}")
    if dtype not in DTYPES:
        raise JaxparetoError("dtype", f"unknown dtype {dtype!r}", DTYPES)
    if attrs is not None and not isinstance(attrs, Mapping):
        raise JaxparetoError("attrs", f"expected a mapping of attribute names to values, got {type(attrs).__name__}")
    if calibration is not None and not isinstance(calibration, (str, os.PathLike, Mapping)):
        raise JaxparetoError("calibration", f"expected a TOML path or a mapping, got {type(calibration).__name__}")
    solver = _settings(Solver, solver_of(solver), settings)
    workload = _settings(Workload, workload or Workload(), settings)
    if slo is None and workload.slo != LatencySlo():  # targets given in the Workload itself
        slo = workload.slo
    if slo is not None:
        workload = dataclasses.replace(workload, slo=latency_slo(slo))
    if percentiles is not None and not isinstance(percentiles, (bool, np.bool_)):
        raise JaxparetoError("percentiles", f"expected True, False or None, got {percentiles!r}", (True, False, None))
    if percentiles is False and slo is not None:
        raise JaxparetoError("percentiles", "False drops request_goodput, which the slo's targets are for: leave "
                                            "percentiles at None (or True) with an slo", (True, None))
    options = _options(options, settings, workload)
    _check_load(options, values)
    _check_serving_axes(options, values)
    layout = _layout_given(options, values, workload)
    if calibration is not None:  # adopt the model the factors were fitted with
        fitted = calibration_options(calibration)
        for field, fitted_with in fitted.items():
            # asked: a keyword or spec key (even at the default), or an options object's non-default value
            asked = settings.get(field)
            if asked is None and getattr(options, field) != getattr(ModelOptions(), field):
                asked = getattr(options, field)
            if field == "attention" and fitted.get("profile") == "measured":
                asked = None  # the measured profile counts attention's FLOPs whatever the option says
            if asked not in (None, fitted_with):
                raise JaxparetoError(field, f"the calibration's factors were fitted with {fitted_with!r}; "
                                            f"they do not transfer to {asked!r}")
            options = options._replace(**{field: fitted_with})
    if solver.name == "exact" and not options.piecewise_linear:
        adopted = calibration_options(calibration) if calibration is not None else {}
        why = ", ".join(choice + (" (the calibration's)" if choice.split("=")[0] in adopted else "")
                        for choice in options.nonlinear_choices)
        raise JaxparetoError("solver", f"'exact' needs a piecewise-linear R(B), which it is not under {why} (it "
                                       "needs expert_routing='seed', prefill_model='isolated', cache_model 'given' "
                                       "or 'ttl', arrivals not 'synchronised', aggregated serving, "
                                       "roofline='step' and seen_batch='mean'); use 'damped'")
    _check_used(options, workload)
    # the factors given away from their defaults (a spec passes every field, the defaults too)
    given = {name for name in _SETTINGS[Efficiency]
             if settings.get(name) is not None and settings[name] != FLAT_KEYWORDS[name]}
    if efficiency is not None:
        given |= {f.name for f in dataclasses.fields(Efficiency)
                  if getattr(efficiency, f.name) != getattr(Efficiency(), f.name)}
    efficiency = _settings(Efficiency, efficiency or Efficiency(), settings)
    if calibration is not None:
        fitted = load_calibration(calibration)
        clash = sorted(given & set(fitted))
        if clash:  # the calibration's value would silently replace the one given
            raise JaxparetoError(clash[0], "is set by the calibration too: give it there (a mapping may copy the "
                                           "file's values) or leave the calibration out")
        efficiency = dataclasses.replace(efficiency, **fitted)
    efficiency = efficiency.validate()
    chunk_points = check_number("chunk_points", chunk_points, low=1, integer=True)
    own_engines = _by_name("engines", engines, Engine)
    calibrated_engines = {name: resolve_engine(name, own_engines).with_efficiency(factors)
                          for name, factors in calibration_engines(calibration).items()} if calibration else {}
    definitions, axes = grid_axes(
        values, custom={"gpu": _by_name("hardware", hardware, Hardware), "model": _by_name("models", models, Model),
                        "engine": {**own_engines, **calibrated_engines}},
        table=axis_table(options.open_loop, options.disaggregated, layout),
    )
    if options.open_loop and workload.turns_per_session == 1 and np.any(np.asarray(axes["think_time_s"]) > 0):
        raise JaxparetoError("think_time_s", "is the pause between a session's turns, which requests arriving "
                                             "alone (turns_per_session 1) do not have: leave it at 0, or give "
                                             "turns_per_session > 1")
    if layout:
        _check_layout_settings(options, workload, definitions, axes)
    padding = [engine.name for engine in definitions["engine"] if engine.cuda_graph_batch_step > 0]
    if solver.name == "exact" and padding:
        raise JaxparetoError("solver", f"'exact' needs a piecewise-linear R(B), and engines {padding} pad their "
                                       "decode steps to CUDA graphs (cuda_graph_batch_step), which is not; use "
                                       "'damped'")
    if options.disaggregated and padding:
        raise JaxparetoError("engine", f"engines {padding} pad their decode steps to CUDA graphs "
                                       f"(cuda_graph_batch_step), which {options.serving!r} serving does not model; "
                                       "give them cuda_graph_batch_step 0", ("aggregated",))
    extra = dict(attrs or {})
    if calibration is not None and not isinstance(calibration, Mapping):
        extra.setdefault("calibration", str(calibration))
    try:
        json.dumps(extra)
    except TypeError as error:
        raise JaxparetoError("attrs", f"must be JSON-serialisable: {error}") from None
    if percentiles is None:
        percentiles = not options.disaggregated and (options.open_loop or slo is not None or workload.isl_cv > 0
                                                     or workload.osl_cv > 0)
    wanted = set(variables or ()) & set(PERCENTILE_VARIABLES)
    if options.disaggregated and (percentiles or wanted or slo is not None):
        raise JaxparetoError("serving", f"the latency percentiles and goodput are not modelled for {options.serving!r} "
                                        "serving yet (its outputs are the means)", ("aggregated",))
    return SweepPlan(definitions, axes, workload, efficiency, solver, dtype, output_variables(variables, percentiles),
                     chunk_points, extra, options)


def as_plan(*args, **kwargs) -> SweepPlan:
    """A `SweepPlan` given whole (the one positional argument), or `plan_sweep` of the arguments:
    what `sweep`, `sweep_to_zarr` and `pareto_sweep` accept.

    Raises:
        JaxparetoError: as `plan_sweep`; a plan given with other arguments.
    """
    if args and isinstance(args[0], SweepPlan):
        if len(args) > 1 or kwargs:
            raise JaxparetoError("plan", "a SweepPlan is complete: pass no other sweep arguments with it")
        return args[0]
    return plan_sweep(*args, **kwargs)


def _settings(cls, base, settings: Mapping):
    """``base`` (a `cls`) with the flat keywords that name its fields, checked."""
    fields = _SETTINGS[cls]
    given = {name: value for name, value in settings.items()
             if name in fields and not (value is None and fields[name].metadata.get("unset"))}
    for name, value in given.items():  # a flat keyword that means "set" must be > 0 (0 is "unset")
        if fields[name].metadata.get("unset"):
            check_number(name, value, low=0, low_inclusive=False)
    return dataclasses.replace(base, **given).validate()


def _options(options: ModelOptions | None, settings: Mapping, workload: Workload) -> ModelOptions:
    """The checked `ModelOptions`: the object's, with the flat keywords that name its fields.

    Without an options object or a ``cache_model`` keyword, the cache model is "ttl" when a TTL
    is given (keyword or `Workload`), else "given"; an options object says it itself.

    Raises:
        JaxparetoError: naming the field and the allowed values.
    """
    given = {k: v for k, v in settings.items()  # None: chosen below, or a calibration's
             if k in ModelOptions._fields and not (v is None and (k == "cache_model" or k in MODEL_FIELDS))}
    has_ttl = workload.cache_ttl_s > 0
    if "cache_model" not in given and options is None and has_ttl:
        given["cache_model"] = "ttl"
    options = (options or ModelOptions())._replace(**given).validate()
    if has_ttl != (options.cache_model == "ttl"):
        raise JaxparetoError("cache_ttl_s", f"the TTL model needs cache_ttl_s and only it takes one "
                                            f"(cache_model={options.cache_model!r}, cache_ttl_s="
                                            f"{workload.cache_ttl_s if has_ttl else None!r})", CACHE_MODELS)
    return options


def _check_load(options: ModelOptions, values: Mapping) -> None:
    """The load axis must be the load model's: ``concurrency`` for the closed loop,
    ``request_rate`` for Poisson arrivals.

    Raises:
        JaxparetoError: the other load axis given, naming it and what to use instead.
    """
    wrong, right = (LOAD_AXES["closed"], LOAD_AXES["open"]) if options.open_loop else \
        (LOAD_AXES["open"], LOAD_AXES["closed"])
    if values.get(wrong) is not None:
        model = "arrivals='poisson' (the open loop)" if options.open_loop else \
            f"arrivals={options.arrivals!r} (the closed loop)"
        hint = "" if options.open_loop else "; for an open-loop load give arrivals='poisson' with request_rate"
        raise JaxparetoError(wrong, f"is not a load of {model}: its load is {right}{hint}")


def _check_serving_axes(options: ModelOptions, values: Mapping) -> None:
    """The prefill pool's axes need a prefill pool.

    Raises:
        JaxparetoError: one of `DISAGGREGATION_AXES` given under aggregated serving.
    """
    for axis in DISAGGREGATION_AXES:
        if values.get(axis.name) is not None and not options.disaggregated:
            raise JaxparetoError(axis.name, "is an axis of disaggregated serving: give serving='disaggregated' "
                                            "or 'conditional' with it", SERVING_MODES)


def _layout_given(options: ModelOptions, values: Mapping, workload: Workload) -> bool:
    """Whether the grid has the parallel-layout axes: one of `LAYOUT_AXES` is given.

    Raises:
        JaxparetoError: a layout axis under disaggregated serving (its pools are TP groups), or
            ``expert_imbalance`` without the layout axes (one TP group splits every expert).
    """
    given = [axis.name for axis in LAYOUT_AXES if values.get(axis.name) is not None]
    if given and options.disaggregated:
        raise JaxparetoError(given[0], "the parallel-layout axes are modelled for aggregated serving; a "
                                       "disaggregated replica's pools are TP groups", ("aggregated",))
    if not given and workload.expert_imbalance != 1.0:
        raise JaxparetoError("expert_imbalance", "is used with expert parallelism: give the layout axes (ep, and "
                                                 "dp_attention as needed) with it; leave it at 1.0")
    if not given and options.dp_prefill != ModelOptions().dp_prefill:
        raise JaxparetoError("dp_prefill", "is used with attention data parallelism: give dp_attention with it; "
                                           f"leave it at {ModelOptions().dp_prefill!r}")
    return bool(given)


def _check_layout_settings(options: ModelOptions, workload: Workload, definitions: Mapping, axes: Mapping) -> None:
    """Refuse what a layout grid would ignore.

    Raises:
        JaxparetoError: ``expert_imbalance`` without a MoE model and an ``ep`` > 1 (whole experts
            on GPUs), or ``dp_prefill`` without a ``dp_attention`` > 1.
    """
    if workload.expert_imbalance != 1.0 and not (any(m.is_moe for m in definitions["model"])
                                                  and (np.asarray(axes["ep"]) > 1).any()):
        raise JaxparetoError("expert_imbalance", "is the busiest GPU's share of whole experts: it needs a MoE model "
                                                 "and an ep > 1 in the grid; leave it at 1.0")
    if options.dp_prefill != ModelOptions().dp_prefill and not (np.asarray(axes["dp_attention"]) > 1).any():
        raise JaxparetoError("dp_prefill", "is when attention-DP ranks prefill: it needs a dp_attention > 1 in the "
                                           f"grid; leave it at {ModelOptions().dp_prefill!r}")


# Settings that only some equations use: (field, the option that uses it, the values that do).
_USED_BY = (("tier_capacity_gb", "cache_model", ("lru",)), ("tier_bandwidth_gbs", "cache_model", ("lru",)),
            ("prefill_chunk_tokens", "prefill_model", ("shared",)),
            ("pause_distribution", "cache_model", ("ttl", "lru")), ("pause_sigma", "cache_model", ("ttl", "lru")),
            ("turns_per_session", "arrivals", ("poisson",)), ("arrival_cv", "arrivals", ("poisson",)),
            ("kv_link_gbs", "serving", ("disaggregated", "conditional")),
            ("kv_link_latency_us", "serving", ("disaggregated", "conditional")),
            ("local_prefill_tokens", "serving", ("conditional",)))


def _check_used(options: ModelOptions, workload: Workload) -> None:
    """Refuse a setting that the chosen equations would ignore rather than drop it silently: a
    host tier needs the LRU model, a chunk size the shared engine, a pause distribution other
    than the default the TTL or LRU model.

    Raises:
        JaxparetoError: naming the field and the option it needs.
    """
    defaults = {**dataclasses.asdict(Workload()), **ModelOptions()._asdict()}
    values = {**dataclasses.asdict(workload), **options._asdict()}
    for field, needs, wanted in _USED_BY:
        if values[field] != defaults[field] and getattr(options, needs) not in wanted:
            raise JaxparetoError(field, f"is only used with {needs} {' or '.join(map(repr, wanted))}, "
                                        f"not {getattr(options, needs)!r}; leave it at {defaults[field]!r}")


def output_variables(variables, percentiles: bool = True) -> tuple[str, ...]:
    """The outputs to compute, in schema order; ``feasible``, ``infeasible_reason`` and
    ``converged`` always. ``variables`` None: every output, the latency percentiles and
    ``request_goodput`` only with ``percentiles``.

    Raises:
        JaxparetoError: an unknown output, listing the known ones.
    """
    if variables is None:
        return tuple(name for name in OUTPUTS if percentiles or name not in PERCENTILE_VARIABLES)
    if not isinstance(variables, (str, Iterable)):
        raise JaxparetoError("variables", f"expected output names, got {type(variables).__name__}", list(OUTPUTS))
    names = [variables] if isinstance(variables, str) else list(variables)
    for name in names:
        if name not in OUTPUTS:
            raise JaxparetoError("variables", f"unknown output {name!r}", list(OUTPUTS))
    wanted = {*names, "feasible", "infeasible_reason", "converged"}
    return tuple(name for name in OUTPUTS if name in wanted)


def _by_name(field: str, items: Sequence, kind) -> dict:
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise JaxparetoError(field, f"expected a sequence of jaxpareto.{kind.__name__} definitions, "
                                    f"got {type(items).__name__}")
    out = {}
    for item in items:
        if not isinstance(item, kind):
            raise JaxparetoError(field, f"expected jaxpareto.{kind.__name__} definitions, got {type(item).__name__}")
        if item.name in out:
            raise JaxparetoError(field, f"two definitions named {item.name!r}; names must be unique")
        if isinstance(item, Engine):  # a shipped engine's name only on that engine's settings
            resolve_engine(item)
        else:
            check_own_name(field, item)
        out[item.name] = item
    return out


__all__ = ["DTYPES", "FLAT_KEYWORDS", "SOLVERS", "SweepPlan", "as_plan", "output_variables", "plan_sweep"]
