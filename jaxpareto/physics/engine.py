"""Shared GPU time: prefill and decode in one continuous-batching engine with chunked prefill.

``prefill_model="shared"`` replaces the seed's eq. 2, where every turn prefills alone at the
GPU's full speed, by an engine that, like vLLM's scheduler with chunked prefill (Agrawal et al.,
"Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve", OSDI 2024), runs one
step at a time, each step carrying one decode token of each of the B active sessions plus up to
P prefill tokens: the engine's ``prefill_chunk_tokens`` (vLLM's ``max_num_batched_tokens``), less
the step's decode tokens where the engine counts them against it (vLLM, TensorRT-LLM;
`prefill_budget_tokens`). A step's time
comes from the same roofline as the seed's decode step (eq. 3):

    T(B, p) = max(t_memory(B), t_compute(B) + p c_p)

where t_memory and t_compute are eq. 3's memory and matmul terms (over η_d) and c_p the prefill
time of one token (eq. 2 with L_prefill = 1). Prefill tokens ride in the compute slack of
memory-bound decode steps, and weights are read once per step for both.

Queueing approximation (two-mode fluid model). While prefill work is waiting the engine runs
prefill steps of length T_f = T(B, p) carrying p = min(P, L_prefill / (1 - ρ')) tokens (one
prefill's at light load, a full chunk as prefills queue up), serving prefill at μ = p / T_f
tokens per ms; otherwise pure decode steps of length T_0 = T(B, 0) (the seed's TPOT). At
throughput X [turns/ms] and L_prefill tokens per turn, the prefill load is ρ = X L_prefill / μ
< 1, the share of time spent in prefill steps. Then

- TPOT = 1 / (ρ' / T_f + (1 - ρ') / T_0): one token per step, steps of both kinds;
- TTFT = S / (1 - ρ'), with S = max(L_prefill / P, 1) x T(B, min(L_prefill, P)) the prefill's
  time alone: the mean response time of a processor-sharing queue (Kleinrock 1976, vol. 2,
  section 4.4), which holds for any distribution of prefill sizes;
- ρ' = ρ (C - 1) / C is the load a session sees: not its own prefill, which it neither queues
  behind nor decodes during (the arrival theorem of closed networks, Lavenberg and Reiser
  1980); one session alone (C = 1) gets eq. 2's TTFT and eq. 3's TPOT;
- B = X R (Little's law over the active sessions, which, as in the seed, all sit in the batch),
  but a step decodes at most D = P' OSL / L of them (`fed_decode_batch`): past that the rest
  wait for their prefill, and the throughput levels off rather than falls as C grows.

For a given B, X R - B increases with ρ from -B, so one ρ in [0, 1) closes the three whenever
B is within what the engine can hold (always at the closed loop's B <= C_eff); it is found by a
bracketed Newton solve (`jaxpareto.physics.roots`), R(B) follows, and the seed's closed loop
B = C_eff R(B) / (R(B) + Z) is solved as before.
Limits of the approximation: a step's time is at least a memory-bound decode step, so a tiny
prefill (a few hundred tokens on a 70B model) takes one step rather than eq. 2's time, and the
processor-sharing wait charges queueing that one chunk could absorb when prefills are short and
outputs very short (OSL of a few tokens).
GPU time is conserved by construction: per unit time, prefill plus decode compute never exceeds
what the GPU delivers (every step's compute fits in its own time), so ``gpu_utilization`` <= 1.
TTFT includes the wait for prefill capacity, which is what grows several times faster than TPOT
as load rises (seed 004: TTFT x4.8, TPOT x1.5 at saturation, Llama-3.1-70B on H100).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpareto.physics.decode import DecodeStep
from jaxpareto.physics.numerics import sqrt_or_zero
from jaxpareto.physics.roots import InnerRoot, inner_root


class EngineTurn(NamedTuple):
    """One turn in the shared engine at batch B (scalars).

    Attributes:
        ttft_ms: prefill time including the wait for prefill capacity [ms].
        tpot_ms: mean time between output tokens, both kinds of steps [ms].
        prefill_load: ρ, the share of time spent in full-chunk steps, in [0, 1) (1 beyond
            capacity in the open loop).
        service_ms: S, the prefill's time alone [ms] (in the open loop, plus the wait for the
            step in progress).
        decode_step_ms, mixed_step_ms: T_0 and T_f, a step without and with prefill [ms].
        seen_load: the closed loop: ρ', the share of time in prefill steps that the turn sees.
            The open loop: P(a prompt waits for prompts ahead), ρ for a chunk or more and the
            chance of being carried past a step under one (`jaxpareto.physics.open_engine`).
        mixed_share: the share of time the turn decodes in steps as long as a prefill step: ρ',
            or with attention-DP ranks in lockstep 1 - (1 - ρ')(1 - ρ)^(D - 1).
        dispersion: F_c, the index of dispersion of the prefills landing in a turn's decode
            steps (the open loop; 1 in the closed loop).
        load_root: the closed loop's s = -ln(1 - ρ) and its relative residual (X R - B) / B
            (`shared_turn`); None elsewhere.
        service_scv: the squared coefficient of variation of ``service_ms`` where the steps
            give it (the open loop under one chunk: the step in progress and the step that
            carries the prompt, the prompt lengths included); 0 elsewhere.
        step_wait_ms: the part of ``service_ms`` that is the wait for the step in progress, the
            same for a prompt of any length (the open loop; 0 elsewhere) [ms].
        arrival_split: the open loop's waits by the kind of step a prompt arrives in
            (`jaxpareto.physics.open_engine.ArrivalSplit`); None elsewhere.
    """

    ttft_ms: jax.Array
    tpot_ms: jax.Array
    prefill_load: jax.Array
    service_ms: jax.Array = 0.0
    decode_step_ms: jax.Array = 0.0
    mixed_step_ms: jax.Array = 0.0
    seen_load: jax.Array = 0.0
    mixed_share: jax.Array = 0.0
    dispersion: jax.Array = 1.0
    load_root: InnerRoot | None = None
    service_scv: jax.Array = 0.0
    step_wait_ms: jax.Array = 0.0
    arrival_split: NamedTuple | None = None


class PrefillExperts(NamedTuple):
    """What a step's prefill tokens add for the routed experts only they touch, beyond the decode
    batch's (`jaxpareto.physics.costs.prefill_expert_costs`; scalars).

    Attributes:
        weight_ms: their weights, read once [ms at peak bandwidth] (the measured profile).
        floor_ms: their GEMMs' offsets, m_0 tokens' worth of matmul time each (each expert's
            tokens are a GEMM of their own; ``gemm_rate="measured"``) [ms before η_d].
    """

    weight_ms: jax.Array
    floor_ms: jax.Array


def step_ms(step: DecodeStep, eta_decode: jax.Array, elementwise_overhead: jax.Array,
            prefill_tokens: jax.Array, prefill_ms_per_token: jax.Array,
            experts: PrefillExperts | None = None) -> jax.Array:
    """T(B, p): one engine step carrying the batch's decode tokens and ``prefill_tokens`` [ms]:
    one roofline for the whole step, or under ``roofline="operator"`` (``step.t_attention_ms``
    given) the projections' roofline, with the prefill tokens' c_p in its compute, plus the
    decode batch's attention (`jaxpareto.physics.decode.decode_step`).

    Args:
        step: the seed's decode step at the batch B (`jaxpareto.physics.decode.decode_step`).
        eta_decode, elementwise_overhead: η_d and the memory-time multiplier of eq. 3.
        prefill_tokens: p, prefill tokens in the step.
        prefill_ms_per_token: c_p, eq. 2's TTFT of one token [ms].
        experts: the routed experts the prefill tokens touch beyond the decode batch's
            (`PrefillExperts`); None: none counted (the seed's profile).
    """
    weight_ms, floor_ms = (0.0, 0.0) if experts is None else experts
    if step.t_attention_ms is None:  # the seed's one roofline for the whole step
        memory_ms = (step.t_weight_ms + weight_ms + step.t_kv_ms) * elementwise_overhead / eta_decode
        compute_ms = (step.t_compute_ms + floor_ms) / eta_decode + prefill_tokens * prefill_ms_per_token
        return jnp.maximum(memory_ms, compute_ms) + step.t_fixed_ms
    # per operator: the projections' roofline (the prefill's tokens computing with them), then
    # the decode batch's attention
    memory_ms = (step.t_weight_ms + weight_ms) * elementwise_overhead / eta_decode
    compute_ms = (step.t_compute_ms - step.t_attention_compute_ms + floor_ms) / eta_decode \
        + prefill_tokens * prefill_ms_per_token
    return jnp.maximum(memory_ms, compute_ms) + step.t_attention_ms / eta_decode + step.t_fixed_ms


def step_time(step: DecodeStep, eta_decode: jax.Array, elementwise_overhead: jax.Array,
              prefill_ms_per_token: jax.Array, prefill_experts=None):
    """p -> T(B, p) [ms]: `step_ms` at this step with p prefill tokens, the experts only they
    touch (``prefill_experts``: p -> `PrefillExperts`, or None) included."""
    def t(p):
        return step_ms(step, eta_decode, elementwise_overhead, p, prefill_ms_per_token,
                       None if prefill_experts is None else prefill_experts(p))

    return t


# Gauss-Hermite nodes and weights over a lognormal prompt length (`whole_steps_ms`)
_HERMITE_X, _HERMITE_W = np.polynomial.hermite.hermgauss(16)


def whole_steps_ms(t, tokens: jax.Array, chunk_tokens: jax.Array, prompt_scv: jax.Array,
                   busy: jax.Array) -> jax.Array:
    """The steps of a prompt of a chunk or more, from its first to its last [ms].

    Chunks fill token by token: a prompt of L tokens takes ⌊L / P⌋ full steps and a last one for
    the r = L - ⌊L / P⌋ P tokens left, which the prompts behind it fill to a full step T(B, P)
    with probability ``busy`` and which otherwise runs alone, T(B, r); no last step where r = 0.
    Averaged over the lognormal prompt lengths (squared CV ``prompt_scv``; 0: fixed) by 16-point
    Gauss-Hermite quadrature. Under Poisson arrivals ``busy`` is ρ (M/G/1 departures see what
    arrivals see; Kleinrock, Queueing Systems vol. 1, 1975, section 5.3;
    `jaxpareto.physics.open_engine`); in a lockstep train, the chance that a prompt is not the
    train's last (`synchronised_turn`).

    Args:
        t: p -> T(B, p) [ms]. tokens: the mean L [tokens]. chunk_tokens: P. busy: in [0, 1].

    Returns:
        The mean time from the start of the prompt's first step to the end of its last [ms]:
        ⌊L / P⌋ T(B, P) + T(B, r) with no prompt behind (busy 0), ⌈L / P⌉ T(B, P) with always one.
    """
    dtype = jnp.result_type(tokens, float)  # the quadrature in the point's precision
    nodes, weights = jnp.asarray(np.sqrt(2.0) * _HERMITE_X, dtype), jnp.asarray(_HERMITE_W / np.sqrt(np.pi), dtype)
    sigma = sqrt_or_zero(jnp.log1p(prompt_scv))
    lengths = tokens * jnp.exp(sigma * nodes - 0.5 * sigma * sigma)  # (16,)
    full = jnp.floor(lengths / chunk_tokens)
    rest = lengths - full * chunk_tokens
    full_step = t(chunk_tokens)
    last = jnp.where(rest > 0.0, busy * full_step + (1.0 - busy) * jax.vmap(t)(rest), 0.0)
    return jnp.sum(weights * (full * full_step + last))


def lockstep_share(seen: jax.Array, load: jax.Array, lockstep_ranks=None) -> jax.Array:
    """The share of time a turn decodes in prefill-length steps: ρ' alone, or with D attention-DP
    ranks in lockstep 1 - (1 - ρ')(1 - ρ)^(D - 1) (`shared_turn`, ``lockstep_ranks``)."""
    if lockstep_ranks is None:
        return seen
    return jnp.where(lockstep_ranks > 1, 1.0 - (1.0 - seen) * jnp.power(1.0 - load, lockstep_ranks - 1.0), seen)


#: The fewest prefill tokens a step keeps (a numerical floor, for turns of no prefill at all).
MIN_PREFILL_BUDGET_TOKENS = 1.0


def prefill_budget_tokens(chunk_tokens: jax.Array, decode_tokens: jax.Array, prefill_tokens: jax.Array,
                          osl: jax.Array, decode_in_budget=None) -> jax.Array:
    """P_prefill: the prefill tokens a step of the shared engine may carry [tokens].

    The step's token budget P (vLLM ``max_num_batched_tokens``, TensorRT-LLM ``max_num_tokens``)
    less, where the engine counts them (``decode_in_budget`` 1), the step's decode tokens, one
    per running request: vLLM V1's scheduler schedules its running requests first and prompts
    in the budget left (vllm/v1/core/sched/scheduler.py, ``token_budget``); TensorRT-LLM's
    scheduler counts a generation request's token against ``max_num_tokens`` as a context
    request's (its performance-tuning guide, "Tuning Max Batch Size and Max Num Tokens").

    The decode tokens are the batch B, but at most the D = P OSL / (L + OSL) that the budget
    keeps fed (`fed_decode_batch`): a request decodes OSL steps for every L prefill tokens, so D
    decoding requests need D L / OSL prefill tokens a step, and D + D L / OSL <= P. Sessions
    beyond that wait for their prefill rather than decode (the closed loop counts every session
    of its turn in B), so P - D = P L / (L + OSL) is always left to prefill.

    Args:
        chunk_tokens: P [tokens]. decode_tokens: the step's batch, B [requests].
        prefill_tokens: L, a turn's prefill [tokens]. osl: a turn's output tokens.
        decode_in_budget: 1, 0 (scalars) or None (static: P, no term in the program).
    """
    if decode_in_budget is None:
        return chunk_tokens
    decoding = jnp.minimum(decode_tokens, fed_decode_batch(chunk_tokens, prefill_tokens, osl, decode_in_budget))
    return jnp.maximum(chunk_tokens - decode_in_budget * decoding, MIN_PREFILL_BUDGET_TOKENS)


def fed_decode_batch(chunk_tokens: jax.Array, prefill_tokens: jax.Array, osl: jax.Array,
                     decode_in_budget=None) -> jax.Array:
    """D, the most requests a step of the shared engine can keep decoding [requests].

    A step prefills at most its budget's P' tokens, so at most P' / L requests a step finish
    their prefill and start decoding; each then decodes for OSL steps, so by Little's law over
    steps at most P' OSL / L requests decode at once. Where the engine counts its decode tokens
    against the budget (vLLM, TensorRT-LLM: `prefill_budget_tokens`), P' = P - D, and
    D = P OSL / (L + OSL); elsewhere P' = P and D = P OSL / L.

    In the closed loop (staggered turns), the sessions of B beyond D do not decode: they wait
    for their prefill (the processor-sharing queue of `shared_turn`), so a step carries min(B, D)
    decode tokens, and the throughput levels off at D / (OSL T(D, P')) past saturation, where
    charging every step the tokens of sessions that are not decoding made it fall with C.

    Args:
        chunk_tokens: P [tokens]. prefill_tokens: L, a turn's prefill [tokens] (a turn with
            nothing to prefill is not capped). osl: a turn's output tokens.
        decode_in_budget: 1, 0 (scalars) or None (static: 0).
    """
    counted = 0.0 if decode_in_budget is None else decode_in_budget
    feeding = prefill_tokens + counted * osl
    fed = chunk_tokens * (osl / jnp.where(feeding > 0, feeding, 1.0))
    return jnp.where(prefill_tokens > 0, jnp.maximum(fed, 1.0), jnp.inf)


LOAD_BRACKET = 40.0  # s = -ln(1 - ρ) in [0, 40]: ρ up to 1 - 4e-18


def shared_turn(step: DecodeStep, batch: jax.Array, concurrency: jax.Array, prefill_tokens: jax.Array,
                osl: jax.Array, chunk_tokens: jax.Array, prefill_ms_per_token: jax.Array, eta_decode: jax.Array,
                elementwise_overhead: jax.Array, prefill_experts=None, lockstep_ranks=None,
                load_given: jax.Array | None = None, polish: bool = False) -> EngineTurn:
    """TTFT and TPOT of a turn in the shared engine at batch B (module docstring).

    Args:
        step: the seed's decode step at B.
        batch: B, active sessions [sessions] (> 0).
        concurrency: C_eff, the sessions that generate the load [sessions] (>= 1).
        prefill_tokens: L_prefill of the turn [tokens] (>= 0).
        osl: output tokens per turn [tokens].
        chunk_tokens: P, prefill tokens per step at most [tokens] (> 0).
        prefill_ms_per_token: c_p [ms].
        eta_decode, elementwise_overhead: of eq. 3.
        prefill_experts: p -> the routed experts a step's p prefill tokens touch beyond the
            decode batch's (`PrefillExperts`: the measured profile's prefill roofline); None: none.
        lockstep_ranks: None (one TP group), or D, attention data-parallel ranks of which this
            is one, alike and stepping together: every MoE layer exchanges tokens among all
            D, so a rank's decode step lasts as long as any rank's prefill step, and a turn
            decodes in steps of T_f while its own rank (load ρ') or any of the other D - 1
            (load ρ each, independent) prefills (SGLang's DP attention and DeepSeek-V3's
            deployment separate prefill from decode for this reason: DeepSeek-V3 technical
            report, section 3.4).
        load_given, polish: s = -ln(1 - ρ) given by the joint solve instead of solved here
            (`jaxpareto.physics.roots.inner_root`).

    Returns:
        `EngineTurn`. ρ is the root of X R - B, increasing in s = -ln(1 - ρ), found by
        `jaxpareto.physics.roots.increasing_root` (implicit derivative) unless given.
    """
    t = step_time(step, eta_decode, elementwise_overhead, prefill_ms_per_token, prefill_experts)
    t0 = t(0.0)
    tokens = jnp.maximum(prefill_tokens, 1e-6)  # a turn with nothing to prefill still waits one step
    service = jnp.maximum(tokens / chunk_tokens, 1.0) * t(jnp.minimum(tokens, chunk_tokens))

    # a session does not queue behind, or decode during, its own prefill: by the arrival theorem
    # of closed networks (Lavenberg and Reiser 1980) it sees the load of the other C - 1
    others = 1.0 - 1.0 / jnp.maximum(concurrency, 1.0)

    def turn_at(s):
        rho = -jnp.expm1(-s)
        seen = rho * others
        # tokens a prefill step carries: one prefill's, growing to a full chunk as prefills queue
        # up (1 / (1 - ρ) of them are in the system while one is, for processor sharing)
        per_step = jnp.minimum(chunk_tokens, tokens / (1.0 - seen))
        tf = t(per_step)
        throughput = rho * per_step / tf / tokens  # X [turns per ms]
        mixed = lockstep_share(seen, rho, lockstep_ranks)
        tpot = t0 * tf / (mixed * t0 + (1.0 - mixed) * tf)
        ttft = service / (1.0 - seen)
        return throughput * (ttft + osl * tpot) - batch, EngineTurn(ttft, tpot, rho, service, t0, tf, seen, mixed)

    zero = 0.0 * batch
    root = inner_root(lambda s: turn_at(s)[0], zero, zero + LOAD_BRACKET, load_given, polish)
    return turn_at(root.value)[1]._replace(load_root=root._replace(residual=root.residual / batch))


def synchronised_turn(step: DecodeStep, batch: jax.Array, prefill_tokens: jax.Array, osl: jax.Array,
                      chunk_tokens: jax.Array, prefill_ms_per_token: jax.Array, eta_decode: jax.Array,
                      elementwise_overhead: jax.Array, prefill_experts=None, decode_in_budget=None) -> EngineTurn:
    """TTFT and TPOT when the B sessions' turns start together and stay in lockstep groups
    (``arrivals="synchronised"``; docs/model.md, "How turns fall in time").

    A benchmark at fixed concurrency with fixed prompt and output lengths (``ignore_eos``) starts
    its requests at once. The steps take the burst first-come first-served, P' prefill tokens a
    step: the budget P, less (where the engine counts them, c = 1: `prefill_budget_tokens`) the
    decode tokens of the sessions not in that step's prefill, so a step ends the k prompts with
    k L <= P - c (B - k), k = ⌊(P - c B) / (L - c)⌋. Prompts that end in the same step decode in
    step, end their OSL tokens in the same step and come back together, and prompts that end in
    different steps keep their offset, every request's turn being as long as every other's. The
    burst's G = ⌈B / k⌉ groups (k sessions each, the last r = B - (G - 1) k) therefore persist:
    a group never splits while it fits a step, and one larger than k splits at its next prefill.
    Each group is prefilled in its own step (m = 1 step a group); with E_own the request-weighted
    time of a group's step and T_sum the time of all G groups' steps,

        TTFT = E_own + W T̄_g,   TPOT = [T_sum - E_own - W T̄_g + D T(B, 0)] / (OSL - 1),

    where a request's OSL - 1 decode steps hold the other groups' (G - 1) m steps and
    D = max(OSL - 1 - (G - 1) m, 0) decode steps of no prefill; where the other groups' steps are
    more than that (prefill-bound), the request waits W = (G - 1) m - (OSL - 1) steps of the mean
    group step T̄_g = T_sum / (G m) for its group's turn; there only the OSL - 1 groups decoding
    beside a group's step spend a counted budget, not all B - k, so k is taken at the larger
    budget they leave. A prompt longer than the budget (k = 0) is a train of full steps T(B, P')
    (P' = P - c (B - 1): its own session is not decoding): its tokens fill m = L / P' of them, and
    its TTFT is its ⌊L / P'⌋ whole steps and a last one for the tokens left, which the train's
    next prompt fills to a full step but for the train's last prompt (1 in B), whose last step
    runs alone, T(B, r). Every step is taken at the whole batch B (an upper bound where requests wait),
    and B counts at least one session for the prompts (a time-average B under 1, with a think time
    or on an attention-DP rank, still prefills whole prompts). The
    simulated benchmark, `tests/simulator.py`'s `simulate_closed`, keeps such groups (where a
    budget that is not a multiple of L lets them straddle steps, TTFT is low: docs/model.md); any
    spread of the output lengths breaks them up (``arrivals="staggered"`` is then the steady state).

    Args:
        step: the decode step at the batch B.
        batch: B [sessions] (> 0). prefill_tokens: L per turn [tokens] (> 0).
        osl: output tokens per turn. chunk_tokens: P, the step's token budget.
        prefill_ms_per_token: c_p [ms].
        eta_decode, elementwise_overhead: of eq. 3. prefill_experts: as in `shared_turn`.
        decode_in_budget: as in `prefill_budget_tokens`.
    """
    t = step_time(step, eta_decode, elementwise_overhead, prefill_ms_per_token, prefill_experts)
    tokens = jnp.maximum(prefill_tokens, 1e-6)
    sessions = jnp.maximum(batch, 1.0)  # a prompt is prefilled whole (B under 1: a think time, an attention-DP rank)
    # P': a step's budget less the decode tokens of the sessions not in its prefill, where the
    # engine counts them; a group of g in its prefill leaves B - g decoding, so g fits while
    # g L <= P - c (B - g) (c = 1 counting): k = floor((P - c B) / (L - c))
    budget = prefill_budget_tokens(chunk_tokens, batch, tokens, osl, decode_in_budget)
    counted = 0.0 if decode_in_budget is None else decode_in_budget * jnp.minimum(1.0, batch)
    per_step = jnp.floor(budget / jnp.maximum(tokens - counted, 1e-6))  # k (0: a prompt spans steps)
    decode_steps = jnp.maximum(osl - 1.0, 0.0)  # a request's decode steps after its first token
    # prefill-bound (more other groups than decode steps): only the OSL - 1 groups decoding beside
    # a group's step spend the counted budget, not all B - k, and the budget left grows with them
    bound = jnp.ceil(sessions / jnp.maximum(per_step, 1.0)) - 1.0 > decode_steps
    decoding = jnp.minimum(sessions - jnp.maximum(per_step, 1.0), decode_steps * jnp.maximum(per_step, 1.0))
    wider = jnp.floor(jnp.maximum(chunk_tokens - counted * decoding, 0.0) / tokens)
    per_step = jnp.where(bound & (counted > 0), jnp.maximum(per_step, wider), per_step)
    budget = jnp.maximum(budget + counted, MIN_PREFILL_BUDGET_TOKENS)  # a train's prompt: its own session not decoding
    fits = per_step >= 1.0
    k = jnp.where(fits, per_step, 1.0)
    groups = jnp.ceil(sessions / k)
    last = sessions - (groups - 1.0) * k  # r, the last group's sessions (all B where B <= k)
    full = t(budget)
    spans = tokens / budget  # a longer prompt's share of the train's full steps (m = L / P')
    # a longer prompt: its whole steps, and a last one for the tokens left, which the train's next
    # prompt fills but for the train's last prompt, 1 in B
    train = whole_steps_ms(t, tokens, budget, 0.0, jnp.clip((sessions - 1.0) / sessions, 0.0, 1.0))
    own_ttft = jnp.where(fits, ((groups - 1.0) * k * t(k * tokens) + last * t(last * tokens)) / sessions, train)
    block = jnp.where(fits, (groups - 1.0) * t(k * tokens) + t(last * tokens), sessions * spans * full)  # T_sum
    block_steps = jnp.where(fits, groups, sessions * spans)
    own_steps = jnp.where(fits, 1.0, spans)
    own_in_block = jnp.where(fits, own_ttft, spans * full)
    mean_step = block / block_steps  # T̄_g
    others = block_steps - own_steps  # the other groups' prefill steps in a turn
    waiting = jnp.maximum(others - decode_steps, 0.0)  # W
    free = jnp.maximum(decode_steps - others, 0.0)  # D
    decode = t(0.0)
    ttft = own_ttft + waiting * mean_step
    # (OSL = 1: no decode steps, the other groups' steps all wait; TPOT, of no step, is then a decode
    # step's, as the other engines give it, not 0 and an infinite rate per user)
    decode_time = block - own_in_block - waiting * mean_step + free * decode
    tpot = jnp.where(decode_steps > 0, jnp.maximum(decode_time / jnp.maximum(decode_steps, 1.0), 0.0), decode)
    share = block / (block + free * decode)  # the share of a turn's cycle in steps that carry prefill
    # every request of a group sees the same steps: no chunks land at random in its decode steps
    # (the percentiles' spread of the staggered engine: none here, the steps given as decode steps)
    return EngineTurn(ttft, tpot, share, own_ttft, decode, decode, 0.0 * batch, 0.0 * batch)


def wave_turn(step: DecodeStep, alone: DecodeStep, batch: jax.Array, prefill_tokens: jax.Array, osl: jax.Array,
              chunk_tokens: jax.Array, prefill_ms_per_token: jax.Array, eta_decode: jax.Array,
              elementwise_overhead: jax.Array, prefill_experts=None) -> EngineTurn:
    """TTFT and TPOT when the B sessions' turns start together in an engine that runs waiting
    prefills before any decode step (``arrivals="synchronised"`` with
    `jaxpareto.definitions.engine.Engine` ``prefill_first``; docs/model.md, "How turns fall in time").

    SGLang's scheduler forms a prefill batch whenever prompts wait and runs it before the running
    requests' next decode step ("Run prefill first if possible", ``Scheduler.get_next_batch_to_run``,
    python/sglang/srt/managers/scheduler.py), and its prefill batches carry no decode tokens unless
    ``--enable-mixed-chunk`` is set. A burst of B prompts of L tokens is then one train of prefill
    batches of at most P tokens each (``chunked_prefill_size``; a prompt cut at a batch's end goes
    on in the next), W = B L tokens in all, while decoding waits; the B requests then decode in the
    same steps, end their OSL tokens together and come back together: the burst stays one wave,
    turn after turn (the lockstep groups of `synchronised_turn` form only where decode steps run
    between the groups' prefills). With T_p(p) = T(0, p) a batch of p prefill tokens alone, the
    train takes

        S = ⌊W / P⌋ T_p(P) + T_p(W - ⌊W / P⌋ P)   (its last batch partial, if any),

    and a prompt ends with the batch that holds its last token: the n_f = ⌊⌊W / P⌋ P / L⌋ prompts
    whose last token falls in a full batch end, on average, halfway between the first one's batch,
    ⌈L / P⌉, and their last one's, ⌈n_f L / P⌉ (as many to a batch: exact where L divides P or P
    divides L), and the others with the partial batch, at S:

        TTFT = (n_f / B) T_p(P) (⌈L / P⌉ + ⌈n_f L / P⌉) / 2 + (1 - n_f / B) S,
        TPOT = (S - TTFT) / (OSL - 1) + T(B, 0),

    a request's OSL - 1 decode steps coming after the rest of the train. B counts at least one
    session (one prompt is never prefilled in part). Every request of the wave sees the same
    steps: as in `synchronised_turn` the percentiles spread by the lengths only (the wave's own
    spread of TTFT, from its first batch to S, is not in them), and the turn's R = TTFT + OSL TPOT
    (seed eq. 1) counts one TPOT, which carries (S - TTFT) / (OSL - 1) of the train, more than a
    benchmark's TTFT + (OSL - 1) TPOT: throughput is a third low at OSL 2, 3 % at OSL 16.

    Args:
        step: the decode step at the batch B. alone: the step at a batch of 0 (a prefill batch's
            weights and fixed terms, no decode tokens).
        batch: B [sessions] (> 0). prefill_tokens: L per turn [tokens] (> 0).
        osl: output tokens per turn. chunk_tokens: P, a prefill batch's token budget.
        prefill_ms_per_token: c_p [ms].
        eta_decode, elementwise_overhead: of eq. 3.
        prefill_experts: p -> the routed experts a prefill batch's p tokens touch (`shared_turn`'s,
            taken at a decode batch of 0), or None.
    """
    batch_alone = step_time(alone, eta_decode, elementwise_overhead, prefill_ms_per_token, prefill_experts)
    tokens = jnp.maximum(prefill_tokens, 1e-6)
    budget = jnp.maximum(chunk_tokens, MIN_PREFILL_BUDGET_TOKENS)
    sessions = jnp.maximum(batch, 1.0)  # a prompt is prefilled whole (an attention-DP rank's B may be under 1)
    total = sessions * tokens  # W
    full = jnp.floor(total / budget)
    rest = total - full * budget
    full_batch = batch_alone(budget)
    train = full * full_batch + jnp.where(rest > 0.0, batch_alone(jnp.maximum(rest, 1e-6)), 0.0)  # S
    # the prompts whose last token falls in a full batch, and their batches' mean index
    ended = jnp.minimum(jnp.floor(full * budget / tokens), sessions)  # n_f
    first, last = jnp.ceil(tokens / budget), jnp.ceil(ended * tokens / budget)
    in_full = jnp.where(ended > 0, full_batch * 0.5 * (first + last), 0.0)
    share = ended / sessions
    ttft = share * in_full + (1.0 - share) * train
    decode = step_time(step, eta_decode, elementwise_overhead, prefill_ms_per_token)(0.0)  # T(B, 0)
    decode_steps = jnp.maximum(osl - 1.0, 0.0)
    tpot = jnp.where(decode_steps > 0, (train - ttft) / jnp.maximum(decode_steps, 1.0) + decode, decode)
    prefilling = train / (train + decode_steps * decode)  # the share of a turn's cycle in prefill batches
    return EngineTurn(ttft, tpot, prefilling, ttft, decode, decode, 0.0 * batch, 0.0 * batch)
