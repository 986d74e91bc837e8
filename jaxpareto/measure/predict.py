"""The model's prediction of each validation row, a pure JAX function of the `Efficiency` factors.

The rows are turned into arrays by `jaxpareto.measure.row_inputs` (the standard-serving special
case of the seed, and how prefill is encoded); this module evaluates them.

Load. Rows are evaluated at what they were measured at:

- ``concurrency``: the row's concurrency C (sessions per TP group).
- ``offline`` (maximum throughput): as many sessions as KV memory admits (``concurrency_max``),
  or the row's concurrency if it gives one.
- ``server`` (a latency logged while serving ``load_tokens_per_s``): Little's-law matching. With
  Z = 0 the model's closed loop serves X(C) = C x OSL / R(C) output tokens/s per TP group, which
  rises with C; the continuous C in [1, concurrency_max] with X(C) = the target is found by
  bisection (`BISECTION_STEPS` halvings) and TTFT / TPOT are evaluated there (C = X R / OSL:
  Little's law with the model's own turn latency R). The target is the same share of the
  model's capacity X(concurrency_max) as the measured load is of the system's measured offline
  throughput (``capacity_tokens_per_s``): a server benchmark runs near its own saturation, and
  its latencies there depend on how close it is, which the absolute load would misplace
  whenever the model's capacity is off (the offline rows score the capacity itself). The
  model's capacity is the server row's own: its layout and settings, which may differ from the
  offline run's (Llama-3.1-405B on B200 serves at TP 4 and ran offline at TP 2 x PP 2; the
  model's capacities of the two differ by 6 %, 10 % for Llama-2-70B on Cisco's H100s); the
  share of the offline throughput then stands for the share of the server layout's capacity.
  Rows without a capacity are matched to the absolute load per group; a load above X at
  concurrency_max (or below X(1)) is flagged unreachable and evaluated at that bound.
- ``static``: ``kv_capacity_tokens`` is concurrency_max at a 1-token context: M_avail / κ r_kv.

Normalisation. A row's system has ``gpus`` GPUs in gpus / (tp x attention_dp x pp) replicas (a
replica: one TP group, or ``attention_dp`` of them sharing the experts, over ``pp`` pipeline
stages; `jaxpareto.physics.layout`).
Whole-system throughput (``output_tokens_per_s_total``) is predicted as the per-GPU output
tokens/s of one replica (`evaluate_point`'s ``output_tokens_per_s_per_gpu``) times ``gpus``; a
server row's load is divided by the number of replicas before matching; concurrencies, latencies
and KV capacity are per replica.

Differentiability. `prediction_fn` returns a pure JAX function of the `Efficiency` pytree
(``jax.vmap`` of `evaluate_point` over the rows, the `Efficiency` passed through unchanged). The
server rows' C is found by bisection on stopped gradients, then corrected by one Newton step
C = C0 - (X(C0) - X*) / (dX/dC) whose slope is held fixed: its value is C0 (to the bisection's
precision) and its derivative is the implicit-function one, dC/dθ = -(∂X/∂θ) / (∂X/∂C), so
``jax.grad`` of a loss of the predictions equals the finite difference of re-solved predictions.
"""


from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.engine import SEED_ENGINE
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.program_memory import release_programs_near_map_limit
from jaxpareto.definitions.settings import Efficiency, Solver, solver_of
from jaxpareto.measure.row_inputs import RowInputs, engine_names, row_inputs
from jaxpareto.measure.validation_set import check_validation_set, load_validation_set
from jaxpareto.mapper import map_points
from jaxpareto.physics.numerics import bisect_bracket
from jaxpareto.physics.point import evaluate_point

#: Halvings of [1, concurrency_max] in the Little's-law matching of server rows.
BISECTION_STEPS = 64


# The one place the rows are evaluated: every prediction of this module goes through `_outputs`.
def _outputs(inputs: RowInputs, efficiency, solver, load, options):
    """`evaluate_point` vmapped over the rows at per-row ``load`` (the concurrency; the request
    rate [1/s] under ``arrivals="poisson"``) and per-row factors ``efficiency`` (an `Efficiency`
    of (rows,) arrays) under the model ``options`` (the exact solver where R(B) is piecewise
    linear, else the damped one)."""

    def one(row, solver):
        point, workload, efficiency = row
        return evaluate_point(point, workload, efficiency, solver, options=options, percentiles=False)

    axis = "request_rate" if options.open_loop else "concurrency"
    pools = dict(prefill_tp=inputs.prefill_tp, prefill_workers=inputs.prefill_workers,
                 decode_workers=inputs.decode_workers) if options.disaggregated else {}
    points = GridPoint(gpu=inputs.hw, model=inputs.model, engine=inputs.engine, tp=inputs.tp,
                       dp_attention=inputs.dp_attention, ep=inputs.ep, pp=inputs.pp, **pools, **{axis: load},
                       think_time_s=inputs.think_time_s, context_tokens=inputs.context_tokens, hit_rate=inputs.hit_rate)
    return map_points(one, (points, inputs.workload, efficiency),
                      (dataclasses.replace(solver, name=options.differentiable_solver),))


def _row_efficiency(inputs: RowInputs, table: Efficiency) -> Efficiency:
    """Each row's factors from a table with a leading engine axis (`Predictor.engines`)."""
    return jax.tree_util.tree_map(lambda column: column[inputs.engine_index], table)


def _group_throughput(out, inputs: RowInputs):
    """Output tokens/s of one replica: per-GPU output x G x D x pp."""
    return out.output_tokens_per_s_per_gpu * inputs.tp * inputs.dp_attention * inputs.pp


def _target(inputs: RowInputs, capacity):
    """A server row's throughput to match per group: its share of the model's ``capacity``, or
    the absolute load where no measured capacity is given."""
    return jnp.where(inputs.load_fraction > 0, inputs.load_fraction * capacity, inputs.target)


def _solve_server(inputs: RowInputs, efficiency, solver, options, steps):
    """Bisection for the server rows' C (no gradients): X(C) = target on [1, concurrency_max]."""
    throughput = functools.partial(_group_throughput, inputs=inputs)
    evaluate = functools.partial(_outputs, inputs, efficiency, solver, options=options)
    ones = jnp.ones_like(inputs.tp)
    first = evaluate(ones)
    cmax = first.concurrency_max.astype(inputs.tp.dtype)
    hi0 = jnp.maximum(cmax, 1.0)
    x_lo, x_hi = throughput(first), throughput(evaluate(hi0))
    target = _target(inputs, x_hi)
    reachable = inputs.server & (x_lo <= target) & (target <= x_hi)

    lo, hi = bisect_bracket(lambda c: throughput(evaluate(c)) < target, ones, hi0, steps)
    bound = jnp.where(target > x_hi, hi0, ones)  # where an unreachable row is evaluated
    c0 = jnp.where(inputs.server, jnp.where(reachable, 0.5 * (lo + hi), bound), ones)
    return c0, reachable, cmax, x_hi


def _predict(inputs: RowInputs, table, solver, *, options, steps):
    """Predictions and diagnostics; a pure function of the per-engine factors ``table``
    (differentiable). Under ``arrivals="poisson"`` the server rows are evaluated in the open loop
    at λ = their load's share of the model's capacity over OSL, the other rows in the closed loop."""
    open_loop, options = options.open_loop, options._replace(arrivals="staggered") if options.open_loop else options
    efficiency = _row_efficiency(inputs, table)
    frozen = jax.lax.stop_gradient(efficiency)
    # the open loop evaluates the server rows at their rate (below), not at a matched C: no halvings
    c0, reachable, cmax, x_max = _solve_server(inputs, frozen, solver, options, 0 if open_loop else steps)

    def x_of(eff, c):
        return _group_throughput(_outputs(inputs, eff, solver, c, options), inputs)

    # the model's capacity serves the server rows only: the others' factors carry no derivative
    # into it, whose evaluation at their KV memory's whole concurrency may not settle (infinite
    # partial derivatives there, which reverse mode's zero cotangent would turn into NaN for every
    # factor)
    held = jax.tree_util.tree_map(lambda e: jnp.where(inputs.server, e, jax.lax.stop_gradient(e)), efficiency)
    capacity = x_of(held, jnp.maximum(cmax, 1.0))
    if open_loop:  # nor a Newton step: the layout's feasibility at one session
        concurrency = jnp.where(inputs.server, jnp.ones_like(c0), inputs.concurrency)
    else:  # Newton step with a held slope: value C0, derivative -(dX/dθ) / (dX/dC) (implicit function)
        _, slope = jax.jvp(functools.partial(x_of, frozen), (c0,), (jnp.ones_like(c0),))
        solved = reachable & (slope > 0)
        slope = jax.lax.stop_gradient(jnp.where(solved, slope, 1.0))
        residual = jnp.where(solved, x_of(efficiency, c0) - _target(inputs, capacity), 0.0)
        c_server = jnp.where(solved, c0 - residual / slope, c0)
        concurrency = jnp.where(inputs.server, c_server, inputs.concurrency)

    out = _outputs(inputs, efficiency, solver, concurrency, options)
    if open_loop:  # MLPerf's server scenario, `vllm bench serve --request-rate`: Poisson arrivals
        rate = _target(inputs, capacity) / inputs.workload.osl
        # the other rows' open-loop outputs are discarded, and their factors (``held``) carry no
        # derivative into them: at the stand-in rate (1 request/s) their queues may be unstable
        # (inf, with infinite partial derivatives), as above
        arrived = _outputs(inputs, held, solver, jnp.where(inputs.server, rate, 1.0),
                           options._replace(arrivals="poisson"))
        reachable = jnp.where(inputs.server, arrived.feasible, reachable)  # unreachable: beyond capacity
        layout_ok = out.feasible
        out = jax.tree_util.tree_map(lambda o, c: jnp.where(inputs.server, o, c), arrived, out)
        out = out._replace(feasible=layout_ok)
        concurrency = jnp.where(inputs.server, arrived.concurrency_eff.astype(concurrency.dtype), concurrency)
    candidates = jnp.stack([
        out.output_tokens_per_s_per_gpu * inputs.gpus,  # whole system: per-GPU output x all GPUs
        out.tpot_ms,
        out.ttft_ms,
        out.concurrency_max.astype(inputs.tp.dtype),
    ])
    prediction = jnp.take_along_axis(candidates, inputs.metric[None, :], axis=0)[0]
    details = {
        "concurrency": concurrency,
        "concurrency_eff": out.concurrency_eff,
        "concurrency_max": cmax,
        "reachable": reachable,
        "max_load_tokens_per_s": x_max * inputs.gpus / (inputs.tp * inputs.dp_attention * inputs.pp),
        "feasible": out.feasible,
        "infeasible_reason": out.infeasible_reason,
    }
    return prediction, details


@functools.cache
def _jitted_predict(options: ModelOptions, steps: int):
    """One jitted `_predict` per static choice, shared by every `Predictor` (no recompiling)."""
    return jax.jit(functools.partial(_predict, options=options, steps=steps))


class Predictor:
    """The model's prediction of each row as a pure JAX function of an `Efficiency`.

    Calling it returns a ``jnp`` array of shape (rows,) in each row's metric and unit: whole-system
    output tokens/s, TPOT/ITL or TTFT in ms, KV capacity in tokens. It is jitted, and
    ``jax.grad`` of any scalar function of it gives gradients for every `Efficiency` field.

    The factors are one `Efficiency` for every row, or a mapping engine name -> `Efficiency`
    covering `engines` (the rows' ``engine`` column; "seed" for rows that name none), each row
    evaluated with its engine's factors (per-engine calibration). Rows whose layout the model
    cannot express (``unsupported``) are predicted NaN.

    For ``dtype="float64"`` call it (and take gradients) inside ``jax.enable_x64(True)``;
    `predict` and `validate` do that themselves; outside it, a call raises `JaxparetoError`.

    Raises:
        JaxparetoError: on construction, as `prediction_fn`.
    """

    def __init__(self, rows: pd.DataFrame, *, solver: Solver = Solver(), dtype: str = "float64",
                 prefill: str | None = None, options: ModelOptions = ModelOptions(),
                 bisection_steps: int = BISECTION_STEPS):
        release_programs_near_map_limit()  # a long-lived process's programs, before it aborts
        self.rows = rows.reset_index(drop=True)
        self.dtype = dtype
        if not isinstance(options, ModelOptions):
            raise JaxparetoError("options", f"expected jaxpareto ModelOptions, got {type(options).__name__}")
        self.options = options
        self.prefill = default_prefill(options) if prefill is None else prefill
        self.engines = engine_names(self.rows)
        unsupported = self.rows["unsupported"] if "unsupported" in self.rows else pd.Series("", index=self.rows.index)
        self.unsupported = unsupported.fillna("").to_numpy(dtype=object)
        # disaggregated runs: evaluated by the disaggregated model (`jaxpareto.physics.disaggregation`),
        # which the closed loop's staggered turns without the LRU model have
        mode = self.rows["mode"] if "mode" in self.rows else pd.Series("agg", index=self.rows.index)
        pooled = np.array(mode.eq("disagg") & (self.unsupported == ""), dtype=bool)
        try:
            disaggregated = options._replace(serving="disaggregated").validate()
        except JaxparetoError:
            self.unsupported = np.where(pooled, "disaggregated prefill/decode: modelled for the closed loop's "
                                                "staggered turns without the LRU model", self.unsupported).astype(object)
            pooled[:] = False
        self.pooled = np.flatnonzero(pooled)
        # runs that pad their decode steps to CUDA graphs: R(B) is not piecewise linear, and
        # `evaluate_point` runs the damped solver for them in place of the exact one
        graphs = self.rows["cuda_graph_batch_step"] if "cuda_graph_batch_step" in self.rows else \
            pd.Series(np.nan, index=self.rows.index)
        self.padded = np.flatnonzero(graphs.notna().to_numpy() & ~pooled & (self.unsupported == ""))
        dt = np.dtype(dtype)
        solver = solver_of(solver).validate()  # its controls; the name is the options' differentiable_solver
        self.solver = dataclasses.replace(
            solver, damping=np.asarray(solver.damping, dt), tol=np.asarray(solver.tol, dt),
            max_iter=np.asarray(solver.max_iter, np.int32))
        # the other rows, one program (no padding in it, so they keep the exact solver where it
        # applies; with no rows at all, `row_inputs` says so)
        own = np.ones(len(self.rows), dtype=bool)
        own[self.pooled] = own[self.padded] = False
        main = np.flatnonzero(own)
        # (row indices, their inputs, their program): each row in one of them
        self._groups = [self._group(indices, group_options, bisection_steps)
                        for indices, group_options in ((main, options.validate()),
                                                       (self.pooled, disaggregated if len(self.pooled) else None),
                                                       (self.padded, options.validate()))
                        if len(indices) or (indices is main and not len(self.rows))]

    def _group(self, indices: np.ndarray, options: ModelOptions, bisection_steps: int):
        """The rows at ``indices`` as a program of their own under ``options``, their engines
        indexed as in `engines`."""
        rows = self.rows.iloc[indices]
        inputs = row_inputs(rows, self.dtype, self.prefill)
        inputs = dataclasses.replace(inputs, engine_index=np.asarray(
            [self.engines.index(name) for name in (rows["engine"].replace("", SEED_ENGINE))], np.int32))
        return indices, inputs, _jitted_predict(options, int(bisection_steps) if rows["load"].eq("server").any()
                                                else 0)

    def evaluate(self, efficiency) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(predictions (rows,), diagnostics of `details`) as JAX arrays: traceable, for losses
        that need to know which rows are scored (``feasible``, ``reachable``)."""
        return self._run(efficiency)

    def factor_table(self, efficiency) -> Efficiency:
        """The factors as an `Efficiency` of (engines,) arrays, in the order of `engines`.

        Raises:
            JaxparetoError: a mapping missing one of the rows' engines.
        """
        if isinstance(efficiency, Efficiency):
            return jax.tree_util.tree_map(lambda x: jnp.full(len(self.engines), x), efficiency)
        if not hasattr(efficiency, "keys"):
            raise JaxparetoError("efficiency", f"expected an Efficiency or engine -> Efficiency, got "
                                               f"{type(efficiency).__name__}")
        missing = [name for name in self.engines if name not in efficiency]
        if missing:
            raise JaxparetoError("efficiency", f"no factors for engines {missing}", sorted(efficiency))
        return jax.tree_util.tree_map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]),
                                      *[efficiency[name] for name in self.engines])

    def _run(self, efficiency):
        dt = np.dtype(self.dtype)
        if jax.dtypes.canonicalize_dtype(dt) != dt:
            raise JaxparetoError("dtype", f"{self.dtype} needs jax.enable_x64(True) around the call and jax.grad")
        table = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype=dt), self.factor_table(efficiency))
        prediction, details = None, {}
        for indices, inputs, jitted in self._groups:  # each program's rows in their places
            own, own_details = jitted(inputs, table, self.solver)
            if prediction is None:
                prediction = jnp.full(len(self.rows), jnp.nan, own.dtype)
                details = {k: jnp.zeros(len(self.rows), v.dtype) for k, v in own_details.items()}
            prediction = prediction.at[indices].set(own)
            details = {k: v.at[indices].set(own_details[k].astype(v.dtype)) for k, v in details.items()}
        supported = jnp.asarray(self.unsupported == "")
        return jnp.where(supported, prediction, jnp.nan), {**details, "supported": supported}

    def __call__(self, efficiency) -> jax.Array:
        """Predictions of every row, shape (rows,), in the rows' units."""
        return self._run(efficiency)[0]

    def details(self, efficiency) -> dict[str, np.ndarray]:
        """Predictions and diagnostics per row as NumPy arrays: ``prediction``, ``concurrency``
        (sessions per group evaluated; server rows: the matched C), ``concurrency_eff``,
        ``concurrency_max``, ``reachable`` (server rows whose load the model can serve),
        ``max_load_tokens_per_s`` (whole-system throughput at concurrency_max), ``feasible`` and
        ``infeasible_reason`` (the sweep's codes, `jaxpareto.definitions.schema`)."""
        prediction, details = self._run(efficiency)
        return {"prediction": np.asarray(prediction), **{k: np.asarray(v) for k, v in details.items()}}


def default_prefill(options: ModelOptions) -> str:
    """How rows are prefilled by default: the whole prompt under the measured profile, the
    seed's ISL within the in-flight context otherwise (`jaxpareto.measure.row_inputs`)."""
    return "prompt" if options.profile == "measured" else "isl"


def validation_rows(rows) -> pd.DataFrame:
    """The rows to predict: a DataFrame of validation rows checked as a file is
    (`jaxpareto.measure.validation_set.check_validation_set`), else the set read from a CSV path
    (None: the shipped set).

    Raises:
        JaxparetoError: ``rows`` is none of these, or its rows are refused as `load_validation_set`
        refuses a file's.
    """
    if rows is None or isinstance(rows, (str, Path)):
        return load_validation_set(rows)
    if not isinstance(rows, pd.DataFrame):
        raise JaxparetoError("rows", "expected a DataFrame from load_validation_set or a CSV path, "
                                     f"got {type(rows).__name__}")
    return check_validation_set(rows)


def prediction_fn(rows=None, *, solver: Solver = Solver(), dtype: str = "float64", prefill: str | None = None,
                  options: ModelOptions = ModelOptions()) -> Predictor:
    """The rows' predictions as a function of `Efficiency` (for calibration by ``jax.grad``).

    Args:
        rows: DataFrame from `jaxpareto.measure.validation_set.load_validation_set`, a CSV path, or None
            for the shipped set.
        solver: closed-loop solver controls. dtype: "float64" (default) or "float32".
        prefill: "isl", "context" or "prompt" (`jaxpareto.measure.row_inputs`); None: the
            options' default (`default_prefill`).
        options: the model's equations (`jaxpareto.definitions.options.ModelOptions`; default the seed's).
            ``ModelOptions(prefill_model="shared")`` makes TTFT at a server load include the wait
            for prefill capacity. The closed loop uses the exact solver where it applies.

    Returns:
        A `Predictor`: ``f(efficiency) -> jnp array (rows,)``.

    Raises:
        JaxparetoError: bad ``rows`` (see `validation_rows`), an unknown ``dtype`` or ``prefill``,
            or a bad ``solver`` or ``options`` field.

    Example::

        f = prediction_fn()
        with jax.enable_x64(True):
            loss = lambda eff: jnp.mean(jnp.log(f(eff) / measured) ** 2)
            grads = jax.grad(loss)(Efficiency())     # an Efficiency of d loss / d field
    """
    return Predictor(validation_rows(rows), solver=solver, dtype=dtype, prefill=prefill, options=options)


def check_efficiency(efficiency):
    """``efficiency`` itself (an `Efficiency`, or engine name -> `Efficiency`), once checked.

    Raises:
        JaxparetoError: not an `Efficiency`, or a field out of its bounds.
    """
    if hasattr(efficiency, "keys") and not isinstance(efficiency, Efficiency):
        for value in efficiency.values():
            check_efficiency(value)
        return efficiency
    if not isinstance(efficiency, Efficiency):
        raise JaxparetoError("efficiency", f"expected a jaxpareto Efficiency, got {type(efficiency).__name__}")
    efficiency.validate()  # raises on a bad value; the object itself is passed on unchanged
    return efficiency


def predict(rows=None, efficiency: Efficiency = Efficiency(), solver: Solver = Solver(), dtype: str = "float64",
            prefill: str | None = None, options: ModelOptions = ModelOptions()) -> np.ndarray:
    """The model's prediction of each row's metric (see the module docstring for how).

    Args:
        rows: DataFrame from `load_validation_set`, a CSV path, or None for the shipped set.
        efficiency: efficiency factors (default the seed's: η_p 0.65, η_d 0.40, overhead 1.10).
        solver, dtype, prefill, options: as in `prediction_fn`.

    Returns:
        float64 NumPy array (rows,) in each row's unit; NaN where the model finds the row
        infeasible (the weights or one session do not fit, or a context beyond the model's
        maximum: `Predictor.details`' ``infeasible_reason``).

    Raises:
        JaxparetoError: as `prediction_fn`, or a bad ``efficiency`` (see `check_efficiency`).
    """
    predictor = prediction_fn(rows, solver=solver, dtype=dtype, prefill=prefill, options=options)
    efficiency = check_efficiency(efficiency)
    with jax.enable_x64(dtype == "float64"):
        return np.asarray(predictor(efficiency), dtype=np.float64)
