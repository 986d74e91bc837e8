"""Predict the validation set with the model and compare (``jaxpareto validate``).

Every row of `jaxpareto.measure.validation_set` is evaluated with `jaxpareto.physics.point.evaluate_point` in the
standard-serving special case of the seed (SPEC.md section 3): think time Z = 0, no prefix
cache, a context of ISL + OSL / 2 tokens (the session-average context of a request decoding OSL
tokens after an ISL-token prompt) unless the row gives ``context_tokens``, and the row's OSL.

Prefill. By default (``prefill="isl"``) TTFT prefills the ISL prompt tokens while decode and KV
memory see the ISL + OSL / 2 context. `evaluate_point` has one context per point, so this is
passed as h = 1 with ΔL = ISL (eq. 2 then prefills min(ΔL, L) = ISL): it encodes "only the prompt
is prefilled", not a cache. ``prefill="context"`` is the literal special case (h = 0, the whole
context L prefilled), which over-counts prefill by OSL / 2 tokens (9x for ISL/OSL 128/2048).

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
  whenever the model's capacity is off (the offline rows score the capacity itself). Rows
  without a capacity are matched to the absolute load per group; a load above X at
  concurrency_max (or below X(1)) is flagged unreachable and evaluated at that bound.
- ``static``: ``kv_capacity_tokens`` is concurrency_max at a 1-token context: M_avail / κ r_kv.

Normalisation. A row's system has ``gpus`` GPUs in gpus / tp TP groups (replicas). Whole-system
throughput (``output_tokens_per_s_total``) is predicted as the per-GPU output tokens/s of one
group (`evaluate_point`'s ``output_tokens_per_s_per_gpu``) times ``gpus``; a server row's load is
divided by the number of groups before matching; concurrencies, latencies and KV capacity are
per group.

Differentiability. `prediction_fn` returns a pure JAX function of the `Efficiency` pytree
(``jax.vmap`` of `evaluate_point` over the rows, the `Efficiency` passed through unchanged). The
server rows' C is found by bisection on stopped gradients, then corrected by one Newton step
C = C0 - (X(C0) - X*) / (dX/dC) whose slope is held fixed: its value is C0 (to the bisection's
precision) and its derivative is the implicit-function one, dC/dθ = -(∂X/∂θ) / (∂X/∂C), so
``jax.grad`` of a loss of the predictions equals the finite difference of re-solved predictions.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from jaxpareto.measure.calibration_file import calibration_options, load_calibration as read_calibration
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import HardwareParams
from jaxpareto.definitions.model import ModelParams
from jaxpareto.mapper import stack_params
from jaxpareto.search.optimize import solver_for
from jaxpareto.definitions.options import ModelOptions, PREFILL_MODELS
from jaxpareto.physics.point import evaluate_point
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.dataset.sweep import DTYPES
from jaxpareto.measure.validation_set import COLUMNS, load_validation_set, row_gpu, row_model

PREFILL = ("isl", "context")
#: Halvings of [1, concurrency_max] in the Little's-law matching of server rows.
BISECTION_STEPS = 64
#: Concurrency offered to offline rows: above any concurrency_max, so memory sets the batch.
OFFLINE_CONCURRENCY = 1e9
# metric -> row of the stacked candidate predictions
_METRIC_CODE = {"output_tokens_per_s_total": 0, "tpot_ms": 1, "itl_ms": 1, "ttft_ms": 2, "kv_capacity_tokens": 3}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RowInputs:
    """The rows as arrays (leading axis = rows), what the JAX function closes over.

    Attributes:
        hw, model: per-row GPU and model (`HardwareParams`, `ModelParams` tables).
        tp: GPUs per TP group G. gpus: GPUs of the whole system.
        concurrency: sessions per group offered (offline rows: `OFFLINE_CONCURRENCY` unless the
            row gives one; server and static rows: 1, unused).
        think_time_s: Z = 0. context_tokens: L [tokens]. hit_rate: 1 with ``prefill="isl"``.
        workload: per-row `Workload` (OSL, ΔL = ISL; other fields at their defaults).
        metric: index into the candidate predictions (`_METRIC_CODE`).
        server: the row is matched to ``target``.
        target: a server row's load per TP group [output tokens/s] (0 elsewhere).
        load_fraction: a server row's load over its system's measured capacity, matched as that
            share of the model's capacity; 0 where no capacity is given (absolute matching).
    """

    hw: HardwareParams
    model: ModelParams
    tp: np.ndarray
    gpus: np.ndarray
    concurrency: np.ndarray
    think_time_s: np.ndarray
    context_tokens: np.ndarray
    hit_rate: np.ndarray
    workload: Workload
    metric: np.ndarray
    server: np.ndarray
    target: np.ndarray
    load_fraction: np.ndarray


def _check_choice(field: str, value: str, allowed) -> None:
    if value not in allowed:
        raise JaxparetoError(field, f"unknown value {value!r}", allowed)


def row_inputs(rows: pd.DataFrame, dtype: str = "float64", prefill: str = "isl") -> RowInputs:
    """Arrays of the rows for the JAX function (see `RowInputs`)."""
    _check_choice("dtype", dtype, DTYPES)
    _check_choice("prefill", prefill, PREFILL)
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise JaxparetoError("rows", f"missing columns {missing}", list(COLUMNS))
    if len(rows) == 0:
        raise JaxparetoError("rows", "no rows to predict")
    dt = np.dtype(dtype)
    records = rows.to_dict("records")
    n = len(records)
    num = functools.partial(np.asarray, dtype=dt)
    isl, osl = num(rows["isl"]), num(rows["osl"])
    context = num(rows["context_tokens"])
    context = np.where(np.isnan(context), isl + osl / 2.0, context)
    load = rows["load"].to_numpy()
    given = num(rows["concurrency"])
    concurrency = np.where(np.isnan(given), np.where(load == "offline", OFFLINE_CONCURRENCY, 1.0), given)
    concurrency = np.where(load == "server", 1.0, concurrency).astype(dt)
    tp, gpus = num(rows["tp"]), num(rows["gpus"])
    server = load == "server"
    target = np.where(server, num(rows["load_tokens_per_s"]) / (gpus / tp), 0.0).astype(dt)
    fraction = num(rows["load_tokens_per_s"]) / num(rows["capacity_tokens_per_s"])
    fraction = np.where(server & np.isfinite(fraction), fraction, 0.0).astype(dt)
    defaults = Workload()
    workload = Workload(**{f.name: np.full(n, getattr(defaults, f.name), dtype=dt)
                           for f in dataclasses.fields(Workload)})
    workload = dataclasses.replace(workload, osl=osl, delta_tokens=isl, kv_context_tokens=np.zeros(n, dt))
    return RowInputs(
        hw=stack_params([row_gpu(r).to_params() for r in records], dt),
        model=stack_params([row_model(r).to_params() for r in records], dt),
        tp=tp,
        gpus=gpus,
        concurrency=concurrency,
        think_time_s=np.zeros(n, dt),
        context_tokens=context.astype(dt),
        hit_rate=np.full(n, 1.0 if prefill == "isl" else 0.0, dt),
        workload=workload,
        metric=np.asarray([_METRIC_CODE[m] for m in rows["metric"]], np.int32),
        server=server,
        target=target,
        load_fraction=fraction,
    )


def _outputs(inputs: RowInputs, efficiency, solver, concurrency, options):
    """`evaluate_point` vmapped over the rows at per-row ``concurrency`` under the model
    ``options`` (default the seed's equations; the exact closed-loop solver where R(B) is
    piecewise linear, else the damped one)."""

    def one(hw, model, tp, c, z, ctx, h, workload):
        return evaluate_point(hw=hw, model=model, tp=tp, concurrency=c, think_time_s=z, context_tokens=ctx,
                              hit_rate=h, workload=workload, efficiency=efficiency, solver=solver,
                              method=solver_for(options), options=options)

    return jax.vmap(one)(inputs.hw, inputs.model, inputs.tp, concurrency, inputs.think_time_s, inputs.context_tokens,
                         inputs.hit_rate, inputs.workload)


def _group_throughput(out, inputs: RowInputs):
    """Output tokens/s of one TP group: per-GPU output x G."""
    return out.output_tokens_per_s_per_gpu * inputs.tp


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

    def halve(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        below = throughput(evaluate(mid)) < target
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, steps, halve, (ones, hi0))
    bound = jnp.where(target > x_hi, hi0, ones)  # where an unreachable row is evaluated
    c0 = jnp.where(inputs.server, jnp.where(reachable, 0.5 * (lo + hi), bound), ones)
    return c0, reachable, cmax, x_hi


def _predict(inputs: RowInputs, efficiency, solver, *, options, steps):
    """Predictions and diagnostics; a pure function of ``efficiency`` (differentiable)."""
    frozen = jax.lax.stop_gradient(efficiency)
    c0, reachable, cmax, x_max = _solve_server(inputs, frozen, solver, options, steps)

    def x_of(eff, c):
        return _group_throughput(_outputs(inputs, eff, solver, c, options), inputs)

    # Newton step with a held slope: value C0, derivative -(dX/dθ) / (dX/dC) (implicit function).
    _, slope = jax.jvp(functools.partial(x_of, frozen), (c0,), (jnp.ones_like(c0),))
    solved = reachable & (slope > 0)
    slope = jax.lax.stop_gradient(jnp.where(solved, slope, 1.0))
    capacity = x_of(efficiency, jnp.maximum(cmax, 1.0))
    residual = jnp.where(solved, x_of(efficiency, c0) - _target(inputs, capacity), 0.0)
    c_server = jnp.where(solved, c0 - residual / slope, c0)
    concurrency = jnp.where(inputs.server, c_server, inputs.concurrency)

    out = _outputs(inputs, efficiency, solver, concurrency, options)
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
        "max_load_tokens_per_s": x_max * inputs.gpus / inputs.tp,
        "feasible": out.feasible,
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

    For ``dtype="float64"`` call it (and take gradients) inside ``jax.enable_x64(True)``;
    `predict` and `validate` do that themselves.
    """

    def __init__(self, rows: pd.DataFrame, *, solver: Solver = Solver(), dtype: str = "float64",
                 prefill: str = "isl", options: ModelOptions = ModelOptions(),
                 bisection_steps: int = BISECTION_STEPS):
        self.rows = rows.reset_index(drop=True)
        self.dtype = dtype
        self.inputs = row_inputs(self.rows, dtype, prefill)
        dt = np.dtype(dtype)
        solver = solver.validate()
        self.solver = dataclasses.replace(
            solver, damping=np.asarray(solver.damping, dt), tol=np.asarray(solver.tol, dt),
            max_iter=np.asarray(solver.max_iter, np.int32))
        self._jitted = _jitted_predict(options.validate(), int(bisection_steps))

    def evaluate(self, efficiency: Efficiency) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(predictions (rows,), diagnostics of `details`) as JAX arrays: traceable, for losses
        that need to know which rows are scored (``feasible``, ``reachable``)."""
        return self._run(efficiency)

    def _run(self, efficiency: Efficiency):
        dt = np.dtype(self.dtype)
        if jax.dtypes.canonicalize_dtype(dt) != dt:
            raise JaxparetoError("dtype", f"{self.dtype} needs jax.enable_x64(True) around the call and jax.grad")
        efficiency = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype=dt), efficiency)
        return self._jitted(self.inputs, efficiency, self.solver)

    def __call__(self, efficiency: Efficiency) -> jax.Array:
        """Predictions of every row, shape (rows,), in the rows' units."""
        return self._run(efficiency)[0]

    def details(self, efficiency: Efficiency) -> dict[str, np.ndarray]:
        """Predictions and diagnostics per row as NumPy arrays: ``prediction``, ``concurrency``
        (sessions per group evaluated; server rows: the matched C), ``concurrency_eff``,
        ``concurrency_max``, ``reachable`` (server rows whose load the model can serve),
        ``max_load_tokens_per_s`` (whole-system throughput at concurrency_max), ``feasible``."""
        prediction, details = self._run(efficiency)
        return {"prediction": np.asarray(prediction), **{k: np.asarray(v) for k, v in details.items()}}


def _rows(rows) -> pd.DataFrame:
    if rows is None or isinstance(rows, (str, Path)):
        return load_validation_set(rows)
    if not isinstance(rows, pd.DataFrame):
        raise JaxparetoError("rows", "expected a DataFrame from load_validation_set or a CSV path, "
                                     f"got {type(rows).__name__}")
    return rows


def prediction_fn(rows=None, *, solver: Solver = Solver(), dtype: str = "float64", prefill: str = "isl",
                  options: ModelOptions = ModelOptions()) -> Predictor:
    """The rows' predictions as a function of `Efficiency` (for calibration by ``jax.grad``).

    Args:
        rows: DataFrame from `jaxpareto.measure.validation_set.load_validation_set`, a CSV path, or None
            for the shipped set.
        solver: closed-loop solver controls. dtype: "float64" (default) or "float32".
        prefill: "isl" (TTFT prefills the prompt) or "context" (the whole context L).
        options: the model's equations (`jaxpareto.definitions.options.ModelOptions`; default the seed's).
            ``ModelOptions(prefill_model="shared")`` makes TTFT at a server load include the wait
            for prefill capacity. The closed loop uses the exact solver where it applies.

    Returns:
        A `Predictor`: ``f(efficiency) -> jnp array (rows,)``.

    Example::

        f = prediction_fn()
        with jax.enable_x64(True):
            loss = lambda eff: jnp.mean(jnp.log(f(eff) / measured) ** 2)
            grads = jax.grad(loss)(Efficiency())     # an Efficiency of d loss / d field
    """
    return Predictor(_rows(rows), solver=solver, dtype=dtype, prefill=prefill, options=options)


def _check_efficiency(efficiency: Efficiency) -> Efficiency:
    if not isinstance(efficiency, Efficiency):
        raise JaxparetoError("efficiency", f"expected a jaxpareto Efficiency, got {type(efficiency).__name__}")
    efficiency.validate()  # raises on a bad value; the object itself is passed on unchanged
    return efficiency


def predict(rows=None, efficiency: Efficiency = Efficiency(), solver: Solver = Solver(), dtype: str = "float64",
            prefill: str = "isl", options: ModelOptions = ModelOptions()) -> np.ndarray:
    """The model's prediction of each row's metric (see the module docstring for how).

    Args:
        rows: DataFrame from `load_validation_set`, a CSV path, or None for the shipped set.
        efficiency: efficiency factors (default the seed's: η_p 0.65, η_d 0.40, overhead 1.10).
        solver, dtype, prefill, options: as in `prediction_fn`.

    Returns:
        float64 NumPy array (rows,) in each row's unit; NaN where the model finds the row
        infeasible (weights or one session do not fit).
    """
    predictor = prediction_fn(rows, solver=solver, dtype=dtype, prefill=prefill, options=options)
    efficiency = _check_efficiency(efficiency)
    with jax.enable_x64(dtype == "float64"):
        return np.asarray(predictor(efficiency), dtype=np.float64)


def _flags(rows: pd.DataFrame, details: dict) -> list[str]:
    flags = []
    for i, row in rows.iterrows():
        if not details["feasible"][i]:
            flags.append("infeasible: weights or one session do not fit")
        elif row["load"] == "server" and not details["reachable"][i]:
            flags.append(f"unreachable: model serves at most {details['max_load_tokens_per_s'][i]:,.0f} tokens/s")
        elif row["load"] == "concurrency" and row["concurrency"] > details["concurrency_max"][i]:
            flags.append(f"memory caps concurrency at {int(details['concurrency_max'][i])}")
        else:
            flags.append("")
    return flags


def mape_summary(table: pd.DataFrame) -> pd.DataFrame:
    """MAPE per source, per metric and overall of a `validate` table.

    Rows with a flag (unreachable server load, infeasible) or no finite prediction are left out
    of the errors and counted in ``flagged``.

    Returns:
        Columns ``group`` ("source", "metric" or "all"), ``name``, ``rows`` (rows scored),
        ``flagged``, ``mape_pct`` (mean |predicted / measured - 1| x 100), ``median_ape_pct`` and
        ``mean_signed_pct`` (mean signed error x 100: > 0 when the model over-predicts).
    """
    scored = table["flag"].eq("") & np.isfinite(table["rel_error"])
    records = []
    for group, keys in (("source", table["source"]), ("metric", table["metric"]),
                        ("all", pd.Series("all", index=table.index))):
        for name in pd.unique(keys):
            mine = keys.eq(name)
            errors = table.loc[mine & scored, "rel_error"]
            records.append({
                "group": group, "name": name, "rows": int(len(errors)), "flagged": int((mine & ~scored).sum()),
                "mape_pct": float(errors.abs().mean() * 100) if len(errors) else np.nan,
                "median_ape_pct": float(errors.abs().median() * 100) if len(errors) else np.nan,
                "mean_signed_pct": float(errors.mean() * 100) if len(errors) else np.nan,
            })
    return pd.DataFrame(records)


def validate(rows=None, efficiency: Efficiency = Efficiency(), solver: Solver = Solver(), dtype: str = "float64",
             prefill: str = "isl", options: ModelOptions = ModelOptions()) -> pd.DataFrame:
    """Compare the model with every row of the validation set.

    Args: as in `predict`.

    Returns:
        One row per measurement: ``id``, ``source``, ``model``, ``gpu``, ``gpus``, ``tp``,
        ``load``, ``concurrency`` (sessions per TP group evaluated: min(C, concurrency_max);
        server rows: the Little's-law C), ``metric``, ``statistic``, ``unit``, ``measured``, ``predicted``,
        ``rel_error`` ((predicted - measured) / measured, signed) and ``flag``. The MAPE
        summary (`mape_summary`) is in ``.attrs["mape"]``.
    """
    predictor = prediction_fn(rows, solver=solver, dtype=dtype, prefill=prefill, options=options)
    return comparison_table(predictor, efficiency)


def comparison_table(predictor: Predictor, efficiency: Efficiency) -> pd.DataFrame:
    """`validate`'s table for the rows of an existing `Predictor` (no rebuilding of its inputs)."""
    rows = predictor.rows
    efficiency = _check_efficiency(efficiency)
    with jax.enable_x64(predictor.dtype == "float64"):
        details = predictor.details(efficiency)
    table = rows[["id", "source", "model", "gpu", "gpus", "tp", "load"]].copy()
    # sessions per TP group evaluated: the Little's-law C of server rows, else what memory admits
    table["concurrency"] = np.where(rows["load"].eq("server"), details["concurrency"],
                                    details["concurrency_eff"]).astype(np.float64)
    table = table.join(rows[["metric", "statistic", "unit"]])
    table["measured"] = rows["value"].astype(np.float64)
    table["predicted"] = details["prediction"].astype(np.float64)
    table["rel_error"] = table["predicted"] / table["measured"] - 1.0
    table["flag"] = _flags(rows, details)
    table.attrs["mape"] = mape_summary(table)
    return table


def load_calibration(path: str | Path) -> Efficiency:
    """The `Efficiency` of a calibration TOML (`jaxpareto.measure.calibration_file`): its ``[efficiency]``
    values over the seed's defaults.

    Raises:
        JaxparetoError: a missing or non-TOML file, no ``[efficiency]`` table, an unknown field
            (the allowed ones are listed) or a bad value.
    """
    return Efficiency(**read_calibration(path)).validate()


def _cmd_validate(args: argparse.Namespace) -> int:
    efficiency = load_calibration(args.calibration) if args.calibration else Efficiency()
    fitted_with = calibration_options(args.calibration).get("prefill_model") if args.calibration else None
    if args.prefill_model is None:
        args.prefill_model = fitted_with or "isolated"
    elif fitted_with not in (None, args.prefill_model):
        raise JaxparetoError("--prefill-model", f"the calibration's factors were fitted with {fitted_with!r}")
    table = validate(args.data, efficiency=efficiency, dtype=args.dtype, prefill=args.prefill,
                     options=ModelOptions(prefill_model=args.prefill_model))
    summary = table.attrs["mape"]
    shown = table.assign(error_pct=table["rel_error"] * 100)[
        ["id", "metric", "load", "concurrency", "measured", "predicted", "error_pct", "unit", "flag"]]
    print(f"validation set: {args.data or 'shipped jaxpareto/data/validation.csv'} ({len(table)} rows); "
          f"efficiency: {args.calibration or 'seed defaults'} ({efficiency}); prefill: {args.prefill}, "
          f"prefill_model: {args.prefill_model}")
    with pd.option_context("display.width", 250, "display.max_rows", 1000, "display.max_colwidth", 70,
                           "display.float_format", "{:,.4g}".format):
        print(shown.to_string(index=False))
        for group, title in (("source", "MAPE per source"), ("metric", "MAPE per metric"), ("all", "MAPE overall")):
            part = summary[summary["group"].eq(group)].drop(columns="group")
            print(f"\n{title} (%; flagged rows are not scored):")
            print(part.to_string(index=False))
    return 0


def add_validate_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``jaxpareto validate`` on an argparse sub-parser set."""
    p = subparsers.add_parser("validate", help="compare the model with published measurements (MAPE per source "
                                               "and per metric)")
    p.add_argument("--calibration", metavar="FILE.toml",
                   help="efficiencies from the [efficiency] table of a TOML file (default: the seed's)")
    p.add_argument("--data", metavar="FILE.csv", help="validation set (default: the shipped one)")
    p.add_argument("--dtype", choices=DTYPES, default="float64", help="floating point type (default float64)")
    p.add_argument("--prefill", choices=PREFILL, default="isl",
                   help="TTFT prefills the ISL prompt (default) or the whole ISL + OSL/2 context")
    p.add_argument("--prefill-model", choices=PREFILL_MODELS,
                   help="the seed's isolated prefill or the shared chunked-prefill engine (default: the one a "
                        "--calibration file was fitted with, else isolated)")
    p.set_defaults(func=_cmd_validate)
    return p
