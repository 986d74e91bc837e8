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

Between the ranks (``dp_attention`` > 1, MoE models), module functions below:

- **Lockstep.** Every MoE layer exchanges tokens among all D ranks, so a rank's step lasts as
  long as the slowest rank's: a rank decodes in prefill-length steps while any rank prefills
  (`jaxpareto.physics.engine.shared_turn`, ``lockstep_ranks``; the shared engine only, as the
  seed's isolated prefill has no interference to spread).
- **Token exchange** (`expert_exchange`). Before each MoE layer a token is sent to the GPUs
  holding its K experts (dispatch), and its results come back (combine): DeepEP's all-to-all
  (DeepSeek-V3 report, section 3.4), or, when every expert is split over all N GPUs (``ep`` =
  1), an all-gather and a reduce-scatter of every rank's tokens (SGLang's DP attention without
  EP). A GPU of expert-parallel group e receives the tokens of the other D - 1 ranks that route
  to e, a share q of each: q = min(K, ep) / ep under the seed's routing (a token's K experts in
  K distinct groups), 1 - (1 - 1 / ep)^K under uniform routing (the chance that one of K picks
  lands in e; DeepEP sends a token once per destination GPU). Each rank token therefore costs
  every GPU 2 (D - 1) q x hidden x 2 B / link per MoE layer (dispatch and combine, 16-bit), at
  the link among N GPUs (`jaxpareto.physics.communication.link_gbs`: NVLink within the scale-up
  domain, else the NIC), plus 2 latencies (``allreduce_latency_us``) per MoE layer. Every layer
  is counted as a MoE layer (DeepSeek-V3 has 58 of 61): an upper bound of a few per cent.
- **Expert imbalance** (`Workload.expert_imbalance` = f >= 1, with whole experts on GPUs, ``ep``
  > 1). Tokens do not spread evenly over the expert-parallel GPUs, and every MoE layer waits
  for the busiest, which receives f times the mean: its expert matmuls (2 K P_expert per token)
  and its share of the exchange take f times as long, and, below saturation, it reads the
  experts of f times as many routed tokens (K f per token, at most E). DeepSeek-V3 balances by
  bias-adjusted routing and redundant experts (report, sections 2.1.2 and 3.4; its expert-parallel
  load balancer, EPLB, exists for this): f is an input, not a prediction.

Pipeline parallelism (``pp`` = S stages, `pipeline_costs`): each stage's GPUs hold 1/S of the
layers, their weights and their KV (`jaxpareto.physics.memory.memory_budget`'s ``stages``); S
micro-batches stream through the stages, so a token takes a whole cycle (the TP group's step at
b / S, at least one session, plus the hops between stages) and a cycle carries S prefill
chunks.

Not modelled yet: attention DP or PP under disaggregated serving.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.hardware import HardwareParams
from jaxpareto.definitions.model import ModelParams
from jaxpareto.definitions.units import BYTES_PER_GB, FLOPS_PER_PARAM_PER_TOKEN, FLOPS_PER_TFLOPS, MS_PER_S, \
    PARAMS_PER_B
from jaxpareto.physics.communication import ACTIVATION_BYTES, link_gbs
from jaxpareto.physics.costs import PrefillAttention, TpCosts


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


class ReplicaLayout(NamedTuple):
    """A replica's layout beyond its TP groups (scalars, integers carried as floats).

    Attributes:
        ranks: D, attention data-parallel ranks (``dp_attention``), each a TP group.
        expert_ranks: ``ep``, GPU groups the routed experts are spread over whole; 1: every
            expert split over all N = G x D GPUs of a stage.
        stages: ``pp``, pipeline stages, each on its own N GPUs with a share of the layers.
        budget: ``gpu_budget``, GPUs the replicas fill (0: none).
    """

    ranks: jax.Array
    expert_ranks: jax.Array
    stages: jax.Array = 1.0
    budget: jax.Array = 0.0


def point_layout(point) -> ReplicaLayout | None:
    """The layout of a `GridPoint` that carries ``dp_attention`` (and optionally ``ep`` and
    ``pp``, default 1); None for a point without the layout axes (static)."""
    if "dp_attention" not in point:
        return None
    ranks = point["dp_attention"]
    one = 1.0 + 0.0 * ranks
    return ReplicaLayout(ranks, point["ep"] if "ep" in point else one, point["pp"] if "pp" in point else one,
                         point["gpu_budget"] if "gpu_budget" in point else 0.0 * ranks)


def fills_budget(tp: jax.Array, layout: ReplicaLayout) -> jax.Array:
    """Whether the replica's G x pp x D GPUs divide the GPU budget into whole replicas (no
    budget: True)."""
    return (layout.budget == 0) | (jnp.mod(layout.budget, replica_gpus(tp, layout.ranks) * layout.stages) == 0)


def layout_splits(model: ModelParams, tp: jax.Array, layout: ReplicaLayout) -> jax.Array:
    """Whether the model splits as the layout says: ``ep`` divides a stage's N = G x D GPUs and
    the E experts (a dense model takes ``ep`` = 1 only), and there are no more stages than
    layers."""
    gpus = replica_gpus(tp, layout.ranks)
    ep = layout.expert_ranks
    fits = (ep <= gpus) & (jnp.mod(gpus, ep) == 0)
    experts_split = jnp.where(model.experts > 0, jnp.mod(model.experts, ep) == 0, ep == 1)
    return fits & experts_split & (layout.stages <= model.layers)


def destination_share(model: ModelParams, expert_ranks: jax.Array, routing: str = "seed") -> jax.Array:
    """q: the share of tokens one expert-parallel group receives (module docstring)."""
    k = model.experts_per_token
    if routing == "seed":
        return jnp.minimum(k, expert_ranks) / expert_ranks
    groups = jnp.where(expert_ranks > 1, expert_ranks, 2.0)  # double where: no log(0) in gradients
    return jnp.where(expert_ranks > 1, -jnp.expm1(k * jnp.log1p(-1.0 / groups)), 1.0)


class ExchangeCosts(NamedTuple):
    """What the layout adds to a rank's step (scalars; `layout_costs`).

    Attributes:
        per_token_ms: exchange time per token of the rank's step [ms].
        fixed_ms: exchange latency of one forward pass [ms].
        imbalance_compute_ms: the busiest GPU's extra expert matmuls per token [ms at peak].
        imbalance: f where the experts are whole (``ep`` > 1), else 1.
    """

    per_token_ms: jax.Array
    fixed_ms: jax.Array
    imbalance_compute_ms: jax.Array
    imbalance: jax.Array


def expert_exchange(hw: HardwareParams, model: ModelParams, tp: jax.Array, layout: ReplicaLayout,
                    imbalance: jax.Array, latency_us: jax.Array, tflops: jax.Array,
                    routing: str = "seed") -> ExchangeCosts:
    """The token exchange and expert imbalance of one rank's forward pass (module docstring).

    Args:
        hw: one GPU (``interconnect_gbs``, ``scaleout_gbs``, ``scaleup_domain_gpus``).
        model: the whole model (not `rank_model`'s): E, K, P_expert, layers, hidden size.
        tp: G [GPUs]. layout: D and ``ep``.
        imbalance: f >= 1 (`Workload.expert_imbalance`).
        latency_us: one collective's fixed latency [µs] (`Efficiency.allreduce_latency_us`).
        tflops: the routed experts' rate per GPU [TFLOPS]
            (`jaxpareto.definitions.hardware.expert_tflops`).
        routing: "seed" or "uniform" (static; `destination_share`).

    Returns:
        `ExchangeCosts`: zero exchange for a dense model or D = 1 (a TP group's tokens are on
        all its GPUs after the all-reduce), f only where ``ep`` > 1.
    """
    moe = model.experts > 0
    f = jnp.where(moe & (layout.expert_ranks > 1), imbalance, 1.0)
    exchanging = moe & (layout.ranks > 1) & jnp.isfinite(hw.interconnect_gbs) & jnp.isfinite(model.hidden_size)
    link = jnp.where(exchanging, link_gbs(hw, replica_gpus(tp, layout.ranks)), 1.0)  # double where
    hidden = jnp.where(exchanging, model.hidden_size, 0.0)
    received = 2.0 * (layout.ranks - 1.0) * destination_share(model, layout.expert_ranks, routing) * f
    per_token = model.layers * received * hidden * ACTIVATION_BYTES / (link * BYTES_PER_GB) * MS_PER_S
    fixed = jnp.where(moe & (layout.ranks > 1), 2.0 * model.layers * latency_us / 1000.0, 0.0)
    expert_flops = FLOPS_PER_PARAM_PER_TOKEN * model.experts_per_token * model.expert_params_b * PARAMS_PER_B
    extra_compute = (f - 1.0) * expert_flops / (tp * tflops * FLOPS_PER_TFLOPS) * MS_PER_S
    return ExchangeCosts(jnp.where(exchanging, per_token, 0.0), fixed, extra_compute, f)


def layout_costs(costs: TpCosts, exchange: ExchangeCosts, eta_prefill: jax.Array, routing: str = "seed") -> TpCosts:
    """A rank's TP-group costs (`jaxpareto.physics.costs.tp_costs` on `rank_model`) with the
    exchange and the busiest GPU's expert work added: per token to the prefill and to the decode
    step (like the all-reduce's), per pass to the fixed terms, and K f routed experts read per
    token. Under uniform routing K f is held to E, the rank's experts (its count's 1 - K / E
    must not turn negative); the seed's min(b K f, E) holds the count to E itself, and a batch
    under one request, a rank's share of a lone token under ``seen_batch="distribution"``,
    reads its K f experts whole (`jaxpareto.physics.decode.expected_experts_touched`)."""
    decode = costs.decode
    per_token = decode.experts_per_token * exchange.imbalance
    decode = decode._replace(
        allreduce_ms=decode.allreduce_ms + exchange.per_token_ms,
        fixed_ms=decode.fixed_ms + exchange.fixed_ms,
        compute_ms=decode.compute_ms + exchange.imbalance_compute_ms,
        padding_compute_ms=decode.padding_compute_ms + exchange.imbalance_compute_ms,
        experts_per_token=per_token if routing == "seed" else jnp.minimum(per_token, decode.experts),
    )
    added = exchange.per_token_ms + exchange.imbalance_compute_ms / eta_prefill
    attention = None if costs.attention is None else \
        costs.attention._replace(matmul_ms_per_token=costs.attention.matmul_ms_per_token + added)
    return TpCosts(costs.prefill_ms_per_token + added, decode, costs.ttft_fixed_ms + exchange.fixed_ms, attention)


class PipelineCosts(NamedTuple):
    """A rank's costs over ``pp`` stages (`pipeline_costs`).

    Attributes:
        costs: `TpCosts` of one engine cycle (every micro-batch through every stage).
        chunk_tokens: prefill tokens a cycle carries at most, one chunk per micro-batch [tokens].
        fill_ms: the pipeline's fill for one prompt: its first chunk's pass through the other
            stages before the chunks stream [ms].
    """

    costs: TpCosts
    chunk_tokens: jax.Array
    fill_ms: jax.Array


def pipeline_costs(costs: TpCosts, hw: HardwareParams, model: ModelParams, tp: jax.Array, layout: ReplicaLayout,
                   latency_us: jax.Array, step_overhead_ms: jax.Array, chunk_tokens: jax.Array,
                   prefill_tokens: jax.Array, routing: str = "seed") -> PipelineCosts:
    """Pipeline parallelism over S = ``pp`` stages (module docstring, "Pipeline parallelism").

    The engine keeps S micro-batches in flight, one per stage (vLLM's virtual engines, SGLang's
    and TensorRT-LLM's PP micro-batches): a cycle runs every micro-batch of b / S sessions through
    every stage, each stage's GPUs reading 1/S of the weights and holding 1/S of the layers' KV.
    A token's TPOT is one cycle: S stage steps of a micro-batch, which is the TP group's step at
    batch b / S (weights read S times at 1/S each: PP does not shorten a token, it multiplies
    the batch a TPOT admits), plus S - 1 hops of the micro-batch's activations between stages
    (latency + b / S x hidden x 2 B / link, the link among the replica's GPUs), plus the engine's
    fixed time per step once per micro-batch (the scheduler prepares and samples each one; the
    per-layer terms are per layer either way). With fewer than S sessions decoding, each
    micro-batch holds one and the rest of the cycle is the pipeline's bubble: a token still
    passes every stage at a micro-batch of one, so the cycle costs at least a batch of S (the
    ``batch_floor``), and such a pipeline decodes no faster than its TP group; with full
    micro-batches its extra GPUs add bandwidth for the sessions' KV, and each micro-batch of a
    MoE model loads only its own tokens' experts. Prefill: a
    prompt's chunks stream through the stages, one per micro-batch (SGLang's chunked pipeline
    parallelism for long prompts), so a cycle carries up to S chunks at 1/S of a token's compute
    per stage, and a prompt alone takes (chunks + S - 1) stage steps: its own chunks at the
    pipeline's rate plus the fill, (S - 1) / S of a chunk's time on the TP group.

    Args:
        costs: the rank's `TpCosts` on its TP group (with `layout_costs`' terms).
        hw: one GPU. model: the rank's model (`rank_model`). tp: G. layout: ``stages`` S.
        latency_us: one hop's fixed latency [µs] (`Efficiency.allreduce_latency_us`).
        step_overhead_ms: the engine's fixed time per step (`Efficiency.decode_overhead_ms`) [ms].
        chunk_tokens: P, the engine's chunk per step. prefill_tokens: the turn's mean prefill.
        routing: "seed" or "uniform" (static): the experts a micro-batch of b / S touches, as
            K' per token of b: K / S (seed), E (1 - (1 - K / E)^(1 / S)) (uniform).

    Returns:
        `PipelineCosts`; S = 1 leaves every cost as it was.
    """
    stages = layout.stages
    decode = costs.decode
    known = jnp.isfinite(hw.interconnect_gbs) & jnp.isfinite(model.hidden_size) & (stages > 1)
    link = jnp.where(known, link_gbs(hw, replica_gpus(tp, layout.ranks) * stages), 1.0)  # double where
    hop_ms = jnp.where(known, model.hidden_size * ACTIVATION_BYTES / (link * BYTES_PER_GB) * MS_PER_S, 0.0)
    hops = stages - 1.0
    k = decode.experts_per_token
    if routing == "seed":
        per_token = k / stages
    else:
        safe_e = jnp.where(decode.experts > 0, decode.experts, 1.0)  # double where: no 0/0
        per_token = jnp.where((decode.experts > 0) & (stages > 1),
                              safe_e * -jnp.expm1(jnp.log1p(-jnp.minimum(k / safe_e, 1.0 - 1e-7)) / stages), k)
    decode = decode._replace(
        kv_ms=decode.kv_ms / stages, compute_ms=decode.compute_ms / stages,
        padding_compute_ms=decode.padding_compute_ms / stages,
        attention_ms=None if decode.attention_ms is None else decode.attention_ms / stages,
        allreduce_ms=decode.allreduce_ms / stages + hops / stages * hop_ms,
        fixed_ms=decode.fixed_ms + hops * (latency_us / 1000.0 + step_overhead_ms), experts_per_token=per_token,
        batch_floor=jnp.where(stages > 1, stages, 0.0))
    single = jnp.minimum(prefill_tokens, chunk_tokens) * costs.prefill_ms_per_token
    def per_stage(per_token_ms):  # a token's prefill over the stages, and its hops between them
        return per_token_ms / stages + hops / stages * hop_ms

    attention = None if costs.attention is None else PrefillAttention(
        per_stage(costs.attention.matmul_ms_per_token), costs.attention.hit_ms / stages,
        costs.attention.miss_ms / stages)
    fixed = costs.ttft_fixed_ms + hops * latency_us / 1000.0
    return PipelineCosts(TpCosts(per_stage(costs.prefill_ms_per_token), decode, fixed, attention),
                         chunk_tokens * stages, hops / stages * single)
