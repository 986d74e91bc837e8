"""The sweep a cache comparison draws: standard serving against an agent with and without a prefix cache.

`jaxpareto.plot.plot_cache_comparison` draws three frontiers from one dataset: standard serving
(think time Z = 0, prefix-cache hit rate h = 0), an agent pausing Z > 0 whose prefix cache hits
h > 0, and the same agent without a cache. `cache_comparison_sweep` computes that dataset for one
GPU and model over the usual configuration choices (seed 000 Step 5 and section 4.2).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from jaxpareto.dataset.sweep import sweep
from jaxpareto.definitions.axes import AXIS_BY_NAME, CONCURRENCY_RANGE, TP_CHOICES
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import refuse_open_loop

DEFAULT_TP = TP_CHOICES
# 28 log-spaced whole concurrencies over the searches' default range, 1 to 1,024
DEFAULT_CONCURRENCY = tuple(int(c) for c in np.unique(np.round(np.geomspace(*CONCURRENCY_RANGE, 31))))


def cache_comparison_sweep(
    gpu,
    model,
    *,
    think_time_s: float = 2.0,
    hit_rate: float = 0.9,
    context_tokens=AXIS_BY_NAME["context_tokens"].default,
    tp=DEFAULT_TP,
    concurrency=DEFAULT_CONCURRENCY,
    **sweep_kwargs,
) -> xr.Dataset:
    """A `jaxpareto.sweep` holding the cells a cache comparison draws.

    The sweep's ``think_time_s`` is [0, Z] and its ``hit_rate`` [0, h]: standard serving, the
    agent with its prefix cache and without. The defaults are the seed's code agent (Z = 2 s,
    h = 0.9, a 16,384-token context) over TP 1, 2, 4, 8 and 28 log-spaced concurrencies 1 to
    1,024 (about a second to compute).

    Args:
        gpu: the GPU (catalog name or `jaxpareto.Hardware`), or several.
        model: the model (catalog name or `jaxpareto.Model`), or several.
        think_time_s: the agent's think time Z between turns [s], > 0.
        hit_rate: the agent's prefix-cache hit rate h [fraction of the context], > 0.
        context_tokens: the context per turn [tokens], or several.
        tp: the tensor-parallel degrees [GPUs per replica].
        concurrency: the concurrent sessions [sessions].
        **sweep_kwargs: any other `jaxpareto.sweep` keyword (``osl``,
            ``delta_tokens``...).

    Returns:
        The sweep (`xarray.Dataset`), ready for `jaxpareto.plot.plot_cache_comparison`.

    Raises:
        JaxparetoError: no GPU or model, a Z or h that is not > 0, or anything
            `jaxpareto.sweep` refuses.
    """
    if gpu is None or model is None:
        raise JaxparetoError("gpu/model", "name a GPU and a model for the cache comparison")
    refuse_open_loop(sweep_kwargs, "the cache comparison")
    z, h = float(think_time_s), float(hit_rate)
    for field, value in (("think_time_s", z), ("hit_rate", h)):
        if not value > 0:
            raise JaxparetoError(field, f"the agent's value must be > 0, got {value:g}")
    return sweep(gpu, model, think_time_s=[0.0, z], hit_rate=[0.0, h], context_tokens=context_tokens, tp=tp,
                 concurrency=concurrency, **sweep_kwargs)
