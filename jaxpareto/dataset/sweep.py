"""`sweep`: the model over a grid, as an xarray Dataset (SPEC.md sections 4 and 5)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence

import jax
import numpy as np
import xarray as xr

from jaxpareto.definitions.axes import grid_axes
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.mapper import DEFAULT_CHUNK_POINTS, GridProblem
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.physics.intensity import ridge_point
from jaxpareto.definitions.model import Model
from jaxpareto.definitions.schema import AXES, AXIS_INFO, DECODE_BOUND_FLAGS, OUTPUTS
from jaxpareto.measure.calibration_file import calibration_options, load_calibration
from jaxpareto.definitions.options import CACHE_MODELS, ModelOptions
from jaxpareto.physics.point import METHODS
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.definitions.checks import check_number

DTYPES = ("float32", "float64")


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: definitions, axis values, scalars and options, ready to run."""

    gpus: list[Hardware]
    models: list[Model]
    axes: dict[str, np.ndarray]
    workload: Workload
    efficiency: Efficiency
    solver: Solver
    dtype: str
    method: str
    variables: tuple[str, ...]
    chunk_points: int
    kv_context_tokens: float | None
    extra_attrs: dict = dataclasses.field(default_factory=dict)
    options: ModelOptions = ModelOptions()

    @property
    def expert_routing(self) -> str:
        return self.options.expert_routing

    def problem(self, outputs: Sequence[str] | None = None, whole_axes: Sequence[int] = ()) -> GridProblem:
        return GridProblem(
            [g.to_params() for g in self.gpus], [m.to_params() for m in self.models], self.axes,
            self.workload, self.efficiency, self.solver, dtype=self.dtype, method=self.method,
            outputs=self.variables if outputs is None else tuple(outputs), chunk_points=self.chunk_points,
            whole_axes=whole_axes, options=self.options,
        )

    @property
    def coords(self) -> dict[str, Sequence]:
        return {"gpu": [g.name for g in self.gpus], "model": [m.name for m in self.models], **self.axes}

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.gpus), len(self.models), *(len(self.axes[a]) for a in AXES[2:]))

    def attrs(self) -> dict:
        """Provenance attributes (SPEC.md section 4), JSON-serialisable."""
        from jaxpareto.definitions.version import __version__

        return {
            "title": "jaxpareto agent-serving sweep",
            "jaxpareto_version": __version__,
            "jax_version": jax.__version__,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "model_equations": "seed 000 section 3 eqs. 1-5 as fixed by SPEC.md section 3",
            "dtype": self.dtype,
            "solver": self.method,
            **self.options._asdict(),
            "cache_ttl_s": float(self.workload.cache_ttl_s) if self.options.cache_model == "ttl" else "none (no expiry)",
            "pause_sigma": float(self.workload.pause_sigma),
            "prefill_chunk_tokens": float(self.workload.prefill_chunk_tokens),
            "tier_capacity_gb": float(self.workload.tier_capacity_gb),
            "tier_bandwidth_gbs": float(self.workload.tier_bandwidth_gbs),
            "osl": float(self.workload.osl),
            "delta_tokens": float(self.workload.delta_tokens),
            "kv_context_tokens": "per point (context_tokens)" if self.kv_context_tokens is None
            else float(self.kv_context_tokens),
            **{name: float(getattr(self.efficiency, name)) for name in self.efficiency.__dataclass_fields__},
            "damping": float(self.solver.damping),
            "tol": float(self.solver.tol),
            "max_iter": int(self.solver.max_iter),
            "hardware": json.dumps([g.to_dict() for g in self.gpus]),
            "models": json.dumps([m.to_dict() for m in self.models]),
            **self.extra_attrs,
        }


def plan_sweep(
    gpu, model, tp, concurrency, think_time_s=0.0, context_tokens=16384, hit_rate=0.0, *,
    osl=128, delta_tokens=2128, kv_context_tokens=None, eta_prefill=0.65, eta_decode=0.40,
    elementwise_overhead=1.10, damping=0.4, tol=1e-6, max_iter=10_000, dtype="float32", method="damped",
    variables=None, chunk_points=DEFAULT_CHUNK_POINTS, hardware=(), models=(), attrs=None, expert_routing="seed",
    cache_ttl_s=None, pause_distribution="exponential", pause_sigma=1.0, prefill_model="isolated", cache_model=None,
    prefill_chunk_tokens=8192, tier_capacity_gb=0.0, tier_bandwidth_gbs=0.0, decode_overhead_ms=0.0,
    ttft_overhead_ms=0.0, allreduce_scale=0.0, allreduce_latency_us=0.0, calibration=None,
) -> SweepPlan:
    """Validate every input of `sweep` (same arguments) without computing anything.

    Raises:
        JaxparetoError: naming the field and the allowed values.
    """
    if dtype not in DTYPES:
        raise JaxparetoError("dtype", f"unknown dtype {dtype!r}", DTYPES)
    if method not in METHODS:
        raise JaxparetoError("method", f"unknown solver {method!r}", METHODS)
    if calibration is not None:
        fitted_with = calibration_options(calibration).get("prefill_model")
        if fitted_with is not None and prefill_model not in ("isolated", fitted_with):
            raise JaxparetoError("prefill_model", f"the calibration's factors were fitted with {fitted_with!r}; "
                                                  f"they do not transfer to {prefill_model!r}")
        prefill_model = fitted_with or prefill_model  # adopt the model the factors were fitted with
    options = model_options(expert_routing, prefill_model, cache_model, pause_distribution, cache_ttl_s,
                            tier_capacity_gb, tier_bandwidth_gbs, prefill_chunk_tokens, pause_sigma)
    if method == "exact" and not options.piecewise_linear:
        raise JaxparetoError("method", "'exact' needs a piecewise-linear R(B): expert_routing='seed', "
                                       "prefill_model='isolated' and cache_model 'given' or 'ttl'; use 'damped'")
    if kv_context_tokens is not None:
        kv_context_tokens = check_number("kv_context_tokens", kv_context_tokens, low=0, low_inclusive=False)
    if cache_ttl_s is not None:
        cache_ttl_s = check_number("cache_ttl_s", cache_ttl_s, low=0, low_inclusive=False)
    workload = Workload(osl=osl, delta_tokens=delta_tokens,
                        kv_context_tokens=0.0 if kv_context_tokens is None else kv_context_tokens,
                        cache_ttl_s=0.0 if cache_ttl_s is None else cache_ttl_s, pause_sigma=pause_sigma,
                        prefill_chunk_tokens=prefill_chunk_tokens, tier_capacity_gb=tier_capacity_gb,
                        tier_bandwidth_gbs=tier_bandwidth_gbs).validate()
    efficiency = Efficiency(eta_prefill, eta_decode, elementwise_overhead, decode_overhead_ms, ttft_overhead_ms,
                            allreduce_scale, allreduce_latency_us)
    if calibration is not None:
        efficiency = dataclasses.replace(efficiency, **load_calibration(calibration))
    efficiency = efficiency.validate()
    solver = Solver(damping, tol, max_iter).validate()
    chunk_points = check_number("chunk_points", chunk_points, low=1, integer=True)
    gpus, model_defs, axes = grid_axes(
        gpu, model, tp, concurrency, think_time_s, context_tokens, hit_rate,
        custom_gpus=_by_name("hardware", hardware, Hardware), custom_models=_by_name("models", models, Model),
    )
    extra = dict(attrs or {})
    if calibration is not None and not isinstance(calibration, Mapping):
        extra.setdefault("calibration", str(calibration))
    try:
        json.dumps(extra)
    except TypeError as error:
        raise JaxparetoError("attrs", f"must be JSON-serialisable: {error}") from None
    return SweepPlan(gpus, model_defs, axes, workload, efficiency, solver, dtype, method,
                     _variables(variables), chunk_points, kv_context_tokens, extra, options)


def model_options(expert_routing="seed", prefill_model="isolated", cache_model=None,
                  pause_distribution="exponential", cache_ttl_s=None, tier_capacity_gb=0.0, tier_bandwidth_gbs=0.0,
                  prefill_chunk_tokens=8192, pause_sigma=1.0) -> ModelOptions:
    """The checked `ModelOptions` of the sweep-level arguments.

    ``cache_model`` None means "ttl" when a TTL is given, else "given". A setting that the chosen
    equations would ignore is refused rather than silently dropped: a TTL needs the TTL model, a
    host tier the LRU model, a chunk size the shared engine, a pause distribution other than the
    default the TTL or LRU model.

    Raises:
        JaxparetoError: naming the field and the allowed values.
    """
    if cache_model is None:
        cache_model = "ttl" if cache_ttl_s is not None else "given"
    options = ModelOptions(expert_routing, prefill_model, cache_model, pause_distribution).validate()
    if (cache_ttl_s is not None) != (cache_model == "ttl"):
        raise JaxparetoError("cache_ttl_s", f"the TTL model needs cache_ttl_s and only it takes one "
                                            f"(cache_model={cache_model!r}, cache_ttl_s={cache_ttl_s!r})", CACHE_MODELS)
    for field, value, default, needs, wanted in (
            ("tier_capacity_gb", tier_capacity_gb, 0.0, "cache_model", ("lru",)),
            ("tier_bandwidth_gbs", tier_bandwidth_gbs, 0.0, "cache_model", ("lru",)),
            ("prefill_chunk_tokens", prefill_chunk_tokens, 8192, "prefill_model", ("shared",)),
            ("pause_distribution", pause_distribution, "exponential", "cache_model", ("ttl", "lru")),
            ("pause_sigma", pause_sigma, 1.0, "cache_model", ("ttl", "lru"))):
        if value != default and getattr(options, needs) not in wanted:
            raise JaxparetoError(field, f"is only used with {needs} {' or '.join(map(repr, wanted))}, "
                                        f"not {getattr(options, needs)!r}; leave it at {default!r}")
    return options


def _variables(variables) -> tuple[str, ...]:
    """The outputs to compute, in schema order; ``feasible`` and ``converged`` always."""
    if variables is None:
        return tuple(OUTPUTS)
    names = [variables] if isinstance(variables, str) else list(variables)
    for name in names:
        if name not in OUTPUTS:
            raise JaxparetoError("variables", f"unknown output {name!r}", list(OUTPUTS))
    wanted = {*names, "feasible", "converged"}
    return tuple(name for name in OUTPUTS if name in wanted)


def sweep(
    gpu: str | Hardware | Sequence[str | Hardware],
    model: str | Model | Sequence[str | Model],
    tp: int | Sequence[int],
    concurrency: int | Sequence[int],
    think_time_s: float | Sequence[float] = 0.0,
    context_tokens: int | Sequence[int] = 16384,
    hit_rate: float | Sequence[float] = 0.0,
    *,
    osl: float = 128,
    delta_tokens: float = 2128,
    kv_context_tokens: float | None = None,
    eta_prefill: float = 0.65,
    eta_decode: float = 0.40,
    elementwise_overhead: float = 1.10,
    damping: float = 0.4,
    tol: float = 1e-6,
    max_iter: int = 10_000,
    dtype: str = "float32",
    method: str = "damped",
    variables: Sequence[str] | None = None,
    chunk_points: int = DEFAULT_CHUNK_POINTS,
    hardware: Sequence[Hardware] = (),
    models: Sequence[Model] = (),
    attrs: dict | None = None,
    expert_routing: str = "seed",
    cache_ttl_s: float | None = None,
    pause_distribution: str = "exponential",
    pause_sigma: float = 1.0,
    prefill_model: str = "isolated",
    cache_model: str | None = None,
    prefill_chunk_tokens: float = 8192,
    tier_capacity_gb: float = 0.0,
    tier_bandwidth_gbs: float = 0.0,
    decode_overhead_ms: float = 0.0,
    ttft_overhead_ms: float = 0.0,
    allreduce_scale: float = 0.0,
    allreduce_latency_us: float = 0.0,
    calibration=None,
) -> xr.Dataset:
    """Evaluate the agent-serving model over the grid of all axis combinations, in memory.

    Every axis may be a scalar or a sequence; the Dataset's dimensions are always the seven
    axes ``gpu, model, tp, concurrency, think_time_s, context_tokens, hit_rate``. For grids
    too large for memory use `jaxpareto.sweep_to_zarr`, which takes the same arguments.

    Args:
        gpu: catalog names (`jaxpareto.definitions.catalog.gpus`), names from ``hardware``, or
            `Hardware` definitions.
        model: catalog names, names from ``models``, or `Model` definitions.
        tp: tensor-parallel degrees G (integers >= 1).
        concurrency: concurrent sessions C (integers >= 1).
        think_time_s: pauses between turns Z [s] (>= 0).
        context_tokens: context length of the turn L [tokens] (integers >= 1).
        hit_rate: prefix-cache hit rates h in [0, 1].
        osl: output tokens per turn (> 0).
        delta_tokens: tokens prefilled on a cache hit ΔL (>= 0); the seed's code agent: 2128.
        kv_context_tokens: context L̄ held in KV per session; None: each point's L.
        eta_prefill, eta_decode, elementwise_overhead: efficiency factors (seed defaults).
        damping, tol, max_iter: controls of the damped fixed-point iteration.
        dtype: "float32" (default, fast) or "float64".
        method: closed-loop solver: "damped" (default: the seed's iteration, which the SPEC
            makes the reference) or "exact" (closed form per linear piece of R(B); agrees with
            damped to 1e-5 where it converged, iterations reported as 0).
        variables: outputs to compute and keep (default all; ``feasible`` and ``converged``
            are always kept).
        chunk_points: points per compiled block (memory/compile-size trade-off).
        hardware, models: custom definitions that the name lists may refer to.
        attrs: extra JSON-serialisable dataset attributes (e.g. the spec that produced it).
        expert_routing: distinct routed experts per decode step of a MoE model: "seed"
            (min(B K, E), default) or "uniform" (E (1 - (1 - K/E)^B), the expectation under
            uniform routing; damped solver only).
        cache_ttl_s: prefix-cache retention [s] for ``cache_model="ttl"`` (`jaxpareto.physics.cache`):
            the grid's hit rate is scaled by P(Z < TTL). Giving it implies ``cache_model="ttl"``.
        pause_distribution: pauses around their mean ``think_time_s`` for the TTL and LRU
            models: "exponential" (default), "deterministic" or "lognormal" (log-spread
            ``pause_sigma``).
        prefill_model: "isolated" (seed eq. 2, default) or "shared": prefill and decode share
            the GPU in a chunked-prefill engine, so TTFT includes the wait for prefill capacity
            and GPU time is conserved (`jaxpareto.physics.engine`; damped solver only).
        cache_model: where the hit rate comes from (`jaxpareto.physics.cache`): "given" (the grid's h,
            default), "ttl" (default when ``cache_ttl_s`` is given) or "lru": every session is
            admitted, the KV memory active sessions leave free caches paused ones under LRU
            (Che approximation, solved jointly with the batch; damped solver only), and sessions
            memory cannot hold active wait (``memory_wait_ms``).
        prefill_chunk_tokens: prefill tokens per engine step for ``prefill_model="shared"``
            (vLLM's max_num_batched_tokens; default 8,192).
        tier_capacity_gb: host-memory KV tier per TP group [GB] for ``cache_model="lru"``
            (0: none). A GPU miss found there loads the context's KV instead of prefilling it,
            whichever is faster.
        tier_bandwidth_gbs: the tier's link per GPU, one way [GB/s] (PCIe 5.0 x16 about 64).
        decode_overhead_ms, ttft_overhead_ms, allreduce_scale, allreduce_latency_us: opt-in
            terms outside the seed's roofline, all 0 by default (`jaxpareto.definitions.settings.Efficiency`,
            `jaxpareto.physics.communication`).
        calibration: a calibration TOML path (``jaxpareto calibrate``), or a mapping, whose
            ``[efficiency]`` values replace the efficiency arguments they name; its ``[model]``
            table's ``prefill_model`` (the model the factors were fitted with) is adopted, and
            asking for another prefill model is an error.

    Returns:
        `xarray.Dataset` with the variables of `jaxpareto.definitions.schema.OUTPUTS` (each with
        ``units`` and ``long_name``) over the seven axes, and provenance attributes.

    Raises:
        JaxparetoError: any invalid input, naming the field and the allowed values; raised
            before anything is compiled.
    """
    plan = plan_sweep(**locals())
    return with_ridge_points(build_dataset(plan.coords, plan.problem().run(), plan.attrs()), plan)


def with_ridge_points(ds: xr.Dataset, plan: SweepPlan) -> xr.Dataset:
    """Add each (GPU, model)'s ridge point as a coordinate, to read against operational_intensity."""
    ridge = np.asarray([[ridge_point(g, m) for m in plan.models] for g in plan.gpus])
    return ds.assign_coords(ridge_point=(("gpu", "model"), ridge, {
        "units": "FLOP/byte", "long_name": "ridge point: peak FLOPS at the model's precision / bandwidth"}))


def _by_name(field: str, items: Sequence, kind) -> dict:
    out = {}
    for item in items:
        if not isinstance(item, kind):
            raise JaxparetoError(field, f"expected jaxpareto.{kind.__name__} definitions, got {type(item).__name__}")
        if item.name in out:
            raise JaxparetoError(field, f"two definitions named {item.name!r}; names must be unique")
        out[item.name] = item
    return out


def build_dataset(coords: Mapping[str, Sequence], results: Mapping[str, np.ndarray], attrs: Mapping) -> xr.Dataset:
    """Assemble the Dataset of SPEC.md section 4 from axis values and full-grid arrays."""
    coord_vars = {}
    for name in AXES:
        values = np.asarray(coords[name]) if name not in ("gpu", "model") else np.asarray(coords[name], dtype=str)
        info = AXIS_INFO[name]
        coord_vars[name] = xr.Variable(name, values, {"units": info.units, "long_name": info.long_name})
    data_vars = {}
    for name, info in OUTPUTS.items():
        if name not in results:
            continue
        var_attrs = {"units": info.units, "long_name": info.long_name}
        if name == "decode_bound":
            var_attrs.update(DECODE_BOUND_FLAGS)
        data_vars[name] = xr.Variable(AXES, results[name], var_attrs)
    return xr.Dataset(data_vars, coords=coord_vars, attrs=dict(attrs))
