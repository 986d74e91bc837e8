"""The batch a decode step pads to when an engine replays CUDA graphs of fixed batch sizes
(docs/model.md, "CUDA-graph padding").

An engine that captured CUDA graphs at batch sizes g, 2g, 3g, ... and pads a decode step to the
next of them (TensorRT-LLM's ``cuda_graph_config`` with ``enable_padding``: its PyTorch
backend's ``cuda_graph_batch_sizes`` and ``cuda_graph_padding_enabled``) runs a step of N
requests as ceil(N / g) g: the padded requests cost their matmuls, not their KV reads or
attention. Under attention data parallelism the D ranks replay the same graph, that of the
largest rank's batch (TensorRT-LLM gathers every rank's batch size before it picks the graph).

The batch of a rank varies from step to step around its mean b: requests arrive and leave
independently in the open loop (an M/G/inf population, Poisson: variance b), and each of the
rank's c sessions is in its turn with probability b / c in the closed loop (binomial: variance
b (1 - b / c)). With N a normal of that mean and variance (at least `MIN_VARIANCE`) and Y the
largest of D such draws, P(Y <= y) = Phi((y + 1/2 - b) / sigma)^D for a whole number y (the
continuity correction of a count), and the graph's expected batch is
g E[ceil(Y / g)] = g sum over k >= 0 of P(Y > k g), with:

- no term at or beyond the rank's most requests (its sessions, KV slots and request limit):
  the batch never passes them, so neither does its graph;
- one graph at least: a step that runs has one request, and its graph g of them.

It is a smooth, increasing function of b, which the fixed-point solvers need (the padding
itself is a step in N).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri
from jax.scipy.stats import norm

#: Graph sizes summed on either side of the one at the largest rank's expected batch (Blom's
#: b + sigma Phi^-1((D - 0.375) / (D + 0.25))): beyond them P(Y > k g) is 1 (below) or 0 (above)
#: to within the normal's tail, at least 32 g / sigma standard deviations out (6 of them for
#: sigma up to 5 g: b ~ 400,000 for g = 128, b ~ 1,600 for g = 8, where a padding of under g / 2
#: is 0.3 % of the batch).
WINDOW_GRAPHS = 32
#: The batch's least variance [requests^2], as a count's rounding has: where the closed loop's
#: binomial has none (every session in its turn) the graph stays that of b to within a request.
MIN_VARIANCE = 0.25


def padded_batch(batch: jax.Array, step: jax.Array, ranks: jax.Array | float = 1.0,
                 sessions: jax.Array | float = jnp.inf, most: jax.Array | float = jnp.inf) -> jax.Array:
    """The expected batch a decode step's CUDA graph runs, >= ``batch`` (module docstring).

    Args:
        batch: b, a rank's mean decode batch [requests], >= 0.
        step: g, the step between the graphs' batch sizes [requests]; 0: no padding (b).
        ranks: D, the attention-DP ranks that replay one graph (1 without attention DP).
        sessions: c, a rank's sessions in the closed loop (the batch is binomial over them); inf
            in the open loop (Poisson).
        most: the most requests a rank runs at once (its KV slots and request limit) [requests];
            with ``sessions``, the batch's upper end.

    Returns:
        g E[ceil(Y / g)] (b where g = 0), scalar. Source: TensorRT-LLM's PyTorch backend
        (``cuda_graph_padding_enabled`` pads a generation step to the smallest captured batch
        size that holds it; with attention DP, to that of the largest rank's batch).
    """
    b = jnp.maximum(batch, 0.0)
    g = jnp.where(step > 0, step, 1.0)  # double where: a table mixing engines gives 0 (none)
    share = jnp.where(jnp.isfinite(sessions), b / jnp.where(jnp.isfinite(sessions), sessions, 1.0), 0.0)
    sigma = jnp.sqrt(jnp.maximum(b * jnp.clip(1.0 - share, 0.0, 1.0), MIN_VARIANCE))
    top = jnp.minimum(sessions, most)  # no graph beyond the batch's upper end
    largest = b + sigma * ndtri((ranks - 0.375) / (ranks + 0.25))  # Blom: the largest of D draws
    first = jnp.floor(largest / g) - WINDOW_GRAPHS
    k = first + jnp.arange(2 * WINDOW_GRAPHS + 1, dtype=b.dtype)
    above = -jnp.expm1(ranks * norm.logcdf((k * g + 0.5 - b) / sigma))  # whole requests: N > k g is N >= k g + 1
    below_top = jnp.where(k >= 0, (k * g < top).astype(b.dtype), 0.0)
    graphs = jnp.clip(first, 0.0, jnp.ceil(top / g)) + jnp.sum(above * below_top)
    return jnp.where(step > 0, jnp.maximum(g * jnp.maximum(graphs, 1.0), b), batch)


__all__ = ["MIN_VARIANCE", "WINDOW_GRAPHS", "padded_batch"]
