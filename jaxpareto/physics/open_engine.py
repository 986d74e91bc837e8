"""The shared engine under Poisson arrivals (``arrivals="poisson"``; docs/model.md, "Open-loop load").

The closed loop's engine (`jaxpareto.physics.engine.shared_turn`) finds the turn rate X that its
batch sustains; in the open loop X is the arrival rate λ, given, and the engine's steps follow
from it directly:

- **Bulk-service prefill steps.** Every step takes, first-come first-served up to the chunk P,
  the prefills that arrived while the step before ran (the bulk service queue of Bailey, J. R.
  Stat. Soc. B 16, 1954, the chunk as the bulk). For prompts under one chunk the prompts j
  waiting at a step are a Markov chain: the step serves s_j = min(j, ⌊P / L⌋) of them, lasts
  T_j = T(B, s_j L) (`jaxpareto.physics.engine.step_ms`), and j' = j - s_j + Poisson(λ T_j):
  long steps beget long steps. Its law π 129 steps after an empty queue (stationary well before
  capacity) gives the mean step T̄ = Σ π_j T_j, the share of time in prefill steps
  m = Σ_{j>=1} π_j T_j / T̄ and their mean length T_f. A prompt of a chunk or more fills its
  steps: m = λ (L / P) T(B, P).
- **TPOT** is the mean step, T̄ = 1 / (m / T_f + (1 - m) / T_0), one token per step (with
  attention-DP ranks in lockstep, m as in `jaxpareto.physics.engine.lockstep_share`).
- **Clusters of prefills.** A request decodes for OSL steps, not for a fixed time, and every
  prefill landing in those steps lengthens them by its marginal time μ (its own steps' excess
  over decode steps, or L dT/dp where it joins a step that carries other prompts, which a prompt
  under one chunk does with probability 1 - e^(-λ T̄)); the extra time brings κ = λ μ further
  prefills on average. The prefills in a request's steps are a Poisson cluster (branching)
  process of index of dispersion F_c = 1 / (1 - κ)² (the total progeny of a Poisson
  Galton-Watson tree of mean offspring κ; Hawkes and Oakes, J. Appl. Prob. 11, 1974), and a
  request, itself one of them, finds (F_c - 1) / 2 more in its own steps than the time average
  (the Palm expectation of a clustered count after one of its points: Daley and Vere-Jones,
  An Introduction to the Theory of Point Processes, 2003, section 6.3): TPOT gains
  (F_c - 1) / 2 x μ / OSL.
- **TTFT** is the prefill's own steps, max(L / P, 1) T_f, plus, arriving while no prefill runs,
  the decode step in progress (T_0 / 2 on average), plus the first-come first-served wait for
  the prefill steps ahead: the M/G/1 (Pollaczek-Khinchine) wait S ρ / (1 - ρ) x (1 + c_S²) / 2
  with S the prefill's time alone (`jaxpareto.physics.queueing`) and ρ the load at full steps
  (below m when several prompts under one chunk share a step).
- **Capacity.** Prefill at full steps serves P / T(B, P) tokens per ms (⌊P / L⌋ prompts per
  T(B, ⌊P / L⌋ L) under one chunk); beyond that the prefill queue grows without bound and the
  point is flagged by the caller.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import gammainc, gammaln

from jaxpareto.physics.decode import DecodeStep
from jaxpareto.physics.engine import EngineTurn, lockstep_share, step_time

_CHAIN_STATES = 16  # prompts waiting at a step: 0 .. 15 (the last: 15 or more)
_CHAIN_SQUARINGS = 7  # the chain's law 1 + 2^7 steps after an empty queue
_LOG_FLOOR, _PROBABILITY_FLOOR = -60.0, 1e-25  # below: 0 (keeps float32 clear of denormals)


class PrefillSteps(NamedTuple):
    """The engine's steps under Poisson arrivals (scalars).

    Attributes:
        mean_step_ms: T̄, the mean step [ms]. decode_step_ms: T_0, a step without prefill [ms].
        mixed_step_ms: T_f, the mean step with prefill [ms]. mixed_share: m, the share of time
            in steps with prefill. per_step_tokens: p, the prefill tokens such a step carries.
        load: the prefill load at full steps, λ L T(B, P) / P, or for prompts under one chunk
            λ T(B, s L) / s with s = ⌊P / L⌋ the prompts a step takes (>= 1: beyond capacity).
    """

    mean_step_ms: jax.Array
    decode_step_ms: jax.Array
    mixed_step_ms: jax.Array
    mixed_share: jax.Array
    per_step_tokens: jax.Array
    load: jax.Array


def prefill_steps(t, rate_per_ms: jax.Array, tokens: jax.Array, chunk_tokens: jax.Array) -> PrefillSteps:
    """The bulk-service chain of the module docstring at arrival rate λ.

    The chain's rows are Poisson probabilities with the last state holding the exact tail
    (regularised incomplete gamma, so float32 rounding does not pile up there); its law after
    2^k steps from an empty queue comes from k squarings of the transition matrix.

    Args:
        t: p -> T(B, p) [ms], a step carrying p prefill tokens.
        rate_per_ms: λ [requests per ms]. tokens: L_prefill [tokens] (> 0). chunk_tokens: P.
    """
    t0, t_full = t(0.0), t(chunk_tokens)
    # prompts under one chunk: the chain of prompts waiting at a step
    counts = jnp.arange(_CHAIN_STATES, dtype=jnp.result_type(tokens, float))
    per_chunk = jnp.maximum(jnp.floor(chunk_tokens / tokens), 1.0)
    served = jnp.minimum(counts, per_chunk)
    step_tokens = jnp.minimum(served * tokens, chunk_tokens)
    durations = jax.vmap(t)(step_tokens)
    arrivals = rate_per_ms * durations
    carried = counts - served
    new = counts[None, :] - carried[:, None]  # arrivals that take the chain from j to k
    logs = new * jnp.log(jnp.maximum(arrivals, 1e-30))[:, None] - arrivals[:, None] - gammaln(jnp.maximum(new, 0.0) + 1.0)
    # probabilities below e^-60 are dropped: float32 denormals would slow the CPU a hundredfold
    moves = jnp.where((new >= 0) & (logs > _LOG_FLOOR), jnp.exp(jnp.maximum(logs, _LOG_FLOOR)), 0.0)
    last = counts[-1] - carried  # the last state: at least this many arrivals
    tail = jnp.where(last >= 1.0, gammainc(jnp.maximum(last, 1.0), jnp.maximum(arrivals, 1e-30)), 1.0)
    moves = jnp.concatenate([moves[:, :-1], tail[:, None]], axis=1)
    power = moves
    for _ in range(_CHAIN_SQUARINGS):
        power = power @ power
        power = jnp.where(power > _PROBABILITY_FLOOR, power, 0.0)
    law = moves[0] @ power  # 1 + 2^k steps after an empty queue
    law = law / jnp.sum(law)
    busy = jnp.maximum(jnp.sum(law[1:]), 1e-30)
    chain_time = jnp.sum(law * durations)
    chain_mixed = jnp.sum(law[1:] * durations[1:]) / busy
    chain_share = busy * chain_mixed / chain_time
    chain_tokens = jnp.sum(law[1:] * step_tokens[1:]) / busy
    # a chunk or more: full-chunk steps, L / P of them per prompt; under one: ⌊P / L⌋ prompts a step
    whole = tokens >= chunk_tokens
    load = jnp.where(whole, rate_per_ms * tokens * t_full / chunk_tokens, rate_per_ms * durations[-1] / per_chunk)
    share = jnp.where(whole, jnp.clip(load, 0.0, 1.0), chain_share)
    mixed = jnp.where(whole, t_full, chain_mixed)
    mean = 1.0 / (share / mixed + (1.0 - share) / t0)
    return PrefillSteps(mean, t0, mixed, share, jnp.where(whole, chunk_tokens, chain_tokens), load)


def poisson_turn(step: DecodeStep, rate_per_ms: jax.Array, prefill_tokens: jax.Array, osl: jax.Array,
                 chunk_tokens: jax.Array, prefill_ms_per_token: jax.Array, eta_decode: jax.Array,
                 elementwise_overhead: jax.Array, wait_scale: jax.Array, extra_weight_ms=None,
                 lockstep_ranks=None) -> EngineTurn:
    """TTFT and TPOT of a request in the shared engine under Poisson arrivals (module docstring).

    Args:
        step: the seed's decode step at the batch a request sees, B + 1.
        rate_per_ms: λ, requests per ms (> 0). prefill_tokens: L_prefill [tokens] (>= 0).
        osl: output tokens [tokens]. chunk_tokens: P [tokens] (> 0). prefill_ms_per_token: c_p [ms].
        eta_decode, elementwise_overhead: of eq. 3.
        wait_scale: (1 + c_S²) / 2 of the prefill sizes (`jaxpareto.physics.queueing.fcfs_wait_scale`).
        extra_weight_ms, lockstep_ranks: as in `jaxpareto.physics.engine.shared_turn`.

    Returns:
        `EngineTurn`, with ``prefill_load`` m and ``seen_load`` the queue's ρ (both 1 where the
        load at full steps is >= 1: beyond capacity) and ``dispersion`` F_c.
    """
    t = step_time(step, eta_decode, elementwise_overhead, prefill_ms_per_token, extra_weight_ms)
    tokens = jnp.maximum(prefill_tokens, 1e-6)  # a turn with nothing to prefill still waits one step
    steps = prefill_steps(t, rate_per_ms, tokens, chunk_tokens)
    t0, tf, share = steps.decode_step_ms, steps.mixed_step_ms, steps.mixed_share
    stable = steps.load < 1.0
    share = jnp.where(stable, share, 1.0)
    safe = jnp.where(stable, share, 0.5)
    mixed = lockstep_share(safe, safe, lockstep_ranks)
    tpot = t0 * tf / (mixed * t0 + (1.0 - mixed) * tf)

    own_steps = jnp.maximum(tokens / chunk_tokens, 1.0)
    single = jnp.minimum(tokens, chunk_tokens)
    service = own_steps * t(single)
    # one more prefill: its own steps' excess over decode steps, or its tokens' compute in a step
    # it shares (a prompt under one chunk finds λ T̄ others there, Poisson)
    joins = jnp.where(tokens < chunk_tokens, -jnp.expm1(-rate_per_ms * steps.mean_step_ms), 0.0)
    per_token = jax.jvp(t, (steps.per_step_tokens,), (jnp.ones_like(steps.per_step_tokens),))[1]
    marginal = (1.0 - joins) * (service - own_steps * t0) + joins * tokens * per_token
    dispersion = 1.0 / (1.0 - jnp.clip(rate_per_ms * marginal, 0.0, 0.999)) ** 2
    tpot = tpot + 0.5 * (dispersion - 1.0) * marginal / jnp.maximum(osl, 1.0)

    # the prefill's own steps, the decode step in progress when none runs, and the M/G/1 wait at
    # the load of full steps (several prompts under one chunk share a step)
    busy = jnp.where(stable, jnp.clip(steps.load, 0.0, 1.0), 0.5)
    alone = own_steps * tf + (1.0 - safe) * 0.5 * t0
    ttft = alone + wait_scale * service * busy / (1.0 - busy)
    # beyond the prefill capacity the queue grows without bound: no finite latency (the batch's
    # fixed-point iteration stops there and the caller flags the point)
    ttft, tpot = jnp.where(stable, ttft, jnp.inf), jnp.where(stable, tpot, jnp.inf)
    return EngineTurn(ttft, tpot, share, alone, t0, tf, jnp.where(stable, busy, 1.0), mixed, dispersion)


def saturated_tpot_ms(full: DecodeStep, slots: jax.Array, prefill_tokens: jax.Array, osl: jax.Array,
                      chunk_tokens: jax.Array, prefill_ms_per_token: jax.Array, eta_decode: jax.Array,
                      elementwise_overhead: jax.Array, extra_weight_ms=None) -> jax.Array:
    """TPOT with every one of the M KV slots busy and each request that leaves replaced at once [ms].

    A request's OSL steps then carry the prefills of the M - 1 requests that replace the others,
    W = (M - 1) L_prefill tokens: in steps of p = clip(W / OSL, min(L, P), P) tokens (prompts
    share steps while they fit a chunk), k = min(W / p, OSL) of them, the rest decode steps, all
    at the full batch M:

        TPOT_sat = (k T(M, p) + (OSL - k) T(M, 0)) / OSL.

    No request's TPOT passes it (`jaxpareto.physics.percentiles`).

    Args:
        full: the decode step at the batch M. slots: M. prefill_tokens: L_prefill [tokens].
        osl: output tokens. chunk_tokens: P. prefill_ms_per_token: c_p [ms].
        eta_decode, elementwise_overhead, extra_weight_ms: as in `poisson_turn`.
    """
    t = step_time(full, eta_decode, elementwise_overhead, prefill_ms_per_token, extra_weight_ms)
    window_tokens = jnp.maximum(slots - 1.0, 0.0) * prefill_tokens
    steps_out = jnp.maximum(osl, 1.0)
    per_step = jnp.clip(window_tokens / steps_out, jnp.minimum(prefill_tokens, chunk_tokens), chunk_tokens)
    steps = jnp.minimum(window_tokens / jnp.maximum(per_step, 1e-9), steps_out)
    return (steps * t(per_step) + (steps_out - steps) * t(0.0)) / steps_out
