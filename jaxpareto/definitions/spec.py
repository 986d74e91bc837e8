"""Sweep specification files (TOML, README, "Sweep specs").

A spec has a ``[grid]`` (every axis as a list, a scalar, or a range table), optional
``[workload]``, ``[efficiency]``, ``[solver]`` and ``[report]`` tables, and optional
``[[hardware]]`` / ``[[model]]`` / ``[[engine]]`` definitions that the grid may name. Unknown keys and wrong
types are errors that name the key and list what is allowed.
"""

from __future__ import annotations

import importlib.resources
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pydantic

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import CACHE_MODELS, SEEN_BATCHES, EXPERT_ROUTINGS, KV_DEMANDS, \
    PAUSE_DISTRIBUTIONS, ARRIVALS, PREFILL_MODELS, PROFILES, SEARCH_METHODS, SERVING_MODES, DP_PREFILLS, GEMM_RATES, ATTENTION, ROOFLINES, \
    ModelOptions
from jaxpareto.definitions.settings import DEFAULT_CHUNK_POINTS, DTYPES, SOLVERS, Efficiency, Solver, Workload, numeric_fields
from jaxpareto.definitions.catalog import gpus, models
from jaxpareto.definitions.engine import Engine, engines
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.model import Model
from jaxpareto.definitions.axes import AXIS_BY_NAME, AXIS_TABLE, CONCURRENCY_RANGE, DISAGGREGATION_AXES, \
    LAYOUT_AXES, LOAD_AXES, REQUEST_RATE, SCENARIO_AXES, TP_CHOICES, axis_table
from jaxpareto.definitions.schema import DEFAULT_X, DEFAULT_Y

DEFAULT_SPEC = "code_agent.toml"


class _Table(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


class AxisRange(_Table):
    """``{ start, stop, num, scale }``: num values from start to stop inclusive."""

    start: float
    stop: float
    num: int = pydantic.Field(ge=1, le=10**7)  # one axis of ten million values, far past any grid
    scale: Literal["linear", "log"] = "linear"

    @pydantic.model_validator(mode="after")
    def _a_range_of_several_values(self) -> "AxisRange":
        if self.scale == "log" and (self.start <= 0 or self.stop <= 0):
            raise ValueError("scale 'log' needs start > 0 and stop > 0")
        if self.num == 1:
            raise ValueError("num = 1 gives start alone; give num >= 2, or a list of one value")
        if self.start == self.stop:
            raise ValueError("start equals stop, one value; give it as a list of one value")
        return self

    def values(self, integer: bool) -> list:
        if self.scale == "log":
            points = np.geomspace(self.start, self.stop, self.num)
        else:
            points = np.linspace(self.start, self.stop, self.num)
        if integer:  # rounded to unique integers (README, "Sweep specs")
            return [int(v) for v in np.unique(np.round(points))]
        # 12 significant digits: 0.30000000000000004 -> 0.3, so values can be selected as typed
        return [float(f"{v:.12g}") for v in points]


Names = str | list[str]
Numbers = float | list[float] | AxisRange


# ``[grid]``: one key per axis of the table. A numeric axis left out takes the axis' default
# (`AXIS_TABLE`); tp and concurrency have none: a sweep needs them, an [optimize] table searches
# its own; a [session] sets the context of every turn. request_rate is the open loop's load, in
# place of concurrency (``arrivals = "poisson"`` in [workload]).
GridSpec = pydantic.create_model("GridSpec", __base__=_Table, **{
    axis.name: ((Names, ...) if axis.default is None else (Names | None, None)) if axis.categorical
    else (Numbers | None, None) for axis in (*AXIS_TABLE, REQUEST_RATE, *LAYOUT_AXES, *DISAGGREGATION_AXES)})


class SessionSpec(_Table):
    """Whole sessions (`jaxpareto.session_sweep`): the context grows turn by turn."""

    initial_context_tokens: int = pydantic.Field(ge=1)
    turns: int = pydantic.Field(ge=1)
    tool_tokens: float = pydantic.Field(ge=0)
    kv_demand: Literal[KV_DEMANDS] = KV_DEMANDS[0]


class PricesSpec(_Table):
    """Prices for `jaxpareto.add_costs` (USD per million tokens, USD per GPU-hour)."""

    input_per_mtok: float | None = pydantic.Field(default=None, ge=0)
    cached_input_per_mtok: float | None = pydantic.Field(default=None, ge=0)
    output_per_mtok: float | None = pydantic.Field(default=None, ge=0)
    gpu_hour: float | None = pydantic.Field(default=None, ge=0)

    @pydantic.model_validator(mode="after")
    def _api_prices_together(self) -> "PricesSpec":
        api = (self.input_per_mtok, self.cached_input_per_mtok, self.output_per_mtok)
        if any(p is not None for p in api) and not all(p is not None for p in api):
            raise ValueError("give input_per_mtok, cached_input_per_mtok and output_per_mtok together")
        return self


class OptimizeSpec(_Table):
    """``jaxpareto optimize``: objective, SLOs and the choices searched per scenario."""

    objective: str = "output_tokens_per_s_per_gpu"
    sense: Literal["max", "min"] | None = None  # None: "min" for a latency or a cost, else "max"
    constraints: dict[str, list[str | float]] = pydantic.Field(default_factory=dict)
    tp: list[int] | None = None
    concurrency: list[int] | None = None
    method: Literal[SEARCH_METHODS] = SEARCH_METHODS[0]

    @pydantic.model_validator(mode="before")
    @classmethod
    def _solver_is_not_a_method(cls, data):
        if isinstance(data, dict) and data.get("method") in SOLVERS:
            raise ValueError(f"[optimize] method is the search ({', '.join(SEARCH_METHODS)}); the fixed-point "
                             f"solver is [solver] name = {data['method']!r}")
        return data

    @pydantic.model_validator(mode="after")
    def _shapes(self) -> "OptimizeSpec":
        for name, spec in self.constraints.items():
            if len(spec) != 2 or spec[0] not in ("<=", ">=") or isinstance(spec[1], str):
                raise ValueError(f"constraints.{name}: expected [\"<=\" or \">=\", limit], got {spec}")
        if self.concurrency is not None and len(self.concurrency) != 2:
            raise ValueError(f"concurrency: expected [lo, hi], got {self.concurrency}")
        return self


def _table_of(name: str, doc: str, settings_cls, extra: dict) -> type[_Table]:
    """A spec table whose keys are a settings class' fields (with the defaults of their flat
    keywords, declared once on the class) plus ``extra`` ({key: (type, default)})."""
    fields = {}
    for f in numeric_fields(settings_cls):
        kind = int if f.metadata["bounds"]["integer"] else float
        fields[f.name] = (kind | None, None) if f.metadata["unset"] else (kind, f.default)
    return pydantic.create_model(name, __base__=_Table, __doc__=doc, **fields, **extra)


_OPTION_KEYS = {"expert_routing": (Literal[EXPERT_ROUTINGS], ModelOptions().expert_routing),
                "seen_batch": (Literal[SEEN_BATCHES], ModelOptions().seen_batch),
                "pause_distribution": (Literal[PAUSE_DISTRIBUTIONS], ModelOptions().pause_distribution),
                # None: a calibration's, else ModelOptions' default (as gemm_rate and cache_model)
                "prefill_model": (Literal[PREFILL_MODELS] | None, None),
                "profile": (Literal[PROFILES] | None, None),
                "arrivals": (Literal[ARRIVALS], ModelOptions().arrivals),
                "serving": (Literal[SERVING_MODES], ModelOptions().serving),
                "dp_prefill": (Literal[DP_PREFILLS], ModelOptions().dp_prefill),
                "gemm_rate": (Literal[GEMM_RATES] | None, None),  # None: a calibration's, else peak
                "attention": (Literal[ATTENTION] | None, None),  # None: a calibration's, else profile
                "roofline": (Literal[ROOFLINES] | None, None),  # None: a calibration's, else step
                "cache_model": (Literal[CACHE_MODELS] | None, None)}
WorkloadSpec = _table_of("WorkloadSpec", "``[workload]``: `Workload` fields and the model options.", Workload,
                         _OPTION_KEYS)
EfficiencySpec = _table_of("EfficiencySpec", "``[efficiency]``: `Efficiency` fields and a calibration file.",
                           Efficiency, {"calibration": (str | None, None)})
_SolverTable = _table_of("_SolverTable", "``[solver]``: the fixed-point solver, its controls and the dtype.",
                         Solver, {"name": (Literal[SOLVERS], Solver().name), "dtype": (Literal[DTYPES], "float32")})


class SolverSpec(_SolverTable):
    @pydantic.model_validator(mode="before")
    @classmethod
    def _renamed(cls, data):
        if isinstance(data, dict) and "method" in data:
            raise ValueError("[solver] method is renamed: the fixed-point solver is [solver] name (damped, exact, newton)")
        return data


class OutputSpec(_Table):
    """What is kept: output variables (default all) and points per compute block / zarr chunk."""

    variables: list[str] | None = pydantic.Field(default=None, min_length=1)  # None: all
    chunk_points: int = pydantic.Field(default=DEFAULT_CHUNK_POINTS, ge=1)
    percentiles: bool | None = None  # the latency percentiles and goodput (default: plan_sweep's rule)


class ReportSpec(_Table):
    """What the CLI prints: the frontier of one headline cell of the grid.

    ``minimize`` names the objectives (x and/or y) to minimise rather than maximise; a latency
    (``*_ms``), a task time (``task_time_s``) or a cost (``*_usd``) is minimised whether named or not.
    """

    x: str = DEFAULT_X
    y: str = DEFAULT_Y
    # default: tp and the load (concurrency, or request_rate); an empty list is refused, not defaulted
    dims: list[str] | None = pydantic.Field(default=None, min_length=1)
    minimize: list[str] = pydantic.Field(default_factory=list)
    headline: dict[str, str | int | float] = pydantic.Field(default_factory=dict)


class SweepSpec(_Table):
    """A whole spec file."""

    description: str = ""
    grid: GridSpec
    workload: WorkloadSpec = WorkloadSpec()
    efficiency: EfficiencySpec = EfficiencySpec()
    solver: SolverSpec = SolverSpec()
    report: ReportSpec = ReportSpec()
    output: OutputSpec = OutputSpec()
    optimize: OptimizeSpec | None = None
    session: SessionSpec | None = None
    prices: PricesSpec | None = None
    slo: dict[str, float] = pydantic.Field(default_factory=dict)
    hardware: list[Hardware] = pydantic.Field(default_factory=list)
    model: list[Model] = pydantic.Field(default_factory=list)
    engine: list[Engine] = pydantic.Field(default_factory=list)

    @pydantic.field_validator("hardware", "model", "engine")
    @classmethod
    def _definitions_do_not_shadow_the_catalog(cls, defined: list, info: pydantic.ValidationInfo) -> list:
        # a definition named like a catalog entry would replace it silently, under its name
        catalog = {"hardware": gpus, "model": models, "engine": engines}[info.field_name]()
        for item in defined:
            if item.name in catalog:
                raise ValueError(f"[[{info.field_name}]] {item.name!r} is the catalog's name for one; give the "
                                 f"definition a name of its own (e.g. {item.name + '-custom'!r})")
        return defined

    def _axis_values(self, axis: str):
        """The axis' values as given, a range expanded, or the axis' default (None: none)."""
        value = getattr(self.grid, axis)
        if value is None:
            return AXIS_BY_NAME[axis].default
        if isinstance(value, AxisRange):
            value = value.values(integer=AXIS_BY_NAME[axis].integer)
        if not AXIS_BY_NAME[axis].categorical:  # checked here, the error names the spec's field
            try:
                AXIS_BY_NAME[axis].numbers(value)
            except JaxparetoError as error:
                raise JaxparetoError(f"grid.{axis}", error.problem, error.allowed) from None
        return value

    def optimize_kwargs(self) -> dict:
        """Keyword arguments of `jaxpareto.optimize` for this spec's [optimize] table.

        Raises:
            JaxparetoError: the spec has no [optimize] table.
        """
        if self.optimize is None:
            raise JaxparetoError("optimize", "the spec has no [optimize] table (objective, constraints, tp, concurrency)")
        opt = self.optimize
        # a replica's layout and a disaggregated one's pools are a sweep's axes, not a search's
        for axes, kind in ((LAYOUT_AXES, "a layout axis of"), (DISAGGREGATION_AXES, "an axis of disaggregated")):
            for axis in axes:
                if getattr(self.grid, axis.name) is not None:
                    raise JaxparetoError(f"grid.{axis.name}", f"is {kind} sweeps; [optimize] searches TP and "
                                                              "concurrency per scenario (a GPU budget's layouts: "
                                                              "jaxpareto optimize --gpu-budget)")
        tp = opt.tp
        if tp is None:
            tp = self._axis_values("tp") if self.grid.tp is not None else list(TP_CHOICES)
        concurrency = opt.concurrency
        if concurrency is None:
            grid_c = self._axis_values("concurrency") if self.grid.concurrency is not None else list(CONCURRENCY_RANGE)
            grid_c = grid_c if isinstance(grid_c, list) else [grid_c]
            concurrency = (int(min(grid_c)), int(max(grid_c)))
        scenario = {axis: self._axis_values(axis) for axis in SCENARIO_AXES}
        scenario = {k: v if isinstance(v, list) else [v] for k, v in scenario.items()}  # always a Dataset
        return {
            **scenario, **self._settings(),  "hardware": self.hardware, "models": self.model, "engines": self.engine,
            "objective": opt.objective, "sense": opt.sense,
            "constraints": {k: tuple(v) for k, v in opt.constraints.items()}, "tp": tp,
            "concurrency": tuple(concurrency), "method": opt.method,
        }

    def _settings(self) -> dict:
        """The [workload], [efficiency] and [solver] tables as the sweep's keywords."""
        solver = self.solver.model_dump()
        name = solver.pop("name")
        return {**self.workload.model_dump(), **self.efficiency.model_dump(), **solver, "solver": name}

    def session_kwargs(self) -> dict:
        """Keyword arguments of `jaxpareto.session_sweep` for this spec's [session] table."""
        if self.session is None:
            raise JaxparetoError("session", "the spec has no [session] table")
        if self.grid.context_tokens is not None:
            raise JaxparetoError("grid.context_tokens", "a [session] sets the context of every turn; remove it")
        kwargs = self.sweep_kwargs(axes=[a for a in self.grid_axes() if a != "context_tokens"])
        kwargs.pop("delta_tokens")
        if kwargs.pop("kv_context_tokens") is not None:
            raise JaxparetoError("workload.kv_context_tokens", "a [session] sets the KV demand (see session.kv_demand)")
        kwargs.update(self.session.model_dump())
        return kwargs

    def grid_axes(self) -> list[str]:
        """The axes of this spec's sweep: the axis table of its load model and serving, with the
        layout axes where the grid gives one of them."""
        layout = any(getattr(self.grid, a.name) is not None for a in LAYOUT_AXES)
        return [a.name for a in axis_table(self.workload.arrivals == "poisson", self.workload.serving != "aggregated",
                                           layout)]

    def sweep_kwargs(self, axes: Sequence[str] | None = None) -> dict:
        """Keyword arguments of `jaxpareto.sweep` for this spec (``axes``: default the grid's
        for the spec's load model; the other load axis, given, is passed on to be refused)."""
        open_loop = self.workload.arrivals == "poisson"
        if axes is None:  # the layout axes where the grid gives one
            axes = self.grid_axes()
        other = LOAD_AXES["closed" if open_loop else "open"]
        # given where they do not belong, the other load and the prefill pool's axes are refused
        grid = {name: self._axis_values(name) for name in (other, *(a.name for a in DISAGGREGATION_AXES))
                if name not in axes and getattr(self.grid, name) is not None}
        layout_names = {a.name for a in LAYOUT_AXES}
        for axis in axes:
            if axis in layout_names and getattr(self.grid, axis) is None:  # its default; errors name what is given
                continue
            grid[axis] = self._axis_values(axis)
            if grid[axis] is None and axis == LOAD_AXES["open" if open_loop else "closed"] and other in grid:
                del grid[axis]  # the other loop's load given: the sweep's refusal names both and the fix
            elif grid[axis] is None:
                searched = (f"; this spec's [optimize] table searches {axis} instead: `jaxpareto optimize SPEC`"
                            if self.optimize is not None and axis in ("tp", "concurrency") else "")
                raise JaxparetoError(f"grid.{axis}", "is required for a sweep" + searched)
        return {
            **grid,
            **self._settings(),
            **self.output.model_dump(),
            "slo": self.slo or None,
            "hardware": self.hardware,
            "models": self.model,
            "engines": self.engine,
        }


_UNION_TAGS = ("AxisRange", "list[float]", "list[str]", "float", "str", "int", "list[int]")
_AXIS_HINT = {axis.name: "a name or a list of names" if axis.categorical
              else "a number, a list of numbers, or a range table {start, stop, num, scale}"
              for axis in (*AXIS_TABLE, REQUEST_RATE, *LAYOUT_AXES, *DISAGGREGATION_AXES)}


def _is_tag(part: str) -> bool:
    """A pydantic union branch or validator tag (``list[float]``, ``function-after[..., AxisRange]``),
    not a key of the spec."""
    return part in _UNION_TAGS or ("[" in part and part.endswith("]"))


def _describe(error: pydantic.ValidationError, source: str) -> JaxparetoError:
    """One readable error naming every offending key, with the allowed keys for typos."""
    lines, specific = [], set()
    items = error.errors()
    for item in items:  # an axis given as a range table whose own check failed says only that
        parts = [str(p) for p in item["loc"]]
        tag = next((k for k, p in enumerate(parts) if k >= 2 and "AxisRange" in p), None)
        if parts[0] == "grid" and tag is not None and (isinstance(item.get("input"), dict) or tag < len(parts) - 1):
            specific.add(parts[1])
    for item in items:
        parts = [str(p) for p in item["loc"]]
        msg = item["msg"].removeprefix("Value error, ")
        if len(parts) >= 2 and parts[0] == "grid" and parts[1] in _AXIS_HINT and item["type"] != "extra_forbidden":
            # the union of scalar / list / range produces one error per alternative: say it once
            inner = [p for p in parts[2:] if not _is_tag(p)]
            if parts[1] in specific and not any("AxisRange" in p for p in parts[2:]):
                continue
            if (not inner or inner[0].isdigit()) and parts[1] not in specific:
                lines.append(f"grid.{parts[1]}: expected {_AXIS_HINT[parts[1]]}")
                continue
            parts = ["grid", parts[1], *inner]
        if item["type"] == "extra_forbidden":
            parent = _table_for(item["loc"][:-1])
            if parent is not None:
                msg += f" (allowed keys: {', '.join(parent.model_fields)})"
            if tuple(parts) == ("fit",):  # `jaxpareto calibrate`'s output, given as a spec
                msg += "; a [fit] table is a calibration file's: give it as --calibration FILE (calibration= in Python)"
        loc = ".".join(p for p in parts if not _is_tag(p))
        lines.append(f"{loc or '(top level)'}: {msg}")
    return JaxparetoError(source, "invalid sweep spec:\n  " + "\n  ".join(dict.fromkeys(lines)))


def _table_for(loc: tuple) -> type[pydantic.BaseModel] | None:
    table: type[pydantic.BaseModel] = SweepSpec
    for part in loc:
        if isinstance(part, int) or part == "AxisRange":
            if part == "AxisRange":
                table = AxisRange
            continue
        field = table.model_fields.get(str(part))
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        candidates = [a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
        if not candidates:
            return None
        table = candidates[0]
    return table


def parse_spec(data: dict, source: str = "spec") -> SweepSpec:
    """Validate a parsed TOML document.

    Raises:
        JaxparetoError: unknown keys (with the allowed ones), wrong types, bad values.
    """
    try:
        return SweepSpec.model_validate(data)
    except pydantic.ValidationError as error:
        raise _describe(error, source) from None
    except ValueError as error:
        raise JaxparetoError(source, str(error)) from None


def presets() -> dict[str, str]:
    """The shipped presets (package data ``jaxpareto/data/presets/*.toml``): name ->
    the preset's one-line description."""
    folder = importlib.resources.files("jaxpareto").joinpath("data/presets")
    out = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            out[entry.name.removesuffix(".toml")] = tomllib.loads(entry.read_text()).get("description", "")
    return out


def load_spec(path: str | Path | None = None) -> SweepSpec:
    """Read a spec file, or a preset by name; with no path, the built-in default (the seed's
    code agent).

    Raises:
        JaxparetoError: missing file (the message lists the presets), TOML syntax error, or an
            invalid spec.
    """
    if path is None:
        text = importlib.resources.files("jaxpareto").joinpath(f"data/{DEFAULT_SPEC}").read_text()
        source = f"(built-in {DEFAULT_SPEC})"
    elif not Path(path).is_file() and str(path) in presets():
        text = importlib.resources.files("jaxpareto").joinpath(f"data/presets/{path}.toml").read_text()
        source = f"(preset {path})"
    else:
        path = Path(path)
        if not path.is_file():
            raise JaxparetoError("spec", f"no such file or preset: {path}", presets())
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError:
            raise JaxparetoError("spec", f"{path} is not a UTF-8 text (TOML) file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise JaxparetoError(source, f"TOML syntax error: {error}") from None
    spec = parse_spec(data, source)
    calibration = spec.efficiency.calibration
    if calibration is not None and isinstance(path, Path) and not Path(calibration).is_absolute() \
            and (path.parent / calibration).exists():
        # a calibration file named in a spec is found next to the spec, wherever it is run from
        # (a name that is no file there is a shipped calibration's, `shipped_calibrations`)
        spec = spec.model_copy(update={"efficiency": spec.efficiency.model_copy(
            update={"calibration": str(path.parent / calibration)})})
    return spec
