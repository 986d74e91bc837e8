"""Cost per turn and per task (seed 002 section 13): the API view and the self-hosted view.

API view: a turn sends its whole context as input, of which a share h is read from the prefix
cache (h after the cache model: ``hit_rate_eff`` plus ``tier_hit_rate``): cost = ((1 - h) L x input price + h L x cached-input price + OSL x output price) / 1e6,
prices in USD per million tokens. Self-hosted view: a replica of N GPUs at a price per
GPU-hour serves X turns/s, so a turn costs N x price / 3600 / X (and a task, with tasks/s). N
is every GPU of the replica (TP x pipeline stages x attention-DP ranks, or a disaggregated
replica's prefill and decode pools), read off the dataset's own per-GPU throughput: a turn takes
OSL / (output tokens/s per GPU) GPU-seconds.
"""

from __future__ import annotations

import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.checks import check_number

TOKENS_PER_PRICE_UNIT = 1e6  # prices are per million tokens
#: The variables `add_costs` adds (those its prices and the sweep allow).
COST_VARIABLES = ("api_cost_per_turn_usd", "gpu_cost_per_turn_usd", "api_cost_per_task_usd", "gpu_cost_per_task_usd")
S_PER_HOUR = 3600.0
#: The prices `add_costs` takes.
PRICE_KEYWORDS = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok", "gpu_hour")


def api_cost_usd(input_tokens, cached_tokens, output_tokens, *, input_per_mtok: float, cached_input_per_mtok: float,
                 output_per_mtok: float):
    """Cost of calls [USD]: uncached input, cached input and output tokens at their prices
    [USD per million tokens]. Works on numbers and arrays alike."""
    uncached = input_tokens - cached_tokens
    return (uncached * input_per_mtok + cached_tokens * cached_input_per_mtok
            + output_tokens * output_per_mtok) / TOKENS_PER_PRICE_UNIT


def add_costs(ds: xr.Dataset, *, input_per_mtok: float | None = None, cached_input_per_mtok: float | None = None,
              output_per_mtok: float | None = None, gpu_hour: float | None = None) -> xr.Dataset:
    """A copy of a sweep (or session sweep) with cost variables for the prices given.

    Args:
        ds: from `jaxpareto.sweep` or `jaxpareto.session_sweep`.
        input_per_mtok, cached_input_per_mtok, output_per_mtok: API prices [USD per million
            tokens]; all three, or none (cached defaults to nothing cheaper: pass it).
        gpu_hour: self-hosted price per GPU-hour [USD].

    Returns:
        ``ds`` plus ``api_cost_per_turn_usd`` and/or ``gpu_cost_per_turn_usd``, and for a
        session sweep ``api_cost_per_task_usd`` / ``gpu_cost_per_task_usd``.

    Raises:
        JaxparetoError: a negative or non-finite price, only some API prices, or no price at all.
    """
    api = (input_per_mtok, cached_input_per_mtok, output_per_mtok)
    if any(p is not None for p in api) and not all(p is not None for p in api):
        raise JaxparetoError("prices", "give input_per_mtok, cached_input_per_mtok and output_per_mtok together")
    if gpu_hour is None and input_per_mtok is None:
        raise JaxparetoError("prices", "no price given: give gpu_hour, or input_per_mtok, cached_input_per_mtok "
                                       "and output_per_mtok")
    if not isinstance(ds, xr.Dataset) or "osl" not in ds.attrs:
        raise JaxparetoError("ds", "expected a sweep or session sweep (its attribute osl, the output tokens a turn)")
    session = "turn" in ds.dims
    needed = []
    if gpu_hour is not None:
        needed += ["output_tokens_per_s_per_gpu"] + (["turns_per_s", "tasks_per_s"] if session else [])
    if input_per_mtok is not None and ds.attrs.get("cache_model", "given") != "given":
        needed.append("hit_rate_eff")  # the hit rate after TTL expiry or LRU eviction, not the grid's
    missing = [name for name in needed if name not in ds]
    if missing:
        raise JaxparetoError("ds", f"the prices given need {', '.join(missing)}, which the sweep did not keep "
                                   "(give them in its variables)")
    out = ds.copy()
    osl = float(ds.attrs["osl"])
    if all(p is not None for p in api):
        prices = dict(zip(("input_per_mtok", "cached_input_per_mtok", "output_per_mtok"),
                          (check_number(n, p, low=0) for n, p in zip(("input_per_mtok", "cached_input_per_mtok",
                                                                     "output_per_mtok"), api))))
        context = ds.context_tokens
        # the hit rate after the cache model (TTL expiry, LRU eviction): an expired cache bills
        # the whole prompt as uncached input; a host-tier hit is a cache hit to the API user
        cached = ds.hit_rate_eff + ds.tier_hit_rate if "hit_rate_eff" in ds and "tier_hit_rate" in ds else (
            ds.hit_rate_eff if "hit_rate_eff" in ds else ds.hit_rate)
        per_turn = api_cost_usd(context, cached * context, osl, **prices)
        per_turn = per_turn.broadcast_like(ds.feasible).where(ds.feasible)
        out["api_cost_per_turn_usd"] = per_turn.assign_attrs(
            units="USD", long_name="API cost of a turn: uncached, cached (hit_rate_eff x context) and output tokens")
        if session:
            out["api_cost_per_task_usd"] = per_turn.sum("turn", skipna=False).assign_attrs(
                units="USD", long_name="API cost of a task: the sum over its turns")
    if gpu_hour is not None:
        price = check_number("gpu_hour", gpu_hour, low=0)
        # a turn's GPU-seconds, every GPU of the replica counted (its pipeline stages, attention-DP
        # ranks, prefill pool): OSL output tokens over what one GPU delivers per second
        gpu_seconds = osl / ds.output_tokens_per_s_per_gpu
        out["gpu_cost_per_turn_usd"] = (gpu_seconds * price / S_PER_HOUR).assign_attrs(
            units="USD", long_name="self-hosted cost of a turn: N x price per GPU-hour / turns per hour, N the "
                                   "replica's GPUs")
        if session:  # the replica's GPUs, N = X x OSL / (tokens/s per GPU), the same at every turn
            replica_gpus = (ds.turns_per_s * gpu_seconds).mean("turn", skipna=True)
            out["gpu_cost_per_task_usd"] = (replica_gpus * price / S_PER_HOUR / ds.tasks_per_s).assign_attrs(
                units="USD", long_name="self-hosted cost of a task: N x price per GPU-hour / tasks per hour, N the "
                                       "replica's GPUs")
    out.attrs.update({f"price_{k}": v for k, v in zip(("input_per_mtok", "cached_input_per_mtok", "output_per_mtok",
                                                        "gpu_hour"), (*api, gpu_hour)) if v is not None})
    return out
