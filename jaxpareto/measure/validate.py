"""Compare the model with the validation set: the per-row table and its MAPE (``jaxpareto validate``).

The predictions come from `jaxpareto.measure.predict` (how each row is evaluated is described
there). A row the model cannot score honestly is flagged, not scored: infeasible (weights or one
session do not fit), a server load beyond what the model serves, or a concurrency memory caps.
"""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd

from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.schema import INFEASIBLE_REASON_LABELS
from jaxpareto.definitions.settings import Efficiency, Solver
from jaxpareto.measure.predict import Predictor, check_efficiency, prediction_fn


def _flags(rows: pd.DataFrame, details: dict, capped: bool = True, open_loop: bool = False) -> list[str]:
    flags = []
    for i, row in rows.iterrows():
        reason = row.get("unsupported", "")
        if reason:
            flags.append(f"unsupported: {reason}")
        elif not details["feasible"][i]:  # the model's reason: the weights, one session's KV, the context...
            reason = INFEASIBLE_REASON_LABELS[int(details["infeasible_reason"][i])]
            flags.append("infeasible: " + reason.replace("_", " "))
        elif row["load"] == "server" and not details["reachable"][i]:
            # a share of the measured capacity (or the load itself) past the model's, or, in the
            # closed loop's matching, below what one session per replica serves (its least load)
            capacity = row.get("capacity_tokens_per_s", np.nan)
            reference = capacity if np.isfinite(capacity) else details["max_load_tokens_per_s"][i]
            if open_loop or row["load_tokens_per_s"] >= reference:
                flags.append(f"unreachable: model serves at most {details['max_load_tokens_per_s'][i]:,.0f} tokens/s")
            else:
                flags.append("unreachable: below what one session per replica serves")
        elif capped and row["load"] == "concurrency" and row["concurrency"] > details["concurrency_max"][i]:
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
             prefill: str | None = None, options: ModelOptions = ModelOptions()) -> pd.DataFrame:
    """Compare the model with every row of the validation set.

    Args:
        rows: DataFrame from `load_validation_set`, a CSV path, or None for the shipped set.
        efficiency: efficiency factors (default the seed's).
        solver: closed-loop solver controls. dtype: "float64" (default) or "float32".
        prefill: how rows are prefilled (`jaxpareto.measure.predict.prediction_fn`).
        options: the model's equations (default the seed's).

    Returns:
        One row per measurement: ``id``, ``source``, ``model``, ``gpu``, ``gpus``, ``tp``,
        ``load``, ``concurrency`` (sessions per TP group evaluated: min(C, concurrency_max);
        server rows: the Little's-law C), ``metric``, ``statistic``, ``unit``, ``measured``, ``predicted``,
        ``rel_error`` ((predicted - measured) / measured, signed) and ``flag``. The MAPE
        summary (`mape_summary`) is in ``.attrs["mape"]``.

    Raises:
        JaxparetoError: as `jaxpareto.measure.predict.predict`.
    """
    predictor = prediction_fn(rows, solver=solver, dtype=dtype, prefill=prefill, options=options)
    return comparison_table(predictor, efficiency)


def comparison_table(predictor: Predictor, efficiency: Efficiency) -> pd.DataFrame:
    """`validate`'s table for the rows of an existing `Predictor` (no rebuilding of its inputs).

    Raises:
        JaxparetoError: a bad ``efficiency`` (see `jaxpareto.measure.predict.check_efficiency`).
    """
    rows = predictor.rows
    efficiency = check_efficiency(efficiency)
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
    table["flag"] = _flags(rows, details, predictor.options.memory_caps_concurrency, predictor.options.open_loop)
    table.attrs["mape"] = mape_summary(table)
    return table


def prediction_rows(rows: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Every input row with its prediction: the rows' own columns, then ``predicted`` (NaN where
    the model cannot predict the row), ``error_pct`` ((predicted / measured - 1) x 100) and
    ``reason`` (why a row is not predicted or not scored; "" for a scored row), for
    ``jaxpareto validate --out``.

    Args:
        rows: the validation rows (`jaxpareto.measure.validation_set.load_validation_set`).
        table: `validate`'s table of those rows.
    """
    out = rows.reset_index(drop=True).drop(columns=["unsupported"], errors="ignore").copy()
    out["predicted"] = table["predicted"].to_numpy()
    out["error_pct"] = table["rel_error"].to_numpy() * 100.0
    flag = table["flag"].to_numpy(dtype=object)
    missing = ~np.isfinite(out["predicted"].to_numpy(dtype=float))
    out["reason"] = np.where(missing & (flag == ""), "no finite prediction (the closed loop did not converge)", flag)
    return out
