"""The shared engine under Poisson arrivals (``arrivals="poisson"``; docs/model.md, "Open-loop load").

The closed loop's engine (`jaxpareto.physics.engine.shared_turn`) finds the turn rate X that its
batch sustains; in the open loop X is the arrival rate λ, given, and the engine's steps follow
from it directly:

- **Bulk-service prefill steps.** Every step takes, first-come first-served up to the chunk P,
  the prefills that arrived while the step before ran (the bulk service queue of Bailey, J. R.
  Stat. Soc. B 16, 1954, the chunk as the bulk). For prompts under one chunk the prompts j
  waiting at a step are a Markov chain: a step with fewer than a chunk's tokens waiting ends all
  j of them in T_j = T(B, j L) (`jaxpareto.physics.engine.step_ms`); a fuller one takes a chunk
  first-come first-served, token by token, and ends s = P / L prompts on average in
  T_j = T(B, P): ⌊s⌋ of them, or ⌈s⌉ as often as the fraction of s (the chunk's end moves
  across the prompts), so the chain drifts as the queue of tokens does. Then
  j' = j - s_j + Poisson(λ T_j): long steps beget long steps. With spread prompt lengths T_j is
  random (squared CV k_j, from its variance over the lengths, below) and the arrivals in it are Poisson of a random mean,
  taken as negative binomial of mean λ T_j and variance λ T_j (1 + λ T_j k_j) (a gamma-mixed
  Poisson; Greenwood and Yule, J. R. Stat. Soc. 83, 1920). Its law π 129 steps after an empty
  queue (stationary well before capacity) gives the mean step T̄ = Σ π_j T_j, the share of time
  in prefill steps m = Σ_{j>=1} π_j T_j / T̄ and their mean length T_f. A prompt of a chunk or
  more fills its steps: m = λ (L / P) T(B, P).
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
- **TTFT**, for a prompt of a chunk or more: its own steps, (L / P) T(B, P), plus, arriving
  while no prefill runs, the decode step in progress (T_0 / 2 on average; none where the engine
  is idle, which a prompt finds with probability exp(-(B + λ S)), the requests in their turn
  taken as Poisson: at a vanishing rate TTFT is the lone prefill's), plus the
  first-come first-served wait for the prefill steps ahead: the M/G/1 (Pollaczek-Khinchine)
  wait S ρ / (1 - ρ) x (1 + c_S²) / 2 with S the prefill's time alone
  (`jaxpareto.physics.queueing`) and ρ the load at full steps; with arrivals more regular than
  Poisson (``arrival_scv`` c_a² < 1) that wait, and the chain's full steps under one chunk, are
  scaled by the GI/G/1 ratio `jaxpareto.physics.queueing.renewal_wait_factor` (the chain's own
  counts stay Poisson). Its own steps are whole steps,
  not L / P of them: chunks fill token by token, so it takes ⌊L / P⌋ full steps and a last one
  for the r tokens left, which the prompts behind it fill to a full step as often as there are
  some (ρ: in M/G/1 departures see what arrivals see; Kleinrock, Queueing Systems vol. 1, 1975,
  section 5.3) and which otherwise runs alone, T(B, r), averaged over the prompt lengths
  (`jaxpareto.physics.engine.whole_steps_ms`).
- **TTFT under one chunk**, from the chain's law π (the bulk-service queue's waiting time,
  Bailey 1954; Chaudhry and Templeton, A First Course in Bulk Queues, 1983, ch. 4): a prompt
  arriving in any step, with or without prefill, waits for it to end, the residual of a
  length-biased step Σ π_j E[T_j²] / (2 Σ π_j T_j) (times the chance that the engine runs one,
  as above); it is then served in a step that carries
  it, which a step serving s_j prompts is s_j times as likely to be (Σ π_j s_j T_j / Σ π_j s_j);
  and the c_j prompts carried past that step plus the A that arrived before it in the same step
  (a Poisson count of a uniform share of λ T_j), x tokens in all, hold it ⌈(x + L_own) / P⌉ - 1
  full steps more (chunks fill token by token; L_own lognormal of the prompts' spread); a step
  that its own length carries it past costs T(B, P) less what taking a chunk's tokens out of
  the serving step saves (that step holds the whole mean length; at least T_0). The
  prompt lengths' spread enters the steps' second moments as the variance of T(B, p) over a
  lognormal p of the step's tokens and standard deviation σ_j, σ_j² = s_j Var(L), by 8-point
  Gauss-Hermite quadrature: T is flat while the decode batch's weight reads hide a prefill and
  rises past that kink, so a symmetric secant over ±σ_j (the earlier form) saw the flat part and
  missed the long prompts' tail, more so as the batch grew (a mixture of experts' P99 TTFT fell
  with the rate).
  The chain stops at 15 waiting prompts, so near capacity with one or two prompts a chunk
  this wait is short of the simulated one (docs/model.md, "Open-loop load"). With prefix-cache
  hits the chain runs on the mean prompt; the spread of sizes between hits and misses (the
  mix's c_S² less the prompts' own ``isl_cv``², which the chain takes) adds its share of the
  M/G/1 wait, λ Var(S) / (2 (1 - ρ)) with S a prompt's time at full steps (Pollaczek-Khinchine's
  mean wait is linear in E[S²]): a hit that finds a miss's prefill under way waits for its
  chunks, not for an average prompt's. The chance of waiting stays the chain's. The percentiles
  take the step in progress and the serving step as a service of the chain's variance (the
  prompt lengths' share included), and the full steps more as the queueing wait, with
  P(wait > 0) the chance of being carried; both split by whether a prompt arrives in a step that
  carries prefill (the states j >= 1) or not (`ArrivalSplit`).
- **Capacity.** Prefill at full steps serves P / T(B, P) tokens per ms (P / L prompts per
  T(B, P) under one chunk, as a queue of tokens); beyond that the prefill queue grows without
  bound and the point is flagged by the caller.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from jaxpareto.physics.decode import DecodeStep
from jaxpareto.physics.engine import EngineTurn, lockstep_share, step_time, whole_steps_ms
from jaxpareto.physics.numerics import sqrt_or_zero
from jaxpareto.physics.queueing import pollaczek_khinchine_ms, renewal_wait_factor

_CHAIN_STATES = 16  # prompts waiting at a step: 0 .. 15 (the last: 15 or more)
# 8-point Gauss-Hermite nodes (scaled to a standard normal) and weights: a step's spread over
# its tokens (`_step_variance`)
_HERMITE_8 = np.polynomial.hermite.hermgauss(8)
_SPREAD_NODES, _SPREAD_WEIGHTS = np.sqrt(2.0) * _HERMITE_8[0], _HERMITE_8[1] / np.sqrt(np.pi)
_CARRY_STEPS = 4  # full steps a prompt's own length can carry it past (beyond those ahead of it)
_CHAIN_SQUARINGS = 7  # the chain's law 1 + 2^7 steps after an empty queue
_WAIT_CEILING = 1.0 - 1e-6  # P(wait) of a stable queue stays below 1, which flags instability
_TAIL_TERMS, _TAIL_SMALL = 16, 1e-3  # a negative binomial tail below 1e-3: 16 terms summed, then a geometric rest
_POISSON_TAIL_SMALL = 1e-2  # a Poisson one below 1e-2 (its terms' ratios fall: 16 of them reach 1e-5 of it)
_LOG_FLOOR, _PROBABILITY_FLOOR = -60.0, 1e-25  # below: 0 (keeps float32 clear of denormals)
_LOG_FACTORIALS = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, _CHAIN_STATES + 1)))])  # log n!, n = 0 .. 16


class PrefillSteps(NamedTuple):
    """The engine's steps under Poisson arrivals (scalars).

    Attributes:
        mean_step_ms: T̄, the mean step [ms]. decode_step_ms: T_0, a step without prefill [ms].
        mixed_step_ms: T_f, the mean step with prefill [ms]. mixed_share: m, the share of time
            in steps with prefill. per_step_tokens: p, the prefill tokens such a step carries.
        load: the prefill load at full steps, λ L T(B, P) / P, or for prompts under one chunk
            λ T(B, P) / s with s = P / L the prompts a full step ends (>= 1: beyond capacity).
        step_wait_ms: the mean wait for the step in progress [ms]. own_step_ms: the mean step
            that serves a prompt [ms]. overflow_ms: under one chunk, the mean wait for the full
            steps a prompt is carried past [ms]. service_scv: under one chunk, the squared CV of
            the step in progress plus the serving step, the prompt lengths' share included (0 for
            a chunk or more).
        wait_probability: P(a prompt waits for prompts ahead): ρ for a chunk or more, the
            chance of being carried past a step under one chunk (below 1).
        split: `ArrivalSplit`, the waits by the kind of step a prompt arrives in (under one
            chunk; for a chunk or more its share of steps with prefill is 0).
    """

    mean_step_ms: jax.Array
    decode_step_ms: jax.Array
    mixed_step_ms: jax.Array
    mixed_share: jax.Array
    per_step_tokens: jax.Array
    load: jax.Array
    step_wait_ms: jax.Array
    own_step_ms: jax.Array
    overflow_ms: jax.Array
    service_scv: jax.Array
    wait_probability: jax.Array
    split: ArrivalSplit


class ArrivalSplit(NamedTuple):
    """Where a prompt under one chunk arrives, for the percentiles (scalars): in a step that
    carries prefill (the chain's states j >= 1) or not (a decode step, or an idle engine).

    Attributes:
        prefill_share: p_f, the chance of arriving in a step with prefill (0 for a prompt of a
            chunk or more, where the M/G/1 wait holds that case).
        prefill_wait_ms, prefill_wait_variance: the mean and variance of the wait for the step in
            progress given that it carries prefill [ms, ms²].
        other_wait_ms, other_wait_variance: the same given that it does not [ms, ms²].
        wait_variance: the wait's variance over both [ms²].
        prefill_carried: P(carried past a step, and arrived in a step with prefill).
        prefill_overflow_share: the share of the mean wait for the steps a prompt is carried past
            (the chain's ``overflow_ms``) that falls to prompts arrived in a step with prefill.
        carried: P(a prompt waits for prompts ahead), either kind (set by `poisson_turn`).
        queue_wait_ms: the mean wait for prompts ahead, either kind (set by `poisson_turn`: the
            carried steps scaled by the arrivals' regularity, or M/G/1's) [ms].

    (The wait for a KV slot, every kind's alike, is the turn's: `jaxpareto.physics.percentiles.TurnSpread`.)
    """

    prefill_share: jax.Array
    prefill_wait_ms: jax.Array
    prefill_wait_variance: jax.Array
    other_wait_ms: jax.Array
    other_wait_variance: jax.Array
    wait_variance: jax.Array
    prefill_carried: jax.Array
    prefill_overflow_share: jax.Array
    carried: jax.Array = 0.0
    queue_wait_ms: jax.Array = 0.0


class _ChainWaits(NamedTuple):
    step_wait_ms: jax.Array
    own_step_ms: jax.Array
    service_scv: jax.Array
    overflow_ms: jax.Array
    wait_probability: jax.Array
    split: ArrivalSplit


def _step_arrivals(new, last, arrivals, dispersion):
    """The chain's transition probabilities: P(n prompts arrive in a step of state j), n = ``new``
    (shape (16, 16), negative: impossible), the last column P(n >= ``last``) (shape (16,));
    ``arrivals`` λT_j (> 0).

    A step of fixed length T_j takes Poisson(λ T_j). Prompts of spread lengths make T_j random, of
    squared CV k_j = ``dispersion``: the count is then Poisson of a random mean, taken as gamma
    distributed with the step's two moments, which makes it negative binomial of shape 1 / k_j,
    mean λ T_j and variance λ T_j (1 + λ T_j k_j) (Greenwood and Yule, J. R. Stat. Soc. 83, 1920).
    Its log-probabilities are written so that k_j = 0 is Poisson's exactly."""
    mean = arrivals[:, None]
    k = dispersion[:, None]
    count = jnp.maximum(new, 0.0)
    # log Γ(n + 1/k) - log Γ(1/k) - n log(1/k) = Σ_{i<n} log(1 + i k), less log n!: a running
    # sum over i per row, taken at each n (a gather; summing under a (j, n, i) mask cost a
    # batched product of 16-term dots)
    steps = jnp.arange(_CHAIN_STATES, dtype=mean.dtype)
    rises = jnp.cumsum(jnp.log1p(steps[None, :-1] * k), axis=1)  # Σ_{i<n}, n = 1 .. 15
    per_count = jnp.concatenate([jnp.zeros_like(k), rises], axis=1) - \
        jnp.asarray(_LOG_FACTORIALS[:_CHAIN_STATES], mean.dtype)[None, :]
    rising = jnp.take_along_axis(per_count, count.astype(jnp.int32), axis=1)
    c = mean * k
    # (1/k) log(1 + λT k), its Poisson limit λT as k -> 0 taken by series
    exponent = jnp.where(c > 1e-4, jnp.log1p(c) / jnp.where(c > 1e-4, k, 1.0), mean * (1.0 - c / 2.0 + c * c / 3.0))
    logs = rising + count * (jnp.log(mean) - jnp.log1p(c)) - exponent
    # probabilities below e^-60 are dropped: float32 denormals would slow the CPU a hundredfold
    moves = jnp.where((new >= 0) & (logs > _LOG_FLOOR), jnp.exp(jnp.maximum(logs, _LOG_FLOOR)), 0.0)
    # the last state's tail where it is small summed upward from its first term, not taken as
    # 1 - the rest (float32 rounding would pile up there): by the terms' ratio (n + 1/k) q / (n + 1)
    # (Poisson's λT / (n + 1) at k = 0) over _TAIL_TERMS terms and a geometric rest
    least = jnp.maximum(last, 1.0)
    tail = _upper_tail(moves[:, -1], jnp.sum(moves[:, :-1], axis=1), least, mean[:, 0], k[:, 0],
                       jnp.where(dispersion > 0.0, _TAIL_SMALL, _POISSON_TAIL_SMALL))
    return moves, jnp.where(last >= 1.0, jnp.minimum(tail, 1.0), 1.0)


def _upper_tail(first, below, least, mean, dispersion, small=_TAIL_SMALL):
    """P(N >= n_0) of a negative binomial count N of mean λT = ``mean`` and squared-CV mixing
    ``dispersion`` k (Poisson at k = 0), from its first term P(N = n_0) = ``first`` and
    P(N < n_0) = ``below`` (n_0 = ``least``; each of shape (j,)).

    Where the tail is small it is summed upward: the terms' ratio (n + 1/k) q / (n + 1), q =
    λT k / (1 + λT k), over `_TAIL_TERMS` terms, then a geometric rest at the last ratio (or q,
    the ratio's limit, if larger); where it is not (P(N < n_0) below 1 - ``small``:
    `_TAIL_SMALL`, or `_POISSON_TAIL_SMALL` for Poisson's, whose ratios fall faster),
    1 - P(N < n_0). Either is within 2e-4 of the tail in float32 (1.1e-4 at worst, just short
    of the switch to 1 - P(N < n_0), on scans of 20,000 means up to 60). Sums of positive terms, with
    none of the incomplete gamma function's iterations (`jax.scipy.special.gammainc`'s, two
    thirds of the chain's time when it gave the Poisson tails)."""
    c = mean * dispersion
    n = least[:, None] + jnp.arange(_TAIL_TERMS, dtype=mean.dtype)[None, :]
    ratios = mean[:, None] * (1.0 + n * dispersion[:, None]) / ((1.0 + c[:, None]) * (n + 1.0))
    terms = jnp.cumprod(jnp.concatenate([jnp.ones_like(c)[:, None], ratios[:, :-1]], axis=1), axis=1)
    last = ratios[:, -1]
    rest = terms[:, -1] * last / (1.0 - jnp.minimum(jnp.maximum(last, c / (1.0 + c)), 0.99))
    return jnp.where(below < 1.0 - small, 1.0 - below, first * (jnp.sum(terms, axis=1) + rest))


def _poisson_tails(arrivals):
    """P(N >= a + 1) for a = 0 .. 15 and N ~ Poisson(λT_j), ``arrivals`` λT_j > 0 (shape (j,);
    the result (j, 16)): P(N >= 16) by `_upper_tail`, plus the terms between, summed downward.
    (At λT = 0 the term 0 log 0 is NaN and dropped, giving tails of 1: the chain floors λT.)"""
    counts = jnp.arange(_CHAIN_STATES + 1, dtype=arrivals.dtype)
    log_factorials = jnp.asarray(_LOG_FACTORIALS, arrivals.dtype)[None, :]
    logs = counts[None, :] * jnp.log(arrivals)[:, None] - arrivals[:, None] - log_factorials
    terms = jnp.where(logs > _LOG_FLOOR, jnp.exp(jnp.maximum(logs, _LOG_FLOOR)), 0.0)  # P(N = n), n = 0 .. 16
    top = _upper_tail(terms[:, -1], jnp.sum(terms[:, :-1], axis=1), jnp.full_like(arrivals, _CHAIN_STATES),
                      arrivals, jnp.zeros_like(arrivals), _POISSON_TAIL_SMALL)
    # P(N >= a + 1) = P(N >= 16) + Σ_{a < n < 16} P(N = n)
    between = jnp.cumsum(terms[:, _CHAIN_STATES - 1:0:-1], axis=1)[:, ::-1]  # Σ_{n = a + 1}^{15}, a = 0 .. 14
    return top[:, None] + jnp.concatenate([between, jnp.zeros_like(top)[:, None]], axis=1)


def _chain_waits(law, durations, relief, spread, arrivals, chain_time, counts, served, tokens, chunk_tokens,
                 prompt_scv, t0, t_full, running) -> _ChainWaits:
    """A prompt's waits under one chunk from the chain's law (module docstring), the fields of
    `PrefillSteps` of those names; the arrays are over the chain's states j (shape (16,)),
    ``relief`` T_j less T_j without a chunk's tokens, ``spread`` the steps' variance from the
    prompts' lengths, ``arrivals`` λT_j and ``chain_time`` Σ π_j T_j as `prefill_steps` has them,
    ``running`` the chance that the engine runs a step at all."""
    # the step in progress, length-biased: E[T²] / 2E[T], and E[(U T)²] = E[T³] / 3E[T]; none
    # where the engine is idle. Split by whether the step carries prefill (j >= 1) or not
    with_prefill = (jnp.arange(law.shape[0]) >= 1).astype(law.dtype)
    wait_terms = running * law * (durations ** 2 + spread) / (2.0 * chain_time)
    square_terms = running * law * durations * (durations ** 2 + 3.0 * spread) / (3.0 * chain_time)
    step_wait, wait_square = jnp.sum(wait_terms), jnp.sum(square_terms)
    # the step that serves the prompt: the law weighted by the prompts a step serves
    prompts = law * served
    total = jnp.sum(prompts)
    some = total > 0.0
    own = jnp.where(some, jnp.sum(prompts * durations) / jnp.maximum(total, 1e-30), durations[1])
    own_square = jnp.where(some, jnp.sum(prompts * (durations ** 2 + spread)) / jnp.maximum(total, 1e-30),
                           durations[1] ** 2)
    own_relief = jnp.where(some, jnp.sum(prompts * relief) / jnp.maximum(total, 1e-30), relief[1])
    # the two taken as independent: their variances add
    variance = jnp.maximum(wait_square - step_wait ** 2, 0.0) + jnp.maximum(own_square - own ** 2, 0.0)
    # the prompts ahead: the c_j carried past the step in progress plus the A that arrived
    # before it in that step (P(A = a) = P(N >= a + 1) / λT_j, N ~ Poisson(λT_j)); the chunks
    # fill token by token, so with x their tokens the prompt ends ⌈(x + L_own) / P⌉ - 1 full
    # steps after the next, L_own lognormal of the prompts' spread
    before = _poisson_tails(arrivals) / arrivals[:, None]  # (j, a)
    before = jnp.where(arrivals[:, None] > 1e-6, before, (counts[None, :] == 0).astype(before.dtype))
    ahead = (counts - served)[:, None] * tokens + counts[None, :] * tokens
    full = jnp.floor(ahead / chunk_tokens)
    rest = ahead - full * chunk_tokens
    sigma = sqrt_or_zero(jnp.log1p(prompt_scv))

    def longer(x):  # P(L_own > x)
        z = (jnp.log(jnp.maximum(x, 1e-30) / tokens) + 0.5 * sigma ** 2) / jnp.maximum(sigma, 1e-30)
        return jnp.where(x <= 0.0, 1.0, jnp.where(sigma > 0.0, ndtr(-z), (tokens > x).astype(z.dtype)))

    tails = [longer(k * chunk_tokens - rest) for k in range(1, _CARRY_STEPS + 1)]
    landing = law * durations / chain_time  # the step a Poisson arrival lands in
    weights = landing[:, None] * before
    # the serving step already holds all of the prompt's mean length: a step its own length
    # carries it past adds the step less the tokens that moved out of the serving step
    carry_step = jnp.maximum(t_full - own_relief, t0)
    overflow_terms = jnp.sum(weights * (full * t_full + sum(tails) * carry_step), axis=1)
    carried_terms = jnp.sum(weights * jnp.maximum(jnp.minimum(full, 1.0), tails[0]), axis=1)
    overflow, carried = jnp.sum(overflow_terms), jnp.sum(carried_terms)
    # the same, given the kind of step a prompt arrives in (PASTA: the steps' share of time)
    share = running * jnp.sum(with_prefill * landing)
    safe_share, safe_other = jnp.maximum(share, 1e-30), jnp.maximum(1.0 - share, 1e-30)
    prefill_wait = jnp.sum(with_prefill * wait_terms) / safe_share
    other_wait = jnp.sum((1.0 - with_prefill) * wait_terms) / safe_other
    split = ArrivalSplit(share, prefill_wait,
                         jnp.maximum(jnp.sum(with_prefill * square_terms) / safe_share - prefill_wait ** 2, 0.0),
                         other_wait,
                         jnp.maximum(jnp.sum((1.0 - with_prefill) * square_terms) / safe_other - other_wait ** 2, 0.0),
                         jnp.maximum(wait_square - step_wait ** 2, 0.0),
                         jnp.sum(with_prefill * carried_terms),
                         jnp.sum(with_prefill * overflow_terms) / jnp.maximum(overflow, 1e-30))
    return _ChainWaits(step_wait, own, variance / (step_wait + own) ** 2, overflow,
                       jnp.clip(carried, 0.0, _WAIT_CEILING), split)


def _step_variance(t, step_tokens: jax.Array, sigma: jax.Array) -> jax.Array:
    """Var T(B, p) [ms²] over a lognormal p of mean ``step_tokens`` and standard deviation
    ``sigma`` (shape (states,) both), by Gauss-Hermite quadrature in log p (module docstring)."""
    dtype = jnp.result_type(step_tokens, float)
    nodes, weights = jnp.asarray(_SPREAD_NODES, dtype)[None, :], jnp.asarray(_SPREAD_WEIGHTS, dtype)[None, :]
    log_sd = sqrt_or_zero(jnp.log1p((sigma / jnp.maximum(step_tokens, 1e-30)) ** 2))[:, None]
    tokens = step_tokens[:, None] * jnp.exp(log_sd * nodes - 0.5 * log_sd ** 2)  # (states, nodes)
    times = jax.vmap(jax.vmap(t))(tokens)
    mean = jnp.sum(weights * times, axis=1)
    return jnp.where(sigma > 0.0, jnp.maximum(jnp.sum(weights * times ** 2, axis=1) - mean ** 2, 0.0), 0.0)


def prefill_steps(t, rate_per_ms: jax.Array, tokens: jax.Array, chunk_tokens: jax.Array,
                  prompt_scv: jax.Array = 0.0, running: jax.Array = 1.0) -> PrefillSteps:
    """The bulk-service chain of the module docstring at arrival rate λ.

    The chain's rows are the arrivals in a step (`_step_arrivals`: Poisson, or negative binomial
    where the prompts' spread lengths make the step's length random) with the last state holding
    the tail, summed so that float32 keeps its small values; its law after 2^k steps from an empty queue comes from k squarings of the
    transition matrix.

    Args:
        t: p -> T(B, p) [ms], a step carrying p prefill tokens.
        rate_per_ms: λ [requests per ms]. tokens: L_prefill [tokens] (> 0). chunk_tokens: P.
        prompt_scv: the prompt lengths' squared coefficient of variation around their mean
            (``isl_cv``², each hit/miss kind's own: not the two kinds' mix).
        running: the chance that a prompt finds the engine running a step (1: always; an idle
            engine has no step in progress to wait for).
    """
    t0, t_full = t(0.0), t(chunk_tokens)
    # prompts under one chunk: the chain of prompts waiting at a step
    counts = jnp.arange(_CHAIN_STATES, dtype=jnp.result_type(tokens, float))
    # a full step takes P tokens first-come first-served, s = P / L prompts on average: it ends
    # ⌊s⌋ prompts, or ⌈s⌉ as often as the fraction f of s (the chunk's end moving across the
    # prompts), so the chain's drift and capacity are the token queue's
    per_chunk = jnp.maximum(chunk_tokens / tokens, 1.0)
    fewer = jnp.floor(per_chunk)
    fraction = per_chunk - fewer
    full_step = counts >= fewer + jnp.where(fraction > 0.0, 1.0, 0.0)  # a chunk's tokens or more waiting
    served = jnp.where(full_step, per_chunk, counts)  # mean prompts a step ends
    step_tokens = jnp.minimum(served * tokens, chunk_tokens)
    steps_of = jax.vmap(t)
    durations = steps_of(step_tokens)
    # a step's spread from its prompts' lengths: T's variance over its tokens, of standard
    # deviation σ = sqrt(served x Var(L)) (quadrature: T(p) has a kink where the step turns
    # compute-bound, which a tangent or a symmetric secant misjudges)
    variance = served * prompt_scv
    sigma = sqrt_or_zero(variance) * tokens
    spread = _step_variance(t, step_tokens, sigma)
    # what taking a chunk's tokens out of a step saves it (the carried prompt's own tokens)
    relief = durations - steps_of(jnp.maximum(step_tokens - chunk_tokens, 0.0))
    arrivals = jnp.maximum(rate_per_ms * durations, 1e-30)  # λT_j, kept off 0 for the logs
    carried = counts - jnp.where(full_step, fewer, counts)  # a step ending ⌊s⌋ (all where not full)
    moves, tail = _step_arrivals(counts[None, :] - carried[:, None], counts[-1] - carried, arrivals,
                                 spread / durations ** 2)
    # ending one prompt more takes one arrival more to each state: the same row a column on, its
    # tail less the last term (P(N >= n + 1) = P(N >= n) - P(N = n))
    more = jnp.where(full_step, fraction, 0.0)[:, None]  # P(a step ends ⌈s⌉)
    fewer_rows = jnp.concatenate([moves[:, :-1], tail[:, None]], axis=1)
    more_rows = jnp.concatenate([moves[:, 1:], jnp.maximum(tail - moves[:, -1], 0.0)[:, None]], axis=1)
    moves = (1.0 - more) * fewer_rows + more * more_rows
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
    waits = _chain_waits(law, durations, relief, spread, arrivals, chain_time, counts, served, tokens, chunk_tokens,
                         prompt_scv, t0, t_full, running)
    # the load at full steps, as a queue of tokens: a chunk or more takes L / P full steps a prompt,
    # and under one a full step ends s = P / L prompts (the chain's last state is a full step only
    # where s < 15, so its step is not the full one in general)
    whole = tokens >= chunk_tokens
    load = rate_per_ms * tokens * t_full / chunk_tokens
    share = jnp.where(whole, jnp.clip(load, 0.0, 1.0), chain_share)
    mixed = jnp.where(whole, t_full, chain_mixed)
    mean = 1.0 / (share / mixed + (1.0 - share) / t0)
    # a chunk or more: a prompt arriving in a decode step waits for it; in a prefill step, the
    # caller's M/G/1 wait covers the prompt in service (its P(wait > 0) is ρ)
    step_wait = jnp.where(whole, running * (1.0 - share) * 0.5 * t0, waits.step_wait_ms)
    own = jnp.where(whole, t_full, waits.own_step_ms)
    # a chunk or more: no split (its waits are the M/G/1 queue's, every prompt's alike)
    split = jax.tree_util.tree_map(lambda value, kept: jnp.where(whole, value, kept),
                                   ArrivalSplit(0.0, 0.0, 0.0, step_wait, 0.0, 0.0, 0.0, 0.0), waits.split)
    return PrefillSteps(mean, t0, mixed, share, jnp.where(whole, chunk_tokens, chain_tokens), load, step_wait, own,
                        waits.overflow_ms, jnp.where(whole, 0.0, waits.service_scv),
                        jnp.where(whole, jnp.clip(load, 0.0, 1.0), waits.wait_probability), split)


def poisson_turn(step: DecodeStep, rate_per_ms: jax.Array, prefill_tokens: jax.Array, osl: jax.Array,
                 chunk_tokens: jax.Array, prefill_ms_per_token: jax.Array, eta_decode: jax.Array,
                 elementwise_overhead: jax.Array, service_scv: jax.Array, prompt_scv: jax.Array = 0.0,
                 prefill_experts=None, lockstep_ranks=None, arrival_scv: jax.Array = 1.0,
                 batch: jax.Array | None = None) -> EngineTurn:
    """TTFT and TPOT of a request in the shared engine under Poisson arrivals (module docstring).

    Args:
        step: the seed's decode step at the batch a request sees, B + 1.
        rate_per_ms: λ, requests per ms (> 0). prefill_tokens: L_prefill [tokens] (>= 0).
        osl: output tokens [tokens]. chunk_tokens: P [tokens] (> 0). prefill_ms_per_token: c_p [ms].
        eta_decode, elementwise_overhead: of eq. 3.
        service_scv: c_S², the squared coefficient of variation of the prefill sizes (the hit/miss
            mix's, `jaxpareto.physics.queueing.PrefillMix`): the M/G/1 wait's (1 + c_S²) / 2.
        prompt_scv: ``isl_cv``², the prompt lengths' spread within a hit/miss kind (the chain's
            steps and the carry of a long prompt, `prefill_steps`).
        prefill_experts, lockstep_ranks: as in `jaxpareto.physics.engine.shared_turn`.
        arrival_scv: c_a² of the gaps between arrivals (1: Poisson): the wait for the prompts
            ahead, M/G/1's or the chain's full steps, is scaled by
            `jaxpareto.physics.queueing.renewal_wait_factor` at the load of full steps.
        batch: B, the requests decoding (the open loop's fixed point), or None: the engine
            always stepping. Given, a prompt waits for a step in progress only where the engine
            runs one: not when it finds no request decoding or prefilling, P = exp(-(B + λ S))
            (the requests in their turn taken as Poisson, the M/G/∞ occupancy; Takács 1962),
            where S is the prompt's own steps: at a vanishing rate TTFT is the lone prefill's.

    Returns:
        `EngineTurn`, with ``prefill_load`` m, ``seen_load`` the chance that a prompt waits for
        prompts ahead (both 1 where the load at full steps is >= 1: beyond capacity),
        ``service_ms`` the prompt's own steps plus the step in progress, ``service_scv`` and
        ``dispersion`` F_c.
    """
    t = step_time(step, eta_decode, elementwise_overhead, prefill_ms_per_token, prefill_experts)
    tokens = jnp.maximum(prefill_tokens, 1e-6)  # a turn with nothing to prefill still waits one step
    own_steps = jnp.maximum(tokens / chunk_tokens, 1.0)
    single = jnp.minimum(tokens, chunk_tokens)
    service = own_steps * t(single)
    # an idle engine runs no step to wait for: none decoding, none prefilling
    running = 1.0 if batch is None else -jnp.expm1(-(batch + rate_per_ms * service))
    steps = prefill_steps(t, rate_per_ms, tokens, chunk_tokens, prompt_scv, running)
    t0, tf, share = steps.decode_step_ms, steps.mixed_step_ms, steps.mixed_share
    stable = steps.load < 1.0
    share = jnp.where(stable, share, 1.0)
    safe = jnp.where(stable, share, 0.5)
    mixed = lockstep_share(safe, safe, lockstep_ranks)
    tpot = t0 * tf / (mixed * t0 + (1.0 - mixed) * tf)

    # one more prefill: its own steps' excess over decode steps, or its tokens' compute in a step
    # it shares (a prompt under one chunk finds λ T̄ others there, Poisson)
    joins = jnp.where(tokens < chunk_tokens, -jnp.expm1(-rate_per_ms * steps.mean_step_ms), 0.0)
    per_token = jax.jvp(t, (steps.per_step_tokens,), (jnp.ones_like(steps.per_step_tokens),))[1]
    marginal = (1.0 - joins) * (service - own_steps * t0) + joins * tokens * per_token
    dispersion = 1.0 / (1.0 - jnp.clip(rate_per_ms * marginal, 0.0, 0.999)) ** 2
    tpot = tpot + 0.5 * (dispersion - 1.0) * marginal / jnp.maximum(osl, 1.0)

    # the prefill's own steps (whole steps for a chunk or more), the step in progress, and the
    # wait for the prompts ahead: the M/G/1 wait at the load of full steps for a chunk or more,
    # the chain's full steps under one
    busy = jnp.where(stable, jnp.clip(steps.load, 0.0, 1.0), 0.5)
    whole = tokens >= chunk_tokens
    alone = jnp.where(whole, whole_steps_ms(t, tokens, chunk_tokens, prompt_scv, busy), steps.own_step_ms)
    # under one chunk the chain runs on the mean prompt: the spread of sizes between the hit and
    # miss kinds, beyond the prompts' own that the chain takes, adds its share of the M/G/1 wait,
    # λ Var(S) / (2 (1 - ρ)) at full steps (Pollaczek-Khinchine's wait is linear in E[S²])
    between = jnp.maximum(service_scv - prompt_scv, 0.0)
    spread_wait = busy * tokens / chunk_tokens * t(chunk_tokens) * 0.5 * between / (1.0 - busy)
    queued = jnp.where(whole, pollaczek_khinchine_ms(busy, service, service_scv), steps.overflow_ms + spread_wait)
    queued = queued * renewal_wait_factor(arrival_scv, service_scv, busy)
    ttft = alone + steps.step_wait_ms + queued
    # beyond the prefill capacity the queue grows without bound: no finite latency (the batch's
    # fixed-point iteration stops there and the caller flags the point)
    ttft, tpot = jnp.where(stable, ttft, jnp.inf), jnp.where(stable, tpot, jnp.inf)
    waits = jnp.where(stable, steps.wait_probability, 1.0)  # P(a prompt waits for prompts ahead)
    return EngineTurn(ttft, tpot, share, alone + steps.step_wait_ms, t0, tf, waits, mixed, dispersion,
                      service_scv=steps.service_scv, step_wait_ms=steps.step_wait_ms,
                      arrival_split=steps.split._replace(carried=waits, queue_wait_ms=queued))


def saturated_tpot_ms(full: DecodeStep, slots: jax.Array, prefill_tokens: jax.Array, osl: jax.Array,
                      chunk_tokens: jax.Array, prefill_ms_per_token: jax.Array, eta_decode: jax.Array,
                      elementwise_overhead: jax.Array, prefill_experts=None) -> jax.Array:
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
        eta_decode, elementwise_overhead, prefill_experts: as in `poisson_turn`.
    """
    t = step_time(full, eta_decode, elementwise_overhead, prefill_ms_per_token, prefill_experts)
    window_tokens = jnp.maximum(slots - 1.0, 0.0) * prefill_tokens
    steps_out = jnp.maximum(osl, 1.0)
    per_step = jnp.clip(window_tokens / steps_out, jnp.minimum(prefill_tokens, chunk_tokens), chunk_tokens)
    steps = jnp.minimum(window_tokens / jnp.maximum(per_step, 1e-9), steps_out)
    return (steps * t(per_step) + (steps_out - steps) * t(0.0)) / steps_out
