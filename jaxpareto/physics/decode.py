"""Decode step time and TPOT for an effective batch (seed eq. 3, 3a-3c; docs/model.md).

Everything that does not depend on the batch B is gathered once per point in
`DecodeCoefficients`; `decode_step` then costs a handful of flops per B, which is what the
closed-loop solver evaluates in its inner loop. Between its kinks TPOT is linear in B
(`tpot_lines`), which the exact solver uses.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import gammainc, ndtr
from jax.scipy.stats import norm

from jaxpareto.definitions.hardware import HardwareParams
from jaxpareto.definitions.options import ROOFLINES, ModelOptions
from jaxpareto.physics.attention import decode_pairs
from jaxpareto.physics.cuda_graphs import padded_batch
from jaxpareto.physics.memory import session_gb
from jaxpareto.definitions.model import ModelParams
from jaxpareto.definitions.units import FLOPS_PER_PARAM_PER_TOKEN, FLOPS_PER_TFLOPS, MS_PER_S, PARAMS_PER_B


class DecodeCoefficients(NamedTuple):
    """Batch-independent parts of one point's decode step (scalars).

    Attributes:
        nonmoe_ms: non-expert weights P_nonmoe x d / (G x BW) [ms] (all weights if dense).
        expert_ms: one routed expert on one GPU's share, P_expert x d / (G x BW) [ms].
        experts: E (0 for dense).
        experts_per_token: K (0 for dense).
        kv_ms: one session's KV reads per GPU, `jaxpareto.physics.memory.session_gb` / (G x BW)
            [ms]: L x κ / (min(G, n_kv) x BW) for full attention, plus its sliding-window KV and
            fixed recurrent state (linear and Mamba layers), each read once per step.
        compute_ms: one session's matmuls 2 x P_active / (G x F) [ms], its K routed experts'
            share at their grouped GEMMs' rate where measured (`routed_at_expert_rate`), plus its
            attention where its FLOPs are counted (the measured profile, ``attention="flops"``).
        elementwise_overhead: multiplier on memory time (1.10).
        eta_decode: η_d.
        fixed_ms: time every step adds whatever the batch (`Efficiency.decode_overhead_ms` and
            the all-reduce latencies) [ms]; 0 in the seed.
        allreduce_ms: tensor-parallel all-reduce transfer per token in the step [ms]; 0 in the seed.
        batch_floor: the step costs at least a batch of this many (a pipeline of S stages: S,
            each micro-batch one session at least; `jaxpareto.physics.layout.pipeline_costs`); 0
            elsewhere.
        compute_floor_ms: matmul time every step adds whatever its tokens: a GEMM of m tokens
            takes as long as m + m_0 at the large-GEMM rate (``gemm_rate="measured"``,
            `jaxpareto.definitions.hardware.gemm_offset_tokens`), m_0 x the non-expert matmul
            time per token [ms]; 0 in the seed.
        expert_floor_ms: the same offset for one routed expert, m_0 x its matmul time per token
            [ms]: the tokens routed to an expert are a GEMM of their own (a grouped GEMM, one
            problem per expert), so a step pays it once for every expert its tokens touch; m_0
            and the rate are the grouped GEMM's own where measured
            (`jaxpareto.definitions.hardware.expert_offset_tokens`); 0 in the seed and for dense
            models.
        attention_ms: under ``roofline="operator"``, the part of ``compute_ms`` that is one
            session's attention FLOPs (0 where they are not counted) [ms]: the step then runs
            the projections' roofline and attention's one after the other (`decode_step`). None:
            the seed's one roofline for the whole step.
        graph_step: g, the step between the batch sizes of the engine's CUDA graphs, which pads
            a decode step to the next of them (`jaxpareto.physics.cuda_graphs.padded_batch`)
            [requests]; None: no padding term in the program (0 in a table that mixes).
        graph_ranks: D, the attention-DP ranks that replay one graph (1 without).
        graph_sessions: a rank's sessions in the closed loop (its batch is binomial over them);
            inf in the open loop.
        graph_most: the most requests a rank runs at once (its KV slots and request limit).
        graph_microbatches: S, a pipeline's micro-batches, each padded to its own graph (1
            without a pipeline).
        padding_compute_ms: a padded request's matmuls, ``compute_ms`` without attention's FLOPs
            (its projections and routed experts, the busiest GPU's share) [ms]; it also pays
            ``allreduce_ms``, not KV reads.
    """

    nonmoe_ms: jax.Array
    expert_ms: jax.Array
    experts: jax.Array
    experts_per_token: jax.Array
    kv_ms: jax.Array
    compute_ms: jax.Array
    elementwise_overhead: jax.Array
    eta_decode: jax.Array
    fixed_ms: jax.Array = 0.0
    allreduce_ms: jax.Array = 0.0
    batch_floor: jax.Array = 0.0
    compute_floor_ms: jax.Array = 0.0
    expert_floor_ms: jax.Array = 0.0
    attention_ms: jax.Array | None = None
    graph_step: jax.Array | None = None
    graph_ranks: jax.Array | float = 1.0
    graph_sessions: jax.Array | float = jnp.inf
    graph_most: jax.Array | float = jnp.inf
    graph_microbatches: jax.Array | float = 1.0
    padding_compute_ms: jax.Array | float = 0.0


class DecodeStep(NamedTuple):
    """One decode step at batch B (scalars, ms).

    Attributes:
        t_weight_ms: weight loading: non-expert part plus the distinct routed experts the
            batch touches, min(B x K, E) / G of them per GPU (seed eq. 3a).
        t_kv_ms: KV-cache reads of the whole batch (eq. 3b).
        t_compute_ms: matmul time at the tensor-core rate (eq. 3c: the peak, or the measured
            rate), plus the step's GEMM offsets: ``compute_floor_ms`` and ``expert_floor_ms`` per
            routed expert touched.
        tpot_ms: max((t_weight + t_kv) x overhead, t_compute) / η_d (eq. 3), plus t_fixed; under
            ``roofline="operator"`` (max(t_weight x overhead, t_compute - t_attention_compute) +
            t_attention) / η_d, plus t_fixed.
        compute_bound: t_compute exceeds the memory time (under ``roofline="operator"``: the
            projections' matmuls exceed their weights' read).
        t_fixed_ms: the opt-in terms outside the roofline: per-step overhead and the
            tensor-parallel all-reduces of the batch's activations (0 in the seed).
        t_attention_ms: under ``roofline="operator"``, attention's own roofline, max(t_kv x
            overhead, t_attention_compute) [ms before η_d]; None: the seed's one roofline.
        t_attention_compute_ms: under ``roofline="operator"``, the batch's attention FLOPs' time
            within t_compute [ms]; None otherwise.
    """

    t_weight_ms: jax.Array
    t_kv_ms: jax.Array
    t_compute_ms: jax.Array
    tpot_ms: jax.Array
    compute_bound: jax.Array
    t_fixed_ms: jax.Array = 0.0
    t_attention_ms: jax.Array | None = None
    t_attention_compute_ms: jax.Array | None = None


class TpotLines(NamedTuple):
    """TPOT(B) = max(min(a_unsat + b_unsat B, a_sat + b_sat B),
                    min(a_compute + b_compute B, a_compute_sat + b_compute_sat B)) [ms].

    ``unsat``: memory time while the batch touches fewer than all experts (B K < E);
    ``sat``: memory time once every expert loads; ``compute``: matmul time, whose experts'
    GEMM offsets likewise grow with the experts touched until all are (``compute_sat``). For a
    dense model, or without offsets, both lines of each pair coincide. The fixed terms (t_fixed,
    affine in B) shift every line alike.
    """

    a_unsat: jax.Array
    b_unsat: jax.Array
    a_sat: jax.Array
    b_sat: jax.Array
    a_compute: jax.Array
    b_compute: jax.Array
    a_compute_sat: jax.Array
    b_compute_sat: jax.Array


def offset_shares(model: ModelParams) -> tuple[jax.Array, jax.Array]:
    """The GEMM offsets' weights as shares of the active matmuls (scalars): the non-expert GEMMs'
    (a dense model's are all its active ones: 1) and one routed expert's (0 for a dense model);
    a step or a prompt pays m_0 x (the first + the experts it touches x the second) tokens' worth
    of the active matmuls."""
    return (jnp.where(model.experts > 0, model.nonmoe_params_b / model.params_active_b, 1.0),
            model.expert_params_b / model.params_active_b)


def expert_slowdown(tflops: jax.Array, expert_tflops: jax.Array | None) -> jax.Array | float:
    """How many times longer a routed expert's matmul takes than the dense rate ``tflops`` gives
    it: ``tflops`` / ``expert_tflops`` (1 where the experts compute at the dense rate: None, or
    not measured)."""
    return 1.0 if expert_tflops is None else tflops / expert_tflops


def routed_at_expert_rate(matmul_ms: jax.Array, model: ModelParams, slowdown) -> jax.Array:
    """A token's active matmuls ``matmul_ms`` (all at the dense rate) with its K routed experts'
    share at the experts' rate: + matmul_ms x K x (P_expert / P_active) x (slowdown - 1) (+ 0
    for a dense model, or at slowdown 1)."""
    _, expert_share = offset_shares(model)
    return matmul_ms + matmul_ms * (model.experts_per_token * expert_share) * (slowdown - 1.0)


def decode_coefficients(
    hw: HardwareParams,
    model: ModelParams,
    tp: jax.Array,
    context_tokens: jax.Array,
    tflops: jax.Array,
    eta_decode: jax.Array,
    elementwise_overhead: jax.Array,
    attention_tflops: jax.Array | None = None,
    offset_tokens: jax.Array | float = 0.0,
    expert_tflops: jax.Array | None = None,
    expert_offset_tokens: jax.Array | float | None = None,
    roofline: str = "step",
) -> DecodeCoefficients:
    """Per-point constants of seed eq. 3.

    Args:
        hw: one GPU; bandwidth_gbs [GB/s].
        model: one model (dense: E = K = 0 and P_nonmoe = P_active).
        tp: G [GPUs].
        context_tokens: L, context each decoding session attends to [tokens].
        tflops: F per GPU [TFLOPS] (`jaxpareto.definitions.hardware.effective_tflops`).
        eta_decode: η_d.
        elementwise_overhead: memory-time multiplier.
        attention_tflops: F of the attention kernels per GPU [TFLOPS]; given (attention's FLOPs
            counted: the measured profile, or ``attention="flops"``), each session's step also computes its attention over the context
            (`jaxpareto.physics.attention`), split over the G GPUs like the heads.
        offset_tokens: m_0, the tokens' worth of matmul time each GEMM adds (`DecodeCoefficients`).
        expert_tflops: the rate of the routed experts' grouped GEMMs per GPU [TFLOPS]
            (`jaxpareto.definitions.hardware.expert_tflops`); None: ``tflops``.
        expert_offset_tokens: m_0 of one routed expert's GEMM, in tokens at ``expert_tflops``
            (`jaxpareto.definitions.hardware.expert_offset_tokens`); None: ``offset_tokens``.
        roofline: "step" (the seed's eq. 3: one roofline for the whole step) or "operator" (the
            projections' roofline and attention's, one after the other: `decode_step`). Static.

    Raises:
        ValueError: ``roofline`` is neither.
    """
    if roofline not in ROOFLINES:
        raise ValueError(f"roofline {roofline!r} not in {ROOFLINES}")
    bw = hw.bandwidth_gbs
    matmul_ms = FLOPS_PER_PARAM_PER_TOKEN * model.params_active_b * PARAMS_PER_B / (tp * tflops * FLOPS_PER_TFLOPS) \
        * MS_PER_S
    slowdown = expert_slowdown(tflops, expert_tflops)
    expert_offset = offset_tokens if expert_offset_tokens is None else expert_offset_tokens
    nonmoe_share, expert_share = offset_shares(model)
    floor_ms = offset_tokens * matmul_ms
    expert_floor_ms = expert_offset * matmul_ms * expert_share * slowdown
    floor_ms = floor_ms * nonmoe_share
    matmul_ms = routed_at_expert_rate(matmul_ms, model, slowdown)
    padding_compute_ms = matmul_ms  # a padded request's matmuls: no attention over a context
    attention_ms = 0.0 * matmul_ms
    if attention_tflops is not None:
        full, window = decode_pairs(context_tokens, model.kv_window_tokens)
        flops = full * model.decode_pair_flops + window * model.decode_window_pair_flops
        attention_ms = flops / (tp * attention_tflops * FLOPS_PER_TFLOPS) * MS_PER_S
        matmul_ms = matmul_ms + attention_ms
    return DecodeCoefficients(
        nonmoe_ms=model.nonmoe_params_b * model.nonmoe_weight_bytes / (tp * bw) * MS_PER_S,
        expert_ms=model.expert_params_b * model.expert_weight_bytes / (tp * bw) * MS_PER_S,
        experts=model.experts,
        experts_per_token=model.experts_per_token,
        # each GPU reads its share of the session's KV, replicated heads included
        kv_ms=session_gb(model, context_tokens, tp) / (tp * bw) * MS_PER_S,
        compute_ms=matmul_ms,
        elementwise_overhead=elementwise_overhead,
        eta_decode=eta_decode,
        compute_floor_ms=floor_ms,
        expert_floor_ms=expert_floor_ms,
        attention_ms=attention_ms if roofline == "operator" else None,  # None: the seed's one roofline
        padding_compute_ms=padding_compute_ms,
    )


def experts_touched(batch: jax.Array, experts: jax.Array, experts_per_token: jax.Array,
                    routing: str = "seed") -> jax.Array:
    """Distinct routed experts a decode step of B tokens loads.

    "seed": min(B K, E) (seed eq. 3a: no two tokens share an expert until all are busy);
    "uniform": E (1 - (1 - K / E)^B), the expected number of distinct experts when each token
    picks K of E uniformly at random (each expert is missed by a token with probability
    1 - K/E); always at most the seed's count. Dense models (E = 0) touch none.
    """
    if routing == "seed":
        return jnp.minimum(batch * experts_per_token, experts)
    safe_e = jnp.where(experts > 0, experts, 1.0)  # double where: no NaN from 0/0 in gradients
    missed = jnp.power(1.0 - experts_per_token / safe_e, batch)
    return jnp.where(experts > 0, safe_e * (1.0 - missed), 0.0)


class BatchLaw(NamedTuple):
    """The batch a request's decode step sees, as the replica's routed experts count it, in an
    attention-DP rank's terms (scalars; `seen_batch`): the request itself, 1 / D, and the
    others, their mean and variance over D, D² (the replica's count over its D ranks: its
    experts are read for every rank's tokens, `jaxpareto.physics.layout.rank_model`)."""

    own: jax.Array | float
    others: jax.Array
    variance: jax.Array

    def moved(self, others: jax.Array) -> "BatchLaw":
        """The law with its others' mean moved by ``others`` (in its own terms), none below 0."""
        return self._replace(others=jnp.maximum(self.others + others, 0.0))

    def shifted(self, requests: jax.Array) -> "BatchLaw":
        """The law with ``requests`` more (fewer, if negative) on the request's own rank (1 / D each
        in the replica's count) and no spread: a step at a given batch."""
        return self.moved(requests * self.own)._replace(variance=0.0 * self.variance)


def expected_experts_touched(law: BatchLaw, experts: jax.Array, experts_per_token: jax.Array,
                             routing: str = "seed") -> jax.Array:
    """Mean distinct routed experts a decode step loads when its batch varies from step to step
    (scalars): E[`experts_touched`(X)] over the batch X = own + Y a request sees (`BatchLaw`), the
    others Y >= 0 taken gamma of their mean and variance (Poisson others: shape B, scale 1).
    Variance 0 gives `experts_touched` at own + Y.

    The count is concave in X (it levels off once every expert is awake), so its mean lies
    below the count at the mean batch (Jensen's inequality); a fixed point through TPOT
    amplifies the gap (docs/model.md, "The batch a request sees").

    "seed": K E[min(X, c)] with c = E / K, E[min(Y, b)] = k θ P(k + 1, b / θ) + b (1 - P(k, b / θ))
    for Y ~ gamma(k, θ) (P the regularised incomplete gamma function), by the normal law's
    partial expectation past k = 50; "uniform": E (1 - E[q^X]), q = 1 - K / E, with
    E[q^Y] = (1 - θ ln q)^(-k) the gamma law's moment-generating function at ln q. Dense models
    (E = 0) touch none.
    """
    own, others = law.own, law.others
    spread = (law.variance > 0.0) & (others > 0.0) & (experts > 0.0)
    safe_mean = jnp.where(spread, others, 1.0)  # double where: finite gradients off the spread
    safe_variance = jnp.where(spread, law.variance, 1.0)
    shape, scale = safe_mean * safe_mean / safe_variance, safe_variance / safe_mean
    safe_e = jnp.where(experts > 0, experts, 1.0)
    if routing == "seed":
        room = jnp.maximum(safe_e / jnp.where(experts_per_token > 0, experts_per_token, 1.0) - own, 0.0)
        # many others: the gamma law is all but normal, and the incomplete gamma function of a
        # large shape loses float32's precision
        narrow = shape > 50.0
        x = jnp.where(narrow, 1.0, room / scale)
        gamma_part = safe_mean * gammainc(jnp.where(narrow, 1.0, shape) + 1.0, x) \
            + room * (1.0 - gammainc(jnp.where(narrow, 1.0, shape), x))
        sd = jnp.sqrt(safe_variance)
        z = (safe_mean - room) / sd
        normal_part = safe_mean - sd * norm.pdf(z) - (safe_mean - room) * ndtr(z)
        spread_count = jnp.minimum(experts_per_token * (own + jnp.where(narrow, normal_part, gamma_part)), safe_e)
    else:
        log_q = jnp.log1p(-experts_per_token / safe_e)
        spread_count = safe_e * (1.0 - jnp.exp(own * log_q - shape * jnp.log1p(-scale * log_q)))
    return jnp.where(spread, spread_count, experts_touched(own + others, experts, experts_per_token, routing))


def seen_batch(batch_run: jax.Array, concurrency: jax.Array, options: ModelOptions,
               ranks: jax.Array | float = 1.0) -> tuple[jax.Array, BatchLaw | None]:
    """The batch a request's decode steps run at (its mean, a rank's), and where the routed
    experts are counted over its distribution (``seen_batch="distribution"``) its law as they
    count it (`BatchLaw`; None under the seed's ``"mean"``). ``concurrency`` and ``batch_run``
    are a rank's; ``ranks`` D, the attention-DP ranks sharing the replica's experts.

    Under Poisson arrivals a request decodes beside the B others a random time sees, B + 1 in
    all (docs/model.md, "Open-loop load"), a Poisson count of them (the M/G/∞ occupancy, Takács
    1962): the replica's D B others, variance D B. In the closed loop of staggered turns the
    seed's steps run at the mean batch B, but at least the request itself (B < 1, sessions
    pausing most of the time, is no batch a step runs, and a MoE step at B < 1 read fewer
    experts than one token routes to); under ``"distribution"`` a session sees itself and
    binomial(C - 1, ρ) others on its rank, ρ = B_run / C the share of sessions running (the
    arrival theorem of closed networks: Lavenberg and Reiser 1980), mean 1 + (C - 1) ρ, and
    binomial(D C - 1, ρ) in the replica, the law the percentiles take too. Synchronised turns
    step in lockstep groups of a fixed size: the seed's mean, no spread. (docs/model.md, "The
    batch a request sees".)
    """
    if options.seen_batch == "mean":
        return (batch_run + 1.0 if options.open_loop else jnp.maximum(batch_run, 1.0)), None
    own = 1.0 / ranks
    if options.open_loop:
        return batch_run + 1.0, BatchLaw(own, batch_run, batch_run * own)
    if options.arrivals == "synchronised":
        seen = jnp.maximum(batch_run, 1.0)
        return seen, BatchLaw(own, seen - 1.0, 0.0 * seen)
    share = jnp.clip(batch_run / jnp.maximum(concurrency, 1.0), 0.0, 1.0)
    replica_others = jnp.maximum(concurrency / own - 1.0, 0.0)
    return 1.0 + jnp.maximum(concurrency - 1.0, 0.0) * share, \
        BatchLaw(own, replica_others * share * own, replica_others * share * (1.0 - share) * own * own)


def decode_step(c: DecodeCoefficients, batch: jax.Array, routing: str = "seed",
                law: BatchLaw | None = None) -> DecodeStep:
    """Seed eq. 3 at effective batch B (continuous, >= 0); ``routing`` as in `experts_touched`.
    A pipeline's step costs at least its ``batch_floor`` (B >= 0 is unchanged by a floor of 0).
    With ``c.graph_step`` given, the requests that pad the step to its CUDA graph's batch add
    their matmuls and all-reduces (`jaxpareto.physics.cuda_graphs.padded_batch`): TPOT is then
    no longer piecewise linear in B, and `tpot_lines`, which leaves them out, does not apply.
    With ``law`` given (``seen_batch="distribution"``) the routed experts are their mean over the
    batch's law (`expected_experts_touched`); every other term stays the step's at B.

    With ``c.attention_ms`` given (``roofline="operator"``; docs/model.md, "Per-operator
    roofline") every layer runs its projections and then its attention as separate kernels, so
    the step is the sum of their rooflines: max(weights x overhead, the projections' matmuls)
    + max(KV reads x overhead, attention's FLOPs), over η_d, plus the fixed terms (the
    per-operator roofline of Williams, Waterman and Patterson, CACM 52(4), 2009, summed over a
    layer's kernels as LLM-Viewer does: Yuan et al., "LLM Inference Unveiled", 2024). The seed's
    eq. 3 takes one roofline for the whole step, as if attention's KV reads ran under the
    projections' matmuls.
    """
    batch = jnp.maximum(batch, c.batch_floor)
    if law is None:
        touched = experts_touched(batch, c.experts, c.experts_per_token, routing)
    else:  # the floor holds for the law's batch too (a pipeline stage's experts: K / S a token)
        law = law.moved(jnp.maximum(c.batch_floor - law.own - law.others, 0.0))
        touched = expected_experts_touched(law, c.experts, c.experts_per_token, routing)
    t_weight_ms = c.nonmoe_ms + touched * c.expert_ms
    t_kv_ms = batch * c.kv_ms
    t_compute_ms = batch * c.compute_ms + (c.compute_floor_ms + touched * c.expert_floor_ms)
    t_fixed_ms = c.fixed_ms + batch * c.allreduce_ms
    if c.graph_step is not None:  # the CUDA graph's padded requests: matmuls and all-reduces only
        s = c.graph_microbatches  # a pipeline's S micro-batches of B / S, each its own graph
        padding = s * padded_batch(batch / s, c.graph_step, c.graph_ranks, c.graph_sessions / s, c.graph_most / s) \
            - batch
        t_compute_ms = t_compute_ms + padding * c.padding_compute_ms
        t_fixed_ms = t_fixed_ms + padding * c.allreduce_ms
    if c.attention_ms is None:
        t_memory_ms = (t_weight_ms + t_kv_ms) * c.elementwise_overhead
        tpot_ms = jnp.maximum(t_memory_ms, t_compute_ms) / c.eta_decode + t_fixed_ms
        return DecodeStep(t_weight_ms, t_kv_ms, t_compute_ms, tpot_ms, t_compute_ms > t_memory_ms, t_fixed_ms)
    attention_compute_ms = batch * c.attention_ms
    projections_ms = t_compute_ms - attention_compute_ms
    weights_ms = t_weight_ms * c.elementwise_overhead
    attention_roofline_ms = jnp.maximum(t_kv_ms * c.elementwise_overhead, attention_compute_ms)
    tpot_ms = (jnp.maximum(weights_ms, projections_ms) + attention_roofline_ms) / c.eta_decode + t_fixed_ms
    return DecodeStep(t_weight_ms, t_kv_ms, t_compute_ms, tpot_ms, projections_ms > weights_ms, t_fixed_ms,
                      attention_roofline_ms, attention_compute_ms)


def tpot_lines(c: DecodeCoefficients) -> TpotLines:
    """The linear pieces of TPOT(B) (min(B K, E) x w = min(B K w, E w) for w >= 0, for the
    experts' weights w and their GEMM offsets); without a CUDA graph's padding, which is not
    linear in B (``c.graph_step`` None)."""
    scale = c.elementwise_overhead / c.eta_decode
    compute_a = c.fixed_ms + c.compute_floor_ms / c.eta_decode
    compute_b = c.compute_ms / c.eta_decode + c.allreduce_ms
    return TpotLines(
        a_unsat=scale * c.nonmoe_ms + c.fixed_ms,
        b_unsat=scale * (c.experts_per_token * c.expert_ms + c.kv_ms) + c.allreduce_ms,
        a_sat=scale * (c.nonmoe_ms + c.experts * c.expert_ms) + c.fixed_ms,
        b_sat=scale * c.kv_ms + c.allreduce_ms,
        a_compute=compute_a,
        b_compute=compute_b + c.experts_per_token * c.expert_floor_ms / c.eta_decode,
        a_compute_sat=compute_a + c.experts * c.expert_floor_ms / c.eta_decode,
        b_compute_sat=compute_b,
    )
