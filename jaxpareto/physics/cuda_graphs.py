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
b (1 - b / c), none with every session in its turn). With N a normal of that mean and variance
and Y the largest of D such draws, P(Y <= y) = Phi((y - b) / sigma)^D, and the graph's expected
batch is g E[ceil(Y / g)] = g sum over k >= 0 of P(Y > k g): a smooth, increasing function of
b, which the fixed-point solvers need (the padding itself is a step in N).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

#: Graph sizes summed on either side of the one at the mean batch: beyond them P(Y > k g) is 1
#: (below) or 0 (above) to within the normal's tail at the window's edge, at least 16 g / sigma
#: standard deviations out (for g = 128, a batch's sigma of 2g needs b ~ 65,000).
WINDOW_GRAPHS = 16


def padded_batch(batch: jax.Array, step: jax.Array, ranks: jax.Array | float = 1.0,
                 sessions: jax.Array | float = jnp.inf) -> jax.Array:
    """The expected batch a decode step's CUDA graph runs, >= ``batch`` (module docstring).

    Args:
        batch: b, a rank's mean decode batch [requests], >= 0.
        step: g, the step between the graphs' batch sizes [requests]; 0: no padding (b).
        ranks: D, the attention-DP ranks that replay one graph (1 without attention DP).
        sessions: c, a rank's sessions in the closed loop (the batch is binomial over them); inf
            in the open loop (Poisson).

    Returns:
        g E[ceil(Y / g)] (b where g = 0), scalar. Source: TensorRT-LLM's PyTorch backend
        (``cuda_graph_padding_enabled`` pads a generation step to the smallest captured batch
        size that holds it; with attention DP, to that of the largest rank's batch).
    """
    b = jnp.maximum(batch, 0.0)
    g = jnp.where(step > 0, step, 1.0)  # double where: a table mixing engines gives 0 (none)
    share = jnp.where(jnp.isfinite(sessions), b / jnp.where(jnp.isfinite(sessions), sessions, 1.0), 0.0)
    variance = b * jnp.clip(1.0 - share, 0.0, 1.0)
    spread = variance > 0
    sigma = jnp.sqrt(jnp.where(spread, variance, 1.0))
    first = jnp.floor(b / g) - WINDOW_GRAPHS
    k = first + jnp.arange(2 * WINDOW_GRAPHS + 1, dtype=b.dtype)
    z = (k * g - b) / sigma
    above = jnp.where(spread, -jnp.expm1(ranks * norm.logcdf(z)), (k * g < b).astype(b.dtype))
    graphs = jnp.maximum(first, 0.0) + jnp.sum(jnp.where(k >= 0, above, 0.0))
    return jnp.where(step > 0, jnp.maximum(g * graphs, b), b)


__all__ = ["WINDOW_GRAPHS", "padded_batch"]
