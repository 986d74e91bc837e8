"""Open-loop load: requests arriving at a rate, and the wait for prefill capacity (docs/model.md,
"Open-loop load").

Under ``arrivals="poisson"`` requests (turns) arrive as a Poisson process of rate λ whatever the
server does, as ``vllm bench serve --request-rate`` and MLPerf's server scenario generate them.

- **The batch.** By Little's law the mean number of requests decoding is B = λ OSL TPOT (seed
  002 section 7.4), a fixed point in B solved like the closed loop's (`jaxpareto.physics.closed_loop`),
  with TPOT at the batch B + 1 a request sees (itself and the others). Agent sessions arrive at
  λ / N and run N turns with a pause Z between consecutive ones, so P = λ Z (N - 1) / N sessions
  are paused at any time (Little's law again), holding or competing for KV memory as in the
  closed loop.
- **The prefill queue.** Prefills wait for the prefill capacity first-come first-served (vLLM's
  and SGLang's default scheduling policy), an M/G/1 queue: with S the prefill time alone,
  ρ = λ E[S] the share of time prefill runs and c_S² the squared coefficient of variation of
  S, the mean wait is the Pollaczek-Khinchine formula (Kleinrock, Queueing Systems vol. 1, 1975,
  chapter 5)

      W = ρ E[S] (1 + c_S²) / (2 (1 - ρ)).

  Under the shared engine the prefill server is the chunked-prefill engine, whose ρ and S come
  from its bulk-service steps (`jaxpareto.physics.open_engine`).
- **Arrivals more regular than Poisson** (`renewal_wait_factor`). Where a front end deals the
  requests over its replicas in turn, a replica's arrivals have gaps of squared CV c_a² < 1
  (``Workload.arrival_cv``²), and its waits are a GI/G/1 queue's: the Poisson ones times
  Krämer and Langenbach-Belz's ratio, 1 at c_a² = 1.
- **The wait for a KV slot** (`slot_wait_ms`). A request holds its KV from its prefill to its
  last token; with M slots (the sessions KV memory holds, less the paused ones under the seed's
  memory model), a request finding every slot busy waits for one. The number holding one is
  over-dispersed (`batch_fano_factor`), so slots run out while the mean is well below M: this
  is the queue of a server run near its KV capacity.
- **Stability.** A point whose fixed point does not exist (λ beyond what the decode batch or
  KV memory sustains) or whose prefill load reaches ρ = 1 is flagged ``load_beyond_capacity``
  and carries NaN, never a number.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import betainc, gammaincc, gammaln


@jax.custom_jvp
def incomplete_beta(a: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
    """I_x(a, b), the regularized incomplete beta function, differentiable in a and b too:
    `jax.scipy.special.betainc` has no derivative in its shape parameters, which calibration
    needs through the KV-slot wait (its derivative there is a central difference, step 1e-4 of
    the parameter, in float64 an error far below the fit's)."""
    return betainc(a, b, x)


@incomplete_beta.defjvp
def _incomplete_beta_jvp(primals, tangents):
    a, b, x = primals
    da, db, dx = tangents
    value = betainc(a, b, x)
    ha, hb = 1e-4 * jnp.maximum(a, 1.0), 1e-4 * jnp.maximum(b, 1.0)
    by_a = (betainc(a + ha, b, x) - betainc(jnp.maximum(a - ha, 0.5 * a), b, x)) / (a + ha - jnp.maximum(a - ha, 0.5 * a))
    by_b = (betainc(a, b + hb, x) - betainc(a, jnp.maximum(b - hb, 0.5 * b), x)) / (b + hb - jnp.maximum(b - hb, 0.5 * b))
    # d/dx I_x(a, b) = x^(a-1) (1-x)^(b-1) / B(a, b)
    by_x = jnp.exp((a - 1.0) * jnp.log(x) + (b - 1.0) * jnp.log1p(-x) - (gammaln(a) + gammaln(b) - gammaln(a + b)))
    return value, by_a * da + by_b * db + by_x * dx


def fcfs_wait_scale(service_scv: jax.Array) -> jax.Array:
    """(1 + c_S²) / 2: the M/G/1 first-come first-served wait relative to processor sharing's."""
    return 0.5 * (1.0 + service_scv)


def pollaczek_khinchine_ms(load: jax.Array, service_ms: jax.Array, service_scv: jax.Array) -> jax.Array:
    """W = ρ E[S] (1 + c_S²) / (2 (1 - ρ)), the M/G/1 mean wait [ms] at load ρ = ``load`` (< 1:
    the caller keeps an unstable load out), mean service ``service_ms`` and its c_S²."""
    return load * service_ms * fcfs_wait_scale(service_scv) / (1.0 - load)


def renewal_wait_factor(arrival_scv: jax.Array, service_scv: jax.Array, load: jax.Array) -> jax.Array:
    """The mean wait of a GI/G/1 queue over the M/G/1 wait at the same load (1 for Poisson arrivals).

    Arrivals whose gaps have squared coefficient of variation c_a² (``Workload.arrival_cv``²: 1
    Poisson, 1 / k a share of a Poisson stream dealt over k servers in turn) wait by the Krämer
    and Langenbach-Belz approximation (8th International Teletraffic Congress,
    1976; Bolch, Greiner, de Meer and Trivedi, Queueing Networks and Markov Chains, 2006,
    section 6.3.4): the Allen-Cunneen wait ρ E[S] (c_a² + c_S²) / (2 (1 - ρ)) times

        g = exp(-2 (1 - ρ) (1 - c_a²)² / (3 ρ (c_a² + c_S²)))   for c_a² <= 1,
        g = exp(-(1 - ρ) (c_a² - 1) / (c_a² + 4 c_S²))           for c_a² > 1,

    so over Pollaczek-Khinchine's the factor (c_a² + c_S²) / (1 + c_S²) x g, exactly 1 at c_a² = 1.
    Against a simulated single server with gamma-distributed gaps (tests/test_arrival_cv.py), for
    c_a² from 0 to 3/4 (1 / k for a stream dealt over k servers in turn), c_S² from 0 to 1 and
    loads of 0.3 to 0.95, the wait is within 10 % of the simulated one, or within a tenth of the mean
    service time where it is shorter (regular arrivals at a low load wait almost nothing), but at
    loads of 0.9 and more with evenly spaced arrivals (c_a² 0, services of c_S² up to 0.19) or
    c_a² 1/8 and nearly fixed services (c_S² <= 0.05): there it is low by up to 0.14 and 0.11 of
    the mean service, at most 14 % of the wait and service together. Above 1 two moments do not
    set the wait: gamma gaps of c_a² 2 and 4 at a load of 0.3 wait 2x and 3x what the formula
    gives, so `Workload.arrival_cv` stops at 1.

    Args:
        arrival_scv: c_a² >= 0. service_scv: c_S² >= 0. load: ρ (clipped into (0, 1)).
    """
    rho = jnp.clip(load, 1e-9, 1.0 - 1e-9)
    spread = arrival_scv + service_scv
    # D/D/1 (both spreads 0) waits nothing; each branch's denominator is kept off 0 where the
    # other is taken, so that reverse-mode gradients stay finite there too
    some = spread > 1e-6
    safe = jnp.where(some, spread, 1.0)
    regular = jnp.exp(-2.0 * (1.0 - rho) * (1.0 - arrival_scv) ** 2 / (3.0 * rho * safe))
    above = arrival_scv > 1.0
    bursty = jnp.exp(-(1.0 - rho) * (arrival_scv - 1.0) / jnp.where(above, arrival_scv + 4.0 * service_scv, 1.0))
    factor = spread / (1.0 + service_scv) * jnp.where(above, bursty, regular)
    return jnp.where(some, factor, 0.0)


def mg1_wait_ms(rate_per_ms: jax.Array, service_ms: jax.Array, service_scv: jax.Array,
                arrival_scv: jax.Array = 1.0) -> tuple[jax.Array, jax.Array]:
    """(W, ρ): the Pollaczek-Khinchine mean wait of an M/G/1 queue [ms] and its load ρ = λ E[S];
    with ``arrival_scv`` c_a² other than 1, a GI/G/1 queue's (`renewal_wait_factor`).

    Args:
        rate_per_ms: λ, arrivals per ms (scalar, >= 0).
        service_ms: E[S], the mean service time [ms].
        service_scv: c_S², the squared coefficient of variation of S.
        arrival_scv: c_a², the squared coefficient of variation of the gaps between arrivals.

    Returns:
        W [ms] (inf where ρ >= 1: the queue grows without bound) and ρ.
    """
    load = rate_per_ms * service_ms
    stable = load < 1.0
    wait = pollaczek_khinchine_ms(jnp.where(stable, load, 0.0), service_ms, service_scv) * \
        renewal_wait_factor(arrival_scv, service_scv, load)
    return jnp.where(stable, wait, jnp.inf), load


class PrefillMix(NamedTuple):
    """Prefill work per turn as a mix of prefix-cache hits and misses (scalars).

    Attributes:
        hit_share: share of turns that prefill only their new tokens.
        hit_scale, miss_scale: each kind's prefill tokens relative to the mean L_prefill.
        cv: the coefficient of variation of each kind around its mean (``isl_cv``).
        scv: c_S² of the whole mix, for the M/G/1 wait.
    """

    hit_share: jax.Array
    hit_scale: jax.Array
    miss_scale: jax.Array
    cv: jax.Array
    scv: jax.Array


def prefill_mix(mean_tokens: jax.Array, hit_tokens: jax.Array, hit_share: jax.Array, isl_cv: jax.Array) -> PrefillMix:
    """Hits prefill ``hit_tokens``; the other turns the rest of the mean ``mean_tokens``, each
    kind lognormal with coefficient of variation ``isl_cv``; prefill time is taken proportional
    to the tokens (eq. 2), so the mix scales the mean prefill time.

    Args:
        mean_tokens: L_prefill, the mean over all turns [tokens] (> 0).
        hit_tokens: what a hit prefills, min(max(ΔL, 1), L) [tokens].
        hit_share: h_eff, the share of hits in [0, 1].
        isl_cv: ``Workload.isl_cv``.
    """
    mean = jnp.maximum(mean_tokens, 1e-9)
    hit_share = jnp.clip(hit_share, 0.0, 1.0)
    hit_scale = jnp.minimum(hit_tokens / mean, 1.0)
    miss_share = 1.0 - hit_share
    safe = jnp.where(miss_share > 1e-9, miss_share, 1.0)
    miss_scale = jnp.where(miss_share > 1e-9, (1.0 - hit_share * hit_scale) / safe, 1.0)
    second_moment = (1.0 + isl_cv * isl_cv) * (hit_share * hit_scale ** 2 + miss_share * miss_scale ** 2)
    return PrefillMix(hit_share, hit_scale, miss_scale, isl_cv + 0.0 * mean, jnp.maximum(second_moment - 1.0, 0.0))


def erlang_c(servers: jax.Array, offered: jax.Array) -> jax.Array:
    """C(M, a): the probability that an arrival waits in an M/M/M queue with offered load a < M.

    Erlang's B formula as a ratio of Poisson terms, B = pmf(M; a) / P(N <= M; a), the CDF by the
    regularised incomplete gamma function (so M need not be an integer and no recursion over
    the servers runs), then C = M B / (M - a (1 - B)) (Kleinrock vol. 1, section 3.5). 1 where a >= M.
    """
    m = jnp.maximum(servers, 1e-9)
    a = jnp.maximum(offered, 1e-30)
    log_pmf = m * jnp.log(a) - a - gammaln(m + 1.0)
    blocking = jnp.exp(log_pmf - jnp.log(jnp.maximum(gammaincc(m + 1.0, a), 1e-300)))
    stable = a < m
    wait_prob = m * blocking / jnp.where(stable, m - a * (1.0 - blocking), 1.0)
    return jnp.where(stable, jnp.clip(wait_prob, 0.0, 1.0), 1.0)


def mgc_wait_ms(servers: jax.Array, seen: jax.Array, offered: jax.Array, service_ms: jax.Array,
                service_scv: jax.Array) -> jax.Array:
    """The mean wait for one of ``servers`` [ms]: Erlang C at the load an arrival sees, ``seen``,
    over the headroom the whole ``offered`` load leaves, C(M, a') S / (M - a) x (1 + c_S²) / 2
    (M/G/M, Lee and Longton). With a' = a, the open queue's wait; with a' the other sessions'
    load (the arrival theorem of a closed loop), 0 for a lone session. inf where a >= M.
    """
    stable = offered < servers
    wait = erlang_c(servers, seen) * service_ms / jnp.where(stable, servers - offered, 1.0) * \
        fcfs_wait_scale(service_scv)
    return jnp.where(stable, jnp.where(seen > 0, wait, 0.0), jnp.inf)


_POISSON_FANO = 1.0 + 1e-4  # an occupancy this close to Poisson is taken as Poisson (M/M/M)


def batch_fano_factor(cluster_dispersion: jax.Array, rate_per_ms: jax.Array, hold_slope_ms: jax.Array) -> jax.Array:
    """F = Var(n) / E[n] of the requests in their turn under Poisson arrivals: F_c / (1 - p).

    An M/G/∞ count is Poisson (F = 1); a serving engine's is over-dispersed by two feedbacks:

    - **Prefill clusters** (``cluster_dispersion``, F_c = 1 / (1 - κ)²): every prefill landing
      in a request's decode steps lengthens them and brings further arrivals into them
      (`jaxpareto.physics.open_engine`).
    - **Slower steps with more requests.** With T_hold(n) = α + β n the occupancy of the
      birth-death chain of arrivals at λ and departures at n / T_hold(n) is a negative binomial
      of variance over mean 1 / (1 - p), p = λ β (``hold_slope_ms`` = β): its weights are
      λ^n Π T_hold(k) / k, a processor-sharing queue of state-dependent speed, whose occupancy
      is insensitive to the distribution of the work (Kelly, Reversibility and Stochastic
      Networks, 1979, section 3.3). p is clipped below 1 (beyond capacity anyway).
    """
    swing = jnp.clip(rate_per_ms * hold_slope_ms, 0.0, 0.999)
    return cluster_dispersion / (1.0 - swing)


def slot_wait_ms(slots: jax.Array, rate_per_ms: jax.Array, hold_ms: jax.Array, hold_scv: jax.Array,
                 hold_full_ms: jax.Array | None = None, fano: jax.Array = 1.0,
                 arrival_dispersion: jax.Array = 1.0) -> tuple[jax.Array, jax.Array]:
    """(W, P(wait)): the mean wait for one of ``slots`` KV slots [ms] (inf when beyond capacity)
    and the chance that a request waits at all.

    The n requests holding a slot are served together, one token each per engine step. Below M
    slots their number has mean λ T_hold (Little's law) and variance F times that
    (`batch_fano_factor`), taken as a negative binomial of those two moments (F = 1: Poisson).
    At n >= M every slot is busy, arrivals queue first-come first-served and leave at
    M / T_hold(M) (``hold_full_ms``: the turn at the full batch, `jaxpareto.physics.point`), a
    geometric tail of ratio σ = λ T_hold(M) / M. The mean wait is

        W = P_M T_hold(M) / (M - λ T_hold(M)) x (F_a + c_T²) / 2,   P_M = P(n >= M),

    the conditional wait of Kingman's heavy-traffic form for many servers, with the index of
    dispersion F_a of the work arriving (``arrival_dispersion``: clusters of prefills, 1 for
    Poisson) and the squared coefficient of variation c_T² of the holding time (Whitt,
    "Approximations for the GI/G/m queue", Production and Operations Management 2, 1993; at
    F_a = 1 the Lee-Longton M/G/m factor). At F = F_a = 1 and a flat T_hold the chain is M/M/M
    and P_M Erlang's C formula (`erlang_c`). The over-dispersion is why slots run out near
    capacity while the mean batch is still well below them.

    The chance of waiting is approximated apart from the mean, as Whitt's approximations do
    (the conditional wait is then W / P(wait)): arrivals that come in clusters of index of
    dispersion F_a keep the queue beyond M longer than σ's geometric tail says. With clusters
    of geometric size (F_a = (1 + β) / (1 - β)) the queue beyond the busy servers decays by
    β + σ (1 - β) a request (the M^X/M/1 queue's geometric tail: Gross, Shortle, Thompson and
    Harris, Fundamentals of Queueing Theory, 4th ed., 2008, section 3.1), so its mass is
    (F_a + 1) / 2 times σ's:

        P(wait) = f P_M / (1 - P_M + f P_M),   f = (F_a + 1) / 2,

    exactly P_M at F_a = 1 (Erlang's C for Poisson arrivals). Against the simulated server, in
    16 of ``scripts/open_loop_agreement.py``'s rows where the slots bind, P(wait) is 0.46-1.53
    times the simulated share of requests that wait for a slot (0.8-1.2 in 11), where P_M was
    1.4-6 times under it with many clusters (docs/model.md, "The wait for a KV slot").

    Args:
        slots: M, the sessions KV memory holds for running requests.
        rate_per_ms: λ. hold_ms: T_hold, a request's time holding its KV [ms].
        hold_scv: c_T², the squared coefficient of variation of T_hold.
        hold_full_ms: T_hold(M) [ms] (None: ``hold_ms``).
        fano: F >= 1, the occupancy's variance over its mean.
        arrival_dispersion: F_a >= 0 (the prefill clusters' F_c >= 1, times c_a² where the arrivals
            are more regular than Poisson).
    """
    mean = rate_per_ms * hold_ms
    hold_full = hold_ms if hold_full_ms is None else jnp.maximum(hold_full_ms, hold_ms)  # T_hold(M)
    ratio = rate_per_ms * hold_full / slots  # σ
    stable = ratio < 1.0
    over = fano > _POISSON_FANO
    # the negative binomial of mean n̄ and variance F n̄: q = 1 - 1 / F, r = n̄ / (F - 1)
    q = jnp.where(over, 1.0 - 1.0 / jnp.where(over, fano, 2.0), 0.5)
    r = jnp.maximum(mean, 1e-9) / jnp.where(over, fano - 1.0, 1.0)
    below = incomplete_beta(r, slots, 1.0 - q)  # P(n <= M - 1)
    at_full = jnp.exp(gammaln(slots + r) - gammaln(r) - gammaln(slots + 1.0) + slots * jnp.log(q) + r * jnp.log1p(-q))
    safe_ratio = jnp.where(stable, ratio, 0.5)
    tail = at_full / (1.0 - safe_ratio)  # P(n = M) + the queue beyond, unnormalised
    full = jnp.where(over, tail / (below + tail), erlang_c(slots, mean))  # P_M
    full = jnp.where(stable, jnp.clip(full, 0.0, 1.0), 1.0)
    wait = full * hold_full / jnp.where(stable, slots * (1.0 - safe_ratio), 1.0) * \
        0.5 * (arrival_dispersion + hold_scv)
    longer = 0.5 * (jnp.maximum(arrival_dispersion, 0.0) + 1.0)  # f: the clusters' longer tail
    waits = jnp.where(stable, longer * full / (1.0 - full + longer * full), 1.0)
    return jnp.where(stable, wait, jnp.inf), waits


def _others_in_turn(batch, concurrency, slots):
    """The binomial law of the others in their turn, K ~ binomial(C - 1, p = B / C), as the
    incomplete betas of its tails take it: (C - 1, M, p, b = C - M, inside, p and b inside),
    ``inside`` the betas' open domain (0 < p < 1 and b > 0: M others can be in their turn), where
    p and b are kept (elsewhere harmless values: no 0 x inf derivatives)."""
    others = jnp.maximum(concurrency - 1.0, 0.0)
    m = jnp.maximum(slots, 1.0)
    p = batch / jnp.maximum(concurrency, 1.0)
    b = others - m + 1.0
    inside = (p > 0.0) & (p < 1.0) & (b > 0.0)
    return others, m, p, b, inside, jnp.where(inside, p, 0.5), jnp.where(inside, b, 1.0)


def closed_slot_wait_turns(batch: jax.Array, concurrency: jax.Array, slots: jax.Array) -> jax.Array:
    """The closed loop's mean wait for one of M KV slots, in running turns S: W / S.

    A session's turn finds K of the C - 1 others in their turn, K ~ binomial(C - 1, B / C) (the
    arrival theorem of closed networks, Lavenberg and Reiser 1980, with B the sessions in their
    turn, running or waiting). Where K >= M every slot is busy and the turn is the (K - M + 1)-th
    in line for the next of them, which free up at M / S: W = E[(K - M + 1)⁺] S / M, the
    first-come first-served multi-server queue with finite sources (Engset's delay system;
    Kleinrock, Queueing Systems vol. 1, 1975, chapter 3) taken at the binomial law of its
    sources. With the binomial tails as incomplete beta functions (`incomplete_beta`, so that
    C and M need not be integers),

        E[(K - M + 1)⁺] = (C - 1) p I_p(M - 1, C - M) - (M - 1) I_p(M, C - M),   p = B / C,

    ((C - 1) p for one slot). At Z = 0 (p = 1) it is C - M, the fluid R = S C / M of every
    session waiting its turn; 0 where C <= M (never M others). In float32 the difference of
    the two terms loses about 2e-3 turns at C of 10,000 and more.

    Args:
        batch: B, sessions in their turn (> 0). concurrency: C (>= 1). slots: M (>= 1; below 1
            taken as 1, a feasible point's least).

    Returns:
        W / S >= 0, the mean wait in units of the running turn.
    """
    others, m, p, b, inside, p_in, b_in = _others_in_turn(batch, concurrency, slots)
    several = m > 1.0
    a_in = jnp.where(several, m - 1.0, 1.0)
    queued = others * p_in * jnp.where(several, incomplete_beta(a_in, b_in, p_in), 1.0) \
        - (m - 1.0) * incomplete_beta(m, b_in, p_in)
    edge = jnp.where((p >= 1.0) & (b > 0.0), b, 0.0)  # every session in its turn: C - M of them queue
    return jnp.maximum(jnp.where(inside, queued, edge), 0.0) / m


def closed_slot_wait_chance(batch: jax.Array, concurrency: jax.Array, slots: jax.Array) -> jax.Array:
    """The closed loop's chance that a turn waits for one of M KV slots: P(K >= M), K ~
    binomial(C - 1, B / C) the others in their turn (the arrival theorem, as in
    `closed_slot_wait_turns`, whose mean wait is over every turn), the binomial tail

        P(K >= M) = I_p(M, C - M),   p = B / C,

    as a regularized incomplete beta function (`incomplete_beta`; C and M need not be integers).
    1 at Z = 0 (p = 1) where C > M, 0 where C <= M (never M others).

    Args:
        batch: B, sessions in their turn (> 0). concurrency: C (>= 1). slots: M (>= 1; below 1
            taken as 1).

    Returns:
        P(wait) in [0, 1].
    """
    _, m, p, b, inside, p_in, b_in = _others_in_turn(batch, concurrency, slots)
    edge = jnp.where((p >= 1.0) & (b > 0.0), 1.0, 0.0)  # every session in its turn: C - 1 >= M others
    return jnp.clip(jnp.where(inside, incomplete_beta(m, b_in, p_in), edge), 0.0, 1.0)


def paused_sessions(rate_per_ms: jax.Array, think_time_ms: jax.Array, turns_per_session: jax.Array) -> jax.Array:
    """P = λ Z (N - 1) / N: sessions between two of their turns under Poisson session arrivals
    (Little's law over the pauses: λ / N sessions per ms, each pausing N - 1 times for Z)."""
    return rate_per_ms * think_time_ms * (turns_per_session - 1.0) / turns_per_session
