"""Attention work of prefill and decode (the measured profile, or ``attention="flops"``; the seed
counts none).

The seed's eq. 2 and eq. 3c count 2 x P_active FLOPs per token: the matmuls with the weights.
Attention's own FLOPs, the scores QK^T and the weighted values PV, grow with the span a query
attends to: 2 x heads x head_dim FLOPs each per (query, key) pair and layer (Vaswani et al.
2017; `jaxpareto.definitions.model.Model.attention_pair_flops` for GQA and MLA). Prefill is
causal: the i-th of n new tokens after a cached prefix of P tokens attends to P + i keys, so
a turn computes

    pairs(n, P) = n P + n (n + 1) / 2

pairs per full-attention layer; a sliding-window layer caps each query's span at the window w.
At 128K tokens of context the attention of Llama-3.1-70B costs more than its matmuls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _prefix_sum(span: jax.Array, window: jax.Array) -> jax.Array:
    """Σ_{j=1..span} min(j, window): keys attended by the first ``span`` causal queries."""
    capped = jnp.minimum(span, window)
    return capped * (capped + 1.0) / 2.0 + jnp.maximum(span - window, 0.0) * window


def causal_pairs(new_tokens: jax.Array, prefix_tokens: jax.Array) -> jax.Array:
    """(query, key) pairs of ``new_tokens`` queries after a cached prefix, causal, per layer.

    Args:
        new_tokens: n, tokens prefilled [tokens] (>= 0; continuous).
        prefix_tokens: P, tokens already in the KV cache before them [tokens] (>= 0).

    Returns:
        n P + n (n + 1) / 2.
    """
    return new_tokens * prefix_tokens + new_tokens * (new_tokens + 1.0) / 2.0


def window_pairs(new_tokens: jax.Array, prefix_tokens: jax.Array, window: jax.Array) -> jax.Array:
    """The same pairs in a sliding-window layer, each query attending to at most ``window`` keys."""
    total = prefix_tokens + new_tokens
    return _prefix_sum(total, window) - _prefix_sum(prefix_tokens, window)


def decode_pairs(context_tokens: jax.Array, window: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(pairs of a full layer, pairs of a sliding layer) for one decode token over ``context_tokens``."""
    return context_tokens, jnp.minimum(context_tokens, window)
