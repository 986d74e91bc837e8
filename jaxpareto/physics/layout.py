"""Parallel layouts beyond one tensor-parallel group: attention data parallelism and expert
parallelism (docs/model.md, "Parallel layouts").

A replica of ``dp_attention`` = D attention ranks, each a tensor-parallel group of G = ``tp``
GPUs, runs on N = G x D GPUs (SGLang's ``--tp 8 --dp 8 --enable-dp-attention`` is G = 1, D = 8;
TensorRT-LLM's ``enable_attention_dp``). Each rank holds its own sessions and their KV cache,
split over its G GPUs by heads (an MLA latent, one head, is copied on each of them, not on all N).
The non-expert weights are copied on every rank; the routed experts are spread over all N GPUs,
by expert parallelism (``ep`` ranks of whole experts) or by splitting each expert (MoE TP,
N / ``ep`` ways): either way each GPU holds and reads 1/N of them (DeepSeek-V3 technical report,
section 3.4; SGLang's DP-attention and TensorRT-LLM's wide-EP documentation).

The ranks are alike and step together, so one rank stands for the replica: a TP group of G GPUs
serving C / D sessions whose model keeps the non-expert weights whole and 1/D of each expert
byte, `rank_model`. The experts a step reads are those the whole replica's batch D x b routes to,
of which each GPU holds 1/N. Under the seed's routing that is min(D b K, E), min(b K, E / D) per
rank: the rank model has E' = E / D experts and K per token. Under uniform routing it is
E (1 - (1 - K / E)^(D b)), for the rank E' (1 - (1 - K' / E')^b) with K' = E' (1 - (1 - K / E)^D).
Either way the decode step's experts term (`jaxpareto.physics.decode`) applies unchanged. Compute splits the same way: a GPU computes its
rank's tokens' attention and dense layers over G and 1/N of every rank's expert work, b x 2
P_active / G in all. The replica's throughput and sessions are D times the rank's; per GPU they
are the rank's.

Not modelled yet: the ranks' lockstep (every MoE layer exchanges tokens between all ranks, so a
prefill on one rank stalls the others' decode step), the all-to-all of expert parallelism
(dispatch and combine per MoE layer), expert load imbalance, and pipeline parallelism. Until the
lockstep is, attention DP reaches the physics only through a `GridPoint` that carries
``dp_attention`` (the validation path), not as a sweep axis.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxpareto.definitions.model import ModelParams


def expert_weights_gb(model: ModelParams) -> jax.Array:
    """Weights of all routed experts [GB]: E x P_expert x d_expert (0 for a dense model)."""
    return model.experts * model.expert_params_b * model.expert_weight_bytes


def rank_model(model: ModelParams, ranks: jax.Array, routing: str = "seed") -> ModelParams:
    """The model as one of D attention-DP ranks sees it (module docstring).

    Args:
        model: one model.
        ranks: D >= 1, attention-DP ranks of the replica.
        routing: the decode step's expert routing (`jaxpareto.physics.decode.experts_touched`,
            static). "seed": the replica reads min(D b K, E) experts, min(b K, E / D) per rank,
            so K stays; "uniform": K' below.

    Returns:
        `ModelParams` with ``weights_gb`` = non-expert weights + expert weights / D, ``experts``
        E / D and, under uniform routing, ``experts_per_token`` E / D x (1 - (1 - K / E)^D);
        everything else unchanged. D = 1 returns the same numbers.
    """
    safe_experts = jnp.where(model.experts > 0, model.experts, 1.0)  # double where: no 0/0 in gradients
    routed = 1.0 - jnp.power(1.0 - model.experts_per_token / safe_experts, ranks)
    experts = model.experts / ranks
    per_token = model.experts_per_token
    if routing != "seed":  # D = 1 keeps K to the last bit (E (1 - (1 - K / E)) rounds)
        per_token = jnp.where(ranks > 1, jnp.where(model.experts > 0, experts * routed, 0.0), per_token)
    return dataclasses.replace(
        model,
        weights_gb=model.weights_gb - expert_weights_gb(model) * (1.0 - 1.0 / ranks),
        experts=experts,
        experts_per_token=per_token,
    )


def replica_gpus(tp: jax.Array, ranks: jax.Array) -> jax.Array:
    """N = G x D, the GPUs of one replica."""
    return tp * ranks
