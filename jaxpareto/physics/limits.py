"""Limits a real server enforces, and why a point is infeasible.

- **Heads must split over TP** (vLLM, SGLang and TensorRT-LLM shard attention by heads): the
  query heads divide by G, and the KV heads either divide by G or G by them (then each KV head
  is copied, r_kv = G / n_kv; `jaxpareto.physics.memory`). A linear-attention or Mamba state
  splits by its heads, which G must divide. TP 3 on 64 heads, or TP 64 on 32, is no server's
  layout.
- **The context fits the model**: the turn's context plus its output stays within the model's
  maximum (``max_position_embeddings`` or its RoPE extension; engines refuse a request whose
  prompt plus ``max_tokens`` exceeds ``max_model_len``).

Each failing point is infeasible, with the first reason in the order of `REASONS`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpareto.definitions.model import ModelParams

#: Reason codes of the ``infeasible_reason`` output (CF flag values), in the order checked.
FEASIBLE, HEADS_DO_NOT_SPLIT, CONTEXT_TOO_LONG, WEIGHTS_EXCEED_MEMORY, NO_SESSION_FITS = 0, 1, 2, 3, 4
# ... and, set after the solve, an open-loop load the server cannot sustain (`jaxpareto.physics.queueing`)
LOAD_BEYOND_CAPACITY = 5
# ... and a disaggregated replica's prefill worker that cannot hold the weights and one turn's KV
# (`jaxpareto.physics.disaggregated_point`; codes 3 and 4 are then its decode workers')
PREFILL_WORKER_TOO_SMALL = 6
# ... and a parallel layout that does not split the model: an expert-parallel degree that divides
# neither the replica's GPUs nor the experts, or more pipeline stages than layers
# (`jaxpareto.physics.layout.layout_splits`), checked after the heads
LAYOUT_DOES_NOT_SPLIT = 7
# ... and a replica whose GPUs do not divide the sweep's GPU budget into whole replicas
REPLICA_DOES_NOT_DIVIDE_BUDGET = 8
REASONS = {FEASIBLE: "feasible", HEADS_DO_NOT_SPLIT: "tp_does_not_split_heads",
           CONTEXT_TOO_LONG: "context_beyond_model_maximum", WEIGHTS_EXCEED_MEMORY: "weights_exceed_memory",
           NO_SESSION_FITS: "no_session_fits_kv_memory", LOAD_BEYOND_CAPACITY: "load_beyond_capacity",
           PREFILL_WORKER_TOO_SMALL: "prefill_worker_cannot_hold_a_turn",
           LAYOUT_DOES_NOT_SPLIT: "layout_does_not_split_model",
           REPLICA_DOES_NOT_DIVIDE_BUDGET: "replica_does_not_divide_budget"}


def _divides(divisor: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.mod(value, divisor) == 0


def heads_split(model: ModelParams, tp: jax.Array) -> jax.Array:
    """Whether TP G shards this model's attention: heads % G == 0 (unknown heads: not checked),
    n_kv % G == 0 or G % n_kv == 0, and a recurrent state's heads % G == 0."""
    query = jnp.isnan(model.attention_heads) | _divides(tp, model.attention_heads)
    kv = (_divides(tp, model.kv_heads) | _divides(model.kv_heads, tp)) & \
        (_divides(tp, model.kv_window_heads) | _divides(model.kv_window_heads, tp))
    state = (model.fixed_state_bytes == 0) | _divides(tp, model.state_heads)
    return query & kv & state


def context_fits(model: ModelParams, turn_tokens: jax.Array) -> jax.Array:
    """Whether a turn of ``turn_tokens`` (context + output) is within the model's maximum."""
    return turn_tokens <= model.max_context_tokens


def infeasible_reason(heads_ok: jax.Array, context_ok: jax.Array, weights_fit: jax.Array,
                      session_fits: jax.Array) -> jax.Array:
    """The first failing check's code (`REASONS`), FEASIBLE when all pass (int8 scalar)."""
    reason = jnp.where(session_fits, FEASIBLE, NO_SESSION_FITS)
    reason = jnp.where(weights_fit, reason, WEIGHTS_EXCEED_MEMORY)
    reason = jnp.where(context_ok, reason, CONTEXT_TOO_LONG)
    return jnp.where(heads_ok, reason, HEADS_DO_NOT_SPLIT).astype(jnp.int8)
