"""The validation set's rows as arrays: what the prediction of `jaxpareto.measure.predict` evaluates.

Every row of `jaxpareto.measure.validation_set` is evaluated with `jaxpareto.physics.point.evaluate_point` in the
standard-serving special case of the seed (docs/model.md): think time Z = 0, no prefix
cache, a context of ISL + OSL / 2 tokens (the session-average context of a request decoding OSL
tokens after an ISL-token prompt; ISL + OSL (1 + cv²) / 2 where the row's output lengths spread
with coefficient of variation ``osl_cv``, `jaxpareto.physics.memory.in_flight_context`) unless the
row gives ``context_tokens``, and the row's OSL. The row's ``isl_cv`` and ``osl_cv`` (blank: 0)
are the workload's length spreads, its ``arrival_cv`` (blank: 1, Poisson) the open loop's.

Prefill. Under the measured profile (``prefill="prompt"``, its default) the context is the ISL
prompt, prefilled whole (h = 0) with no prefix, and the profile itself lets decode and KV
memory see the mean in-flight context ISL + OSL (1 + cv²) / 2. Under the seed (``prefill="isl"``,
its default) TTFT prefills the ISL prompt tokens while decode and KV memory see that in-flight
context: the point's context L is the prompt, prefilled whole (h = 1 with ΔL = ISL, so eq. 2
prefills min(ΔL, L) = ISL after no prefix), and the in-flight context (or the row's
``context_tokens``) is the workload's ``decode_context_tokens``, which decode and KV memory see.
``prefill="context"`` is the literal special case (h = 0, the whole context L prefilled), which
over-counts prefill by OSL / 2 tokens (9x for ISL/OSL 128/2048).

How each load is evaluated, and what is per TP group or per system, is described in
`jaxpareto.measure.predict`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
import pandas as pd

from jaxpareto.definitions.engine import SEED_ENGINE, EngineParams, resolve_engine
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.settings import DTYPES
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import GEMM_KERNELS, HardwareParams
from jaxpareto.definitions.model import ModelParams
from jaxpareto.definitions.settings import LatencySlo, Workload, numeric_fields
from jaxpareto.mapper import stack_params
from jaxpareto.measure.validation_set import (ARRIVAL_COLUMNS, COLUMNS, IMBALANCE_COLUMNS, SETTING_COLUMNS,
                                              SPREAD_COLUMNS, WORKLOAD_BOUNDS, row_gpu, row_model)
from jaxpareto.physics.memory import in_flight_context

PREFILL = ("isl", "context", "prompt")
#: Concurrency offered to offline rows: above any concurrency_max, so memory sets the batch.
OFFLINE_CONCURRENCY = 1e9
#: metric -> row of the stacked candidate predictions (`jaxpareto.measure.predict`).
METRIC_CODE = {"output_tokens_per_s_total": 0, "tpot_ms": 1, "itl_ms": 1, "ttft_ms": 2, "kv_capacity_tokens": 3}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RowInputs:
    """The rows as arrays (leading axis = rows), what the JAX function closes over.

    Attributes:
        hw, model: per-row GPU and model (`HardwareParams`, `ModelParams` tables).
        engine: per-row serving engine's memory and chunk settings (`EngineParams`; rows with
            no engine: the seed's); its factors are not used (the predictor's `Efficiency` is).
        engine_index: per row, the index of its engine in `engine_names` (rows,).
        tp: GPUs per TP group G (the attention TP of each attention-DP rank). dp_attention: D,
            attention-DP ranks of a replica (1 without attention DP), so a replica has G x D GPUs.
            ep: the expert-parallel degree (``moe_ep``; 1 where blank). pp: pipeline stages (1
            where blank); a replica has G x D x pp GPUs.
        prefill_tp, prefill_workers, decode_workers: a disaggregated run's pools (its ``tp`` the
            decode workers'; other rows: ``tp``, 1 and 1, unused).
        gpus: GPUs of the whole system.
        concurrency: sessions per replica offered (offline rows: `OFFLINE_CONCURRENCY` unless the
            row gives one; server and static rows: 1, unused).
        think_time_s: Z = 0. context_tokens: L [tokens] (the prompt with ``prefill="isl"``). hit_rate: 1 with
            ``prefill="isl"``.
        workload: per-row `Workload` (OSL, ΔL = ISL, the rows' ``isl_cv``, ``osl_cv`` and
            ``expert_imbalance``; other fields at their defaults).
        metric: index into the candidate predictions (`METRIC_CODE`).
        server: the row is matched to ``target``.
        target: a server row's load per replica [output tokens/s] (0 elsewhere).
        load_fraction: a server row's load over its system's measured capacity, matched as that
            share of the model's capacity; 0 where no capacity is given (absolute matching).
    """

    hw: HardwareParams
    model: ModelParams
    engine: EngineParams
    engine_index: np.ndarray
    tp: np.ndarray
    dp_attention: np.ndarray
    ep: np.ndarray
    pp: np.ndarray
    prefill_tp: np.ndarray
    prefill_workers: np.ndarray
    decode_workers: np.ndarray
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


def engine_names(rows: pd.DataFrame) -> tuple[str, ...]:
    """The engines the rows name, sorted ("seed" for rows that name none)."""
    column = rows["engine"] if "engine" in rows else pd.Series("", index=rows.index)
    return tuple(sorted(set(column.replace("", SEED_ENGINE))))


def _workload_column(rows: pd.DataFrame, name: str, blank: float, dtype) -> np.ndarray:
    """A `Workload` column of the rows (a length spread, ``arrival_cv``, ``expert_imbalance``) as
    numbers, ``blank`` where blank or absent.

    Raises:
        JaxparetoError: a value outside the `Workload` field's bounds, naming the row and column
            (rows passed as a DataFrame skip `load_validation_set`'s checks).
    """
    if name not in rows:
        return np.full(len(rows), blank, dtype)
    given = np.asarray(rows[name], dtype=np.float64)
    values = np.where(np.isnan(given), blank, given)  # (nan_to_num would also make inf finite)
    for value in np.unique(values):  # a few distinct values, each checked once, named by its first row
        first = int(np.flatnonzero(values == value)[0])
        row = rows["id"].iloc[first] if "id" in rows else first
        check_number(f"row {row!r}.{name}", float(value), **WORKLOAD_BOUNDS[name])
    return values.astype(dtype)


def _setting(rows: pd.DataFrame, name: str, dtype) -> np.ndarray:
    """A `SETTING_COLUMNS` column as the engine parameter's numbers, NaN where blank or absent
    (``gemm_kernels``: 1 + the index in `GEMM_KERNELS`, as `EngineParams` codes them)."""
    if name not in rows:
        return np.full(len(rows), np.nan, dtype)
    if name == "gemm_kernels":
        return np.asarray([GEMM_KERNELS.index(v) + 1.0 if v else np.nan for v in rows[name].fillna("")], dtype)
    return np.asarray(rows[name], dtype=dtype)


def row_inputs(rows: pd.DataFrame, dtype: str = "float64", prefill: str = "isl") -> RowInputs:
    """Arrays of the rows for the JAX function (see `RowInputs`).

    Args:
        rows: DataFrame from `jaxpareto.measure.validation_set.load_validation_set`.
        dtype: "float64" or "float32".
        prefill: "isl" (TTFT prefills the prompt within the in-flight context), "context" (the
            whole context L) or "prompt" (the context is the prompt, prefilled whole; for the
            measured profile).

    Returns:
        `RowInputs` with a leading axis of rows.

    Raises:
        JaxparetoError: an unknown ``dtype`` or ``prefill``, a missing column, or no rows.
    """
    _check_choice("dtype", dtype, DTYPES)
    _check_choice("prefill", prefill, PREFILL)
    optional = SETTING_COLUMNS + IMBALANCE_COLUMNS + ARRIVAL_COLUMNS
    missing = [c for c in COLUMNS if c not in rows.columns and c not in optional]
    if missing:
        raise JaxparetoError("rows", f"missing columns {missing}", list(COLUMNS))
    if len(rows) == 0:
        raise JaxparetoError("rows", "no rows to predict")
    dt = np.dtype(dtype)
    records = rows.to_dict("records")
    n = len(records)
    num = functools.partial(np.asarray, dtype=dt)
    isl, osl = num(rows["isl"]), num(rows["osl"])
    isl_cv, osl_cv = (_workload_column(rows, name, 0.0, dt) for name in SPREAD_COLUMNS)
    context = num(rows["context_tokens"])
    context = np.where(np.isnan(context), isl if prefill == "prompt" else in_flight_context(isl, osl, osl_cv), context)
    # "isl": the point's context is the prompt (its prefill attends to no prefix), the in-flight
    # context the one decode and KV memory see
    decode_context = np.where(prefill == "isl", context, 0.0).astype(dt)
    context = np.where(prefill == "isl", isl, context)
    load = rows["load"].to_numpy()
    given = num(rows["concurrency"])
    concurrency = np.where(np.isnan(given), np.where(load == "offline", OFFLINE_CONCURRENCY, 1.0), given)
    concurrency = np.where(load == "server", 1.0, concurrency).astype(dt)
    tp, gpus = num(rows["tp"]), num(rows["gpus"])
    ranks = np.nan_to_num(num(rows["attention_dp"]), nan=1.0) if "attention_dp" in rows else np.ones(n, dt)
    server = load == "server"
    stages = np.nan_to_num(num(rows["pp"]), nan=1.0) if "pp" in rows else np.ones(n, dt)
    target = np.where(server, num(rows["load_tokens_per_s"]) / (gpus / (tp * ranks * stages)), 0.0).astype(dt)
    fraction = num(rows["load_tokens_per_s"]) / num(rows["capacity_tokens_per_s"])
    fraction = np.where(server & np.isfinite(fraction), fraction, 0.0).astype(dt)
    defaults = Workload()
    workload = Workload(**{f.name: np.full(n, getattr(defaults, f.name), dtype=dt) for f in numeric_fields(Workload)},
                        slo=LatencySlo(*(np.full(n, limit, dtype=dt) for limit in defaults.slo)))
    # a static row's KV capacity counts sessions of exactly one token of KV, under every profile
    # (the measured profile would otherwise hold its in-flight context per session)
    static_kv = np.where(load == "static", 1.0, 0.0).astype(dt)
    workload = dataclasses.replace(workload, osl=osl, delta_tokens=isl, kv_context_tokens=static_kv,
                                   decode_context_tokens=decode_context,
                                   isl_cv=isl_cv.astype(dt), osl_cv=osl_cv.astype(dt),
                                   arrival_cv=_workload_column(rows, "arrival_cv", 1.0, dt),
                                   expert_imbalance=_workload_column(rows, "expert_imbalance", 1.0, dt))
    names = engine_names(rows)
    row_engines = [r.get("engine") or SEED_ENGINE for r in records]
    factors_off = {name: resolve_engine(name).model_copy(update={"efficiency": {}}).to_params() for name in names}
    engine = stack_params([factors_off[name] for name in row_engines], dt)
    for name in SETTING_COLUMNS:  # the run's own setting where it is published, else its engine's
        given = _setting(rows, name, dt)
        engines_value = getattr(engine, name)  # None: no engine of the rows sets it
        if engines_value is not None or not np.isnan(given).all():
            fallback = 0.0 if engines_value is None else engines_value
            engine = dataclasses.replace(engine, **{name: np.where(np.isnan(given), fallback, given).astype(dt)})
    return RowInputs(
        hw=stack_params([row_gpu(r).to_params() for r in records], dt),
        engine=engine,
        engine_index=np.asarray([names.index(name) for name in row_engines], np.int32),
        model=stack_params([row_model(r).to_params() for r in records], dt),
        tp=tp,
        dp_attention=ranks.astype(dt),
        ep=(np.nan_to_num(num(rows["moe_ep"]), nan=1.0) if "moe_ep" in rows else np.ones(n)).astype(dt),
        pp=stages.astype(dt),
        **{name: np.where(np.isnan(num(rows[name])), default, num(rows[name])).astype(dt) if name in rows
           else np.broadcast_to(default, (n,)).astype(dt)
           for name, default in (("prefill_tp", tp), ("prefill_workers", 1.0), ("decode_workers", 1.0))},
        gpus=gpus,
        concurrency=concurrency,
        think_time_s=np.zeros(n, dt),
        context_tokens=context.astype(dt),
        hit_rate=np.full(n, 1.0 if prefill == "isl" else 0.0, dt),  # "isl": h = 1 with ΔL = ISL
        workload=workload,
        metric=np.asarray([METRIC_CODE[m] for m in rows["metric"]], np.int32),
        server=server,
        target=target,
        load_fraction=fraction,
    )
