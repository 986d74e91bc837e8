"""From standard serving to agent serving (seed 000 eq. 7 and step 9).

A standard-serving curve gives the turn latency R at each batch B (every request active: Z = 0,
so B = C). An agent with the same prefill and context but pauses Z between turns keeps only
ρ = R / (R + Z) of its C sessions on the GPU, so its batch solves B = C R(B) / (R(B) + Z), and
its turn throughput is X = C / (R(B) + Z) = X_serving(B); per task, X / N.

- ``method="fixed_point"`` solves that equation on the standard curve (R(B) interpolated
  linearly in B), so it reproduces the full model wherever the curve samples B finely.
- ``method="seed"`` is eq. 7 as the seed writes it, X ~ X_serving(B = C) x ρ / N with ρ taken at
  B = C: it ignores that pauses shrink the batch, so it under-estimates X (R(C) >= R(B)); the
  gap is the seed approximation's error.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.checks import check_number

METHODS = ("fixed_point", "seed")


def _latency_at(b: np.ndarray, b_row: np.ndarray, r_row: np.ndarray) -> np.ndarray:
    """R(B) from the sampled curve: linear between samples; below the first sample, where pauses
    bring the mean batch under its B, along the first segment, but flat below one session (a
    step runs the request that decodes at least, as the full model's; docs/model.md)."""
    r = np.interp(b, b_row, r_row)
    if len(b_row) > 1:
        slope = (r_row[1] - r_row[0]) / (b_row[1] - b_row[0])
        r = np.where(b < b_row[0], r_row[0] + slope * (np.maximum(b, 1.0) - b_row[0]), r)
    return r


def agent_from_standard(standard: xr.Dataset, think_time_s, *, turns: int = 1,
                        method: str = "fixed_point") -> xr.Dataset:
    """Map a standard-serving sweep (think time 0) to agents pausing ``think_time_s``.

    Args:
        standard: a sweep with ``think_time_s == 0`` only, over ``concurrency`` (the batch of
            standard serving); its ``latency_ms`` and ``concurrency_eff`` give R(B).
        think_time_s: agent pauses Z [s] (a number or a list).
        turns: N, turns per task, for ``tasks_per_s``.
        method: "fixed_point" (default) or "seed" (eq. 7 as written).

    Returns:
        Dataset over the standard's dims with ``think_time_s`` replaced by the agent's:
        ``batch_eff``, ``latency_ms``, ``gpu_active_ratio``, ``turns_per_s``, ``tasks_per_s``.

    Raises:
        JaxparetoError: not a standard-serving sweep, or invalid arguments.
    """
    if method not in METHODS:
        raise JaxparetoError("method", f"unknown {method!r}", METHODS)
    if not isinstance(standard, xr.Dataset) or "concurrency" not in standard.dims:
        raise JaxparetoError("standard", "needs a closed-loop sweep over concurrency (the batch of standard "
                                         "serving); an open-loop sweep's request_rate is no batch")
    if "think_time_s" not in standard.dims or not np.all(standard.think_time_s.values == 0):
        raise JaxparetoError("standard", "needs a standard-serving sweep: think_time_s = 0 only")
    turns = check_number("turns", turns, low=1, integer=True)
    zs = np.atleast_1d(np.asarray(think_time_s, dtype=float))
    for z in zs:
        check_number("think_time_s", float(z), low=0)
    std = standard.isel(think_time_s=0, drop=True)
    other = [d for d in std.latency_ms.dims if d != "concurrency"]
    latency = std.latency_ms.transpose(*other, "concurrency").values.astype(float)
    batch = std.concurrency_eff.transpose(*other, "concurrency").values.astype(float)
    ok = std.feasible.transpose(*other, "concurrency").values & np.isfinite(latency)
    shape = latency.shape
    latency, batch, ok = latency.reshape(-1, shape[-1]), batch.reshape(-1, shape[-1]), ok.reshape(-1, shape[-1])
    out = {name: np.full((latency.shape[0], shape[-1], len(zs)), np.nan)
           for name in ("batch_eff", "latency_ms", "gpu_active_ratio", "turns_per_s")}
    for row in range(latency.shape[0]):
        b_row, r_row = batch[row][ok[row]], latency[row][ok[row]]
        if not len(b_row):
            continue
        b_row, first = np.unique(b_row, return_index=True)  # beyond the memory cap B stops growing
        r_row = r_row[first]
        c = batch[row]  # sessions admitted, as in standard serving
        for k, z in enumerate(zs * 1e3):
            if method == "seed":
                b = c
                r = _latency_at(c, b_row, r_row)
                x = c / r * (r / (r + z))
            else:
                lo, hi = np.zeros_like(c), c.copy()
                for _ in range(60):  # C R(B)/(R(B)+Z) - B decreases through its root
                    mid = 0.5 * (lo + hi)
                    r_mid = _latency_at(mid, b_row, r_row)
                    above = c * r_mid / (r_mid + z) > mid
                    lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
                b = 0.5 * (lo + hi)
                r = _latency_at(b, b_row, r_row)
                x = c / (r + z)
            valid = ok[row]
            out["batch_eff"][row, :, k] = np.where(valid, b, np.nan)
            out["latency_ms"][row, :, k] = np.where(valid, r, np.nan)
            out["gpu_active_ratio"][row, :, k] = np.where(valid, r / (r + z), np.nan)
            out["turns_per_s"][row, :, k] = np.where(valid, x * 1e3, np.nan)
    dims = (*other, "concurrency", "think_time_s")
    coords = {d: std[d] for d in (*other, "concurrency")}
    coords["think_time_s"] = ("think_time_s", zs, {"units": "s", "long_name": "agent pause between turns Z"})
    units = {"batch_eff": "sessions", "latency_ms": "ms", "gpu_active_ratio": "1", "turns_per_s": "turns/s"}
    data = {name: (dims, values.reshape(*shape, len(zs)), {"units": units[name],
                                                           "long_name": f"{name} mapped from standard serving"})
            for name, values in out.items()}
    ds = xr.Dataset(data, coords=coords, attrs={"mapping": method, "turns": turns})
    ds["tasks_per_s"] = (ds.turns_per_s / turns).assign_attrs(units="tasks/s", long_name="X_turn / N (seed eq. 7)")
    return ds
