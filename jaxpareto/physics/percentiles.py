"""P50, P90 and P99 of TTFT, TPOT, ITL and E2E latency (docs/model.md, "Latency percentiles").

The means come from the model; the spread around them from three stated approximations:

- **Lengths.** The tokens a turn prefills and its output tokens are lognormal around their means
  with coefficients of variation ``isl_cv`` and ``osl_cv``; prefill turns are a mix of
  prefix-cache hits (only the new tokens) and misses (`jaxpareto.physics.queueing.prefill_mix`).
  Prefill time is proportional to its tokens (seed eq. 2); in the open loop's shared engine
  the wait for the step in progress is every kind's alike, not scaled with its tokens.
- **Queueing (open loop).** The wait for prefill capacity is 0 with probability 1 - ρ and
  otherwise exponential with mean W / ρ: exact for M/M/1; for M/G/1 the wait's tail is
  exponential (Cramér-Lundberg) and matching its mean is the usual two-moment approximation
  (Tijms, A First Course in Stochastic Models, 2003); with arrivals more regular than Poisson
  (``arrival_cv``) W is the GI/G/1 mean and the chance of waiting stays ρ, so the waits that
  happen are shorter. TTFT = S + W with S and W independent. In the shared engine, prompts
  under one chunk that arrive in a step carrying prefill (a share p_f, PASTA) and those that do
  not are kinds of their own, each with its wait for the step in progress (its conditional mean
  and variance) and its chance and mean of being carried past steps (`TurnSpread.arrival_split`):
  the first wait for a prefill step's rest, the others rarely. The wait for a KV slot is a
  wait of its own (`Delay`): a request finding every slot busy waits for one, exponentially with
  the slot queue's conditional mean (`jaxpareto.physics.queueing.slot_wait_ms`), and not for the
  prompts ahead as well, which the engine has mostly worked off by then; the others wait for
  those. Under the closed loop the mean TTFT (with whatever waits it holds) is spread by the
  lengths only.
- **The batch a request sees.** Requests in their turn have mean B and variance F B under
  Poisson arrivals (the M/G/∞ occupancy of Takács 1962, F = 1, over-dispersed by the engine's
  feedbacks: `jaxpareto.physics.queueing.batch_fano_factor`) and, in the closed loop, a session
  sees itself and binomial(C - 1, ρ) others (the arrival theorem: Lavenberg and Reiser 1980);
  a decode step's time moves with the batch along eq. 3's secant over the batch's own spread,
  held to the most a step decodes (`jaxpareto.physics.point.evaluate_point`). A request's
  TPOT averages the batch over its turn (variance x 2/3, the mean of the triangular
  autocovariance over one service time), and, under the shared engine, over the prefill chunks
  that land in its decode steps (a compound Poisson count: each other turn's prefill adds
  S (T_f - T_0) / T_f to its decode time; in the open loop clustered, and correlated with the
  batch, as `TurnSpread` says). An ITL is one step: a decode step T_0 or, for the share of
  steps that carry a prefill chunk, a mixed step T_f, each spread by the batch, at most the
  longer kind at the most a step decodes. No TPOT or ITL quantile lies below one request's step.
- **The tail's bound.** A step's time is an increasing function of the batch, so the batch's
  part of a TPOT quantile is the step at the batch's quantile (`seen_batch_quantiles`); P90 and
  P99 stop at the mean plus that rise plus the prefill chunks' own deviation, where T(B) levels
  off (a mixture of experts once all are awake) and the lognormal's tail would pass any step.
  There E2E latency's decode time takes the TPOT spread of the lognormal through the mean and
  the bounded P99.

TPOT is taken lognormal with the mean and spread above; E2E latency = TTFT + decode time, each
hit/miss kind's prefill plus the decode time summed as one lognormal of matched moments
(Fenton, IRE Trans. Commun. Syst. 1960), then the wait added as for TTFT. Quantiles of the
mixtures are found by bisection of their CDF (a fixed number of halvings: branch-free; their
derivatives the implicit function's, `jaxpareto.physics.numerics.increasing_quantile`), at the
level q less 1e-5: a mixture of fixed-length hits and misses whose hit share is exactly q (hit
rate 0.9 and P90) has its CDF within rounding of q between the two, and its quantile there is
the hits' upper end in either precision, where rounding would otherwise pick any point between.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from jaxpareto.physics.numerics import increasing_quantile, sqrt_or_zero
from jaxpareto.physics.queueing import PrefillMix

#: The percentiles reported, and their names in the dataset (vLLM's).
PERCENTILES = (50, 90, 99)
#: The upper ones, whose TPOT the batch's own quantile bounds (`seen_batch_quantiles`).
TAIL_PERCENTILES = tuple(p for p in PERCENTILES if p > 50)
_Z = {p: NormalDist().inv_cdf(p / 100.0) for p in PERCENTILES}  # standard normal quantiles
_Z_UPPER = {p: NormalDist().inv_cdf(0.5 + p / 200.0) for p in PERCENTILES}  # ... at (1 + q) / 2
_SIGMA_FLOOR = 1e-4  # a fixed length is a lognormal this narrow (keeps the CDF finite)
_Z_LOW = -8.0  # the lognormal below this many σ is ignored in the wait integral
_BISECTIONS = 26  # halvings: 2^-26 of a bracket of at most e^10 in log t, below float32 rounding
# a mixture's quantile is where its CDF reaches q less this: where the CDF stays within it of q
# over a stretch (fixed prompt lengths whose hit share is q), the stretch's lower end, the same
# in float32 and float64 (whose rounding would otherwise pick any point of it)
_LEVEL_TOLERANCE = 1e-5
_GL_X, _GL_W = np.polynomial.legendre.leggauss(32)
_GL_U, _GL_WU = 0.5 * (_GL_X + 1.0), 0.5 * _GL_W  # nodes and weights on [0, 1]
_AVERAGED_BATCH_VARIANCE = 2.0 / 3.0


def lognormal_sigma(cv: jax.Array) -> jax.Array:
    """σ of a lognormal of coefficient of variation ``cv``: sqrt(ln(1 + cv²)), floored."""
    return jnp.maximum(sqrt_or_zero(jnp.log1p(cv * cv)), _SIGMA_FLOOR)


def lognormal_quantile(mean: jax.Array, cv: jax.Array, percentile: int) -> jax.Array:
    """The ``percentile`` of a lognormal of mean ``mean`` and coefficient of variation ``cv``."""
    sigma = lognormal_sigma(cv)
    return mean * jnp.exp(sigma * _Z[percentile] - 0.5 * sigma * sigma)


class Delay(NamedTuple):
    """A latency = a mix of lognormal kinds + an independent queueing wait (scalars / (k,)).

    The wait is 0, or exponential of mean ``wait_ms`` with chance ``busy``, or, where a second
    wait is given, exponential of mean ``slot_wait_ms`` with chance ``slot_busy``: one of the
    three, never both waits (busy + slot_busy <= 1).

    Attributes:
        weights, means, sigmas: the kinds' shares, means [ms] and log-spreads, shape (k,).
        busy: P(wait > 0) (0: no wait), for every kind or per kind (shape (k,)).
        wait_ms: the mean wait given that there is one [ms], likewise.
        slot_busy, slot_wait_ms: the second wait's chance and conditional mean [ms], likewise
            (None: none; the open loop's wait for a KV slot).
    """

    weights: jax.Array
    means: jax.Array
    sigmas: jax.Array
    busy: jax.Array
    wait_ms: jax.Array
    slot_busy: jax.Array | None = None
    slot_wait_ms: jax.Array | None = None


def _kind_cdf_z(t, means, sigmas):
    return jnp.clip((jnp.log(t / means) + 0.5 * sigmas * sigmas) / sigmas, _Z_LOW, -_Z_LOW)


def _per_kind(x):
    """A wait's parameter for every kind (a scalar) or each kind its own ((k,) -> (k, 1))."""
    x = jnp.asarray(x)
    return x[:, None] if x.ndim else x


def delay_cdf(delay: Delay, t: jax.Array, with_wait: bool = True) -> jax.Array:
    """P(S + W <= t) for t > 0: P(S <= t) - Σ ρ_i E[exp(-(t - S) / m_i); S <= t] over the waits i
    (integrating each exponential wait out), the expectation by Gauss-Legendre in the normal
    variate of each kind, nodes gathered towards S = t where the integrand peaks. ``with_wait``
    False (static): no wait, the mix's CDF alone."""
    z_t = _kind_cdf_z(t, delay.means, delay.sigmas)  # (k,)
    below = ndtr(z_t)
    if not with_wait:
        return jnp.sum(delay.weights * below)
    span = z_t - _Z_LOW
    z = z_t[:, None] - span[:, None] * _GL_U[None, :] ** 2  # (k, n)
    s = delay.means[:, None] * jnp.exp(delay.sigmas[:, None] * z - 0.5 * delay.sigmas[:, None] ** 2)
    left = jnp.maximum(t - s, 0.0)
    waiting = _per_kind(delay.busy) * jnp.exp(-left / jnp.maximum(_per_kind(delay.wait_ms), 1e-30))
    if delay.slot_busy is not None:  # the second wait, exclusive of the first
        waiting = waiting + _per_kind(delay.slot_busy) * jnp.exp(-left / jnp.maximum(_per_kind(delay.slot_wait_ms),
                                                                                        1e-30))
    density = jnp.exp(-0.5 * z * z) * waiting / jnp.sqrt(2.0 * jnp.pi)
    integral = jnp.sum(density * 2.0 * span[:, None] * _GL_U[None, :] * _GL_WU[None, :], axis=1)
    return jnp.sum(delay.weights * (below - integral))


_LEVELS = tuple(p / 100.0 for p in PERCENTILES)
_ZQ = tuple(_Z[p] for p in PERCENTILES)
_ZH = tuple(_Z_UPPER[p] for p in PERCENTILES)


def delay_quantiles(delay: Delay, with_wait: bool = True) -> tuple[jax.Array, ...]:
    """The `PERCENTILES` of S + W, each by bisection in log t between bounds that always hold:
    no kind's own quantile is below it, and the sum of the kinds' and the wait's
    (1 + q) / 2-quantiles is above it."""
    out = []
    # P(W > x) <= (ρ + ρ_slot) exp(-x / the longer mean)
    busy, longest = delay.busy, delay.wait_ms
    if delay.slot_busy is not None:
        busy = busy + delay.slot_busy
        longest = jnp.maximum(longest, jnp.where(delay.slot_busy > 0, delay.slot_wait_ms, 0.0))
    for q, zq, zh in zip(_LEVELS, _ZQ, _ZH):
        lo = jnp.min(delay.means * jnp.exp(delay.sigmas * zq - 0.5 * delay.sigmas ** 2))
        upper_kind = jnp.max(delay.means * jnp.exp(delay.sigmas * zh - 0.5 * delay.sigmas ** 2))
        upper_wait = jnp.max(longest * jnp.log(jnp.maximum(2.0 * busy / (1.0 - q), 1.0)))
        log_t = increasing_quantile(lambda x: delay_cdf(delay, jnp.exp(x), with_wait), q - _LEVEL_TOLERANCE,
                                    jnp.log(lo), jnp.log(upper_kind + upper_wait), _BISECTIONS)
        out.append(jnp.exp(log_t))
    return tuple(out)


def normal_mix_quantiles(weights, means, sds) -> tuple[jax.Array, ...]:
    """The `PERCENTILES` of a mix of normals (shape (k,) each), by bisection.

    A spread is held above what the bisection resolves (2^-20 of the span between the kinds'
    means, 64 of its final steps) and 16 ulps of its mean: a kind of no spread (an ITL where the
    batch's spread is 0) is a step in the CDF, and its quantile's derivative, the implicit
    function's, is evaluated where the bisection stopped, which must lie within a few spreads of
    the kind (further out the density underflows, and the derivative came out 0 or 1e250, not 1).
    """
    span = jnp.max(means) - jnp.min(means)
    floor = jnp.maximum(jnp.maximum(1e-9, 16.0 * jnp.finfo(jnp.result_type(means)).eps) * jnp.abs(means),
                        span * 2.0 ** -20)
    sds = jnp.maximum(sds, jax.lax.stop_gradient(floor) + 1e-30)  # (a floor, not a spread: no derivative)
    lo, hi = jnp.min(means - 9.0 * sds), jnp.max(means + 9.0 * sds)
    return tuple(jnp.maximum(increasing_quantile(lambda t: jnp.sum(weights * ndtr((t - means) / sds)),
                                                 q - _LEVEL_TOLERANCE, lo, hi, _BISECTIONS), 0.0)
                 for q in _LEVELS)


class TurnSpread(NamedTuple):
    """What the percentiles need from one point's solved turn (scalars).

    Attributes:
        ttft_ms: mean TTFT [ms]. wait_ms: the part of it spent queueing, for prefill and for a
            KV slot (open loop).
        wait_busy: the chance a request queues for prefill (open loop; 0 in the closed loop;
            the KV slot's is ``slot_busy``).
        mix: the prefill hit/miss mix (`jaxpareto.physics.queueing.prefill_mix`).
        tpot_ms: mean TPOT [ms]. osl: mean output tokens. osl_cv: its coefficient of variation.
        decode_step_ms, mixed_step_ms: T_0 and T_f, a step without and with a prefill chunk [ms].
        mixed_time_share: share of time in steps with a prefill chunk.
        batch: B. batch_variance: the variance of the batch a step sees.
        step_slope_ms: a decode step's added time per extra request in the batch over the
            batch's spread [ms].
        turn_rate_per_ms: the other requests' turns starting per ms (whose prefills land in a
            request's decode steps).
        tpot_cap_ms: the longest TPOT the server allows (the open loop's KV slots all busy:
            `jaxpareto.physics.open_engine.saturated_tpot_ms`); the quantiles stop there.
        prefill_dispersion: F_c, the index of dispersion of the prefills landing in a request's
            decode steps (1: Poisson; the open loop's clusters,
            `jaxpareto.physics.open_engine`).
        fixed_ms: the part of TTFT every request waits alike, no prefill's work (the scheduler's
            delay, `jaxpareto.definitions.engine.Engine.scheduler_delay_steps`) [ms]: it shifts
            the TTFT and E2E quantiles, and is not spread with the prompt lengths.
        service_scv: the squared coefficient of variation of the prefill's service where the
            open loop's steps give it (prompts under one chunk: the step in progress and the
            step that carries the prompt, its length included, `jaxpareto.physics.open_engine`);
            0 elsewhere, where the prompt lengths spread it.
        prefill_service_ms: a prefill's own time in the steps that carry it, where TTFT holds
            more than that and its queueing wait (the closed loop's shared engine: TTFT is S /
            (1 - ρ') under processor sharing, and the sessions waiting for memory): what one
            prefill adds to the decode steps it shares [ms]. None: TTFT less the wait and
            ``fixed_ms``.
        batch_rise_ms: the decode step's rise from the seen batch B to each of the batch's
            `seen_batch_quantiles` (T(B_p) - T(B), shape (len(TAIL_PERCENTILES),)) [ms]: those
            TPOT quantiles stop at the mean plus it plus the prefill chunks' own deviation (the
            two parts' quantiles summed). None: no bound.
        fastest_step_ms: a decode step of one request alone [ms]: no TPOT or ITL quantile lies
            below it (the lognormal and the normals would put some of their mass there).
        longest_rise_ms: the decode step's rise from B to the most requests a step decodes (the
            slots, or the decoders the shared engine's prefill budget feeds) [ms]: no ITL
            quantile lies above the longer step kind plus it.
        step_wait_ms: the part of the service that is the wait for the step in progress (the
            open loop's shared engine) [ms]: every prompt waits it alike, so it is added to each
            hit/miss kind's own time rather than scaled with its tokens, and the service's
            spread beyond the prompt lengths' (``service_scv`` less theirs) is each kind's alike.
        arrival_split: the open loop's shared-engine waits by the kind of step a prompt arrives
            in (`jaxpareto.physics.open_engine.ArrivalSplit`; None: no split). Given, each
            hit/miss kind is split in two, arrived in a step with prefill or not, each with its
            own wait for the step in progress (mean and variance) and its own chance and mean of
            being carried past steps (module docstring); the waits are then the split's (the
            engine's and the KV slots' apart), not ``wait_ms`` and ``wait_busy``, their merge.
        slot_busy, slot_wait_ms: P(a request waits for a KV slot) and the mean of that wait over
            all requests [ms], which ``wait_ms`` holds besides the engine's and ``wait_busy`` does
            not (the open loop; None: no slot wait, the closed loop): the slot's wait is a wait of
            its own, in the split as without it.
    """

    ttft_ms: jax.Array
    wait_ms: jax.Array
    wait_busy: jax.Array
    mix: PrefillMix
    tpot_ms: jax.Array
    osl: jax.Array
    osl_cv: jax.Array
    decode_step_ms: jax.Array
    mixed_step_ms: jax.Array
    mixed_time_share: jax.Array
    batch_variance: jax.Array
    step_slope_ms: jax.Array
    turn_rate_per_ms: jax.Array
    prefill_dispersion: jax.Array = 1.0
    tpot_cap_ms: jax.Array = float("inf")
    fixed_ms: jax.Array = 0.0
    service_scv: jax.Array = 0.0
    prefill_service_ms: jax.Array | None = None
    batch_rise_ms: jax.Array | None = None
    step_wait_ms: jax.Array = 0.0
    fastest_step_ms: jax.Array = 0.0
    longest_rise_ms: jax.Array = float("inf")
    arrival_split: NamedTuple | None = None
    slot_busy: jax.Array | None = None
    slot_wait_ms: jax.Array | None = None


def _exclusive_waits(engine_busy, engine_mean_ms, slot_busy, slot_mean_ms):
    """The engine's wait for prompts ahead and the KV slot's wait as exclusive exponential waits
    (`Delay`): (busy, wait_ms, slot_busy, slot_wait_ms), chances and conditional means [ms], from
    each wait's chance and its mean over all requests. A request finding every slot busy waits
    for one and not for prompts ahead as well, the engine having mostly worked off its prefill
    queue by the time a slot frees (in the simulated server's rows where the slots bind, slot
    waiters wait 5-57 % of the others' mean for prompts ahead); the engine's waits fall to the
    others, its chance at most what the slots leave and, where that cuts it, its mean going with
    it, so the two waits' means add up to the model's."""
    slot_busy = jnp.clip(slot_busy, 0.0, 1.0)
    engine = jnp.minimum(jnp.clip(engine_busy, 0.0, 1.0), 1.0 - slot_busy)
    wait = jnp.where(engine > 0, engine_mean_ms / jnp.maximum(engine, 1e-30), 0.0)
    slot_wait = jnp.where(slot_busy > 0, slot_mean_ms / jnp.maximum(slot_busy, 1e-30), 0.0)
    return engine, wait, slot_busy, slot_wait


class LatencyPercentiles(NamedTuple):
    """P50, P90, P99 of each latency [ms] (tuples in `PERCENTILES` order)."""

    ttft_ms: tuple
    tpot_ms: tuple
    itl_ms: tuple
    e2el_ms: tuple


def seen_batch_quantiles(batch: jax.Array, batch_variance: jax.Array) -> list[jax.Array]:
    """The batch a request sees over its turn at each of `TAIL_PERCENTILES`: lognormal of mean
    ``batch`` and the turn-averaged variance (x 2/3, `latency_percentiles`), scalars.

    A count's spread (Poisson, binomial) is skewed right like a lognormal's; a decode step's
    time is an increasing function of the batch, so its quantiles are the step's at these
    batches (a monotone map keeps quantiles).
    """
    sd = sqrt_or_zero(_AVERAGED_BATCH_VARIANCE * batch_variance)
    mean = jnp.maximum(batch, 1e-9)
    return [lognormal_quantile(mean, sd / mean, p) for p in TAIL_PERCENTILES]


def latency_percentiles(spread: TurnSpread, with_wait: bool = True) -> LatencyPercentiles:
    """The percentiles of the module docstring for one point (``with_wait`` False, static: the
    closed loop, no queueing wait to add).

    Returns:
        `LatencyPercentiles`; NaN where the inputs are (an infeasible or unstable point).
    """
    mix = spread.mix
    service = jnp.maximum(spread.ttft_ms - spread.wait_ms - spread.fixed_ms, 1e-9)
    weights = jnp.stack([mix.hit_share, 1.0 - mix.hit_share])
    # each kind's own steps in proportion to its tokens, and the step in progress alike for all
    step_wait = jnp.clip(spread.step_wait_ms, 0.0, service)
    own = service - step_wait
    scales = jnp.stack([mix.hit_scale, mix.miss_scale])
    prefill_means = own * scales + step_wait
    # the prompt lengths spread each kind's own time in proportion (cv), and, where the open
    # loop's steps give the service its spread (prompts under one chunk: the step in progress
    # and the step that carries the prompt, the prompts' lengths included), the rest of that
    # spread is the steps', each kind's alike
    given = spread.service_scv > 0.0
    lengths_variance = (mix.cv * own) ** 2  # the mean prompt's, at most the whole spread the steps give
    lengths_variance = jnp.where(given, jnp.minimum(lengths_variance, spread.service_scv * service ** 2),
                                 lengths_variance)
    steps_variance = jnp.where(given, spread.service_scv * service ** 2 - lengths_variance, 0.0)
    prefill_variance = steps_variance + lengths_variance * scales ** 2
    split = spread.arrival_split
    slot = ()
    if split is None:
        if spread.slot_busy is None:
            busy = jnp.clip(spread.wait_busy, 0.0, 1.0)
            wait = jnp.where(busy > 0, spread.wait_ms / jnp.where(busy > 0, busy, 1.0), 0.0)
        else:  # the KV slot's wait apart from the engine's, as in the split below
            engine_wait = jnp.maximum(spread.wait_ms - spread.slot_wait_ms, 0.0)
            busy, wait, *slot = _exclusive_waits(spread.wait_busy, engine_wait, spread.slot_busy, spread.slot_wait_ms)
    else:
        # the kinds arrived in a step with prefill, then those that did not: each its own wait for
        # the step in progress (its conditional mean and variance in place of the whole wait's),
        # and its own chance of being carried past steps and mean wait when it is
        prefill_share = jnp.clip(split.prefill_share, 0.0, 1.0)
        shares = jnp.stack([prefill_share, 1.0 - prefill_share])
        step_means = jnp.stack([split.prefill_wait_ms, split.other_wait_ms])
        step_variances = jnp.stack([split.prefill_wait_variance, split.other_wait_variance])
        # the wait for prompts ahead by kind, and the wait for a KV slot, every kind's alike, as
        # a wait of its own (`_exclusive_waits`)
        engine_busy = jnp.clip(split.carried, 0.0, 1.0)
        carried = jnp.clip(jnp.stack([split.prefill_carried, engine_busy - split.prefill_carried]), 0.0, engine_busy)
        overflow_share = jnp.clip(split.prefill_overflow_share, 0.0, 1.0)
        ahead = split.queue_wait_ms * jnp.stack([overflow_share, 1.0 - overflow_share])  # E[wait; kind]
        kind_share = jnp.maximum(shares, 1e-30)
        # each kind's chance of waiting for prompts ahead and its mean wait for them
        slot_given = spread.slot_busy is not None
        engine, engine_wait, slot_busy, slot_wait = _exclusive_waits(
            carried / kind_share, ahead / kind_share, spread.slot_busy if slot_given else 0.0,
            spread.slot_wait_ms if slot_given else 0.0)
        weights = (shares[:, None] * weights[None, :]).ravel()
        prefill_means = (own * scales[None, :] + step_means[:, None]).ravel()
        prefill_variance = jnp.maximum(steps_variance - split.wait_variance + step_variances[:, None]
                                       + lengths_variance * scales[None, :] ** 2, 0.0).ravel()
        busy, wait = jnp.repeat(engine, scales.shape[0]), jnp.repeat(engine_wait, scales.shape[0])
        slot = (jnp.broadcast_to(slot_busy, busy.shape), jnp.broadcast_to(slot_wait, busy.shape))
    prefill_cv = sqrt_or_zero(prefill_variance) / jnp.maximum(prefill_means, 1e-30)
    ttft = Delay(weights, prefill_means, lognormal_sigma(prefill_cv), busy, wait, *slot)

    # a request's TPOT: the batch averaged over its turn, and the prefill chunks it decodes through
    step_sd = spread.step_slope_ms * sqrt_or_zero(spread.batch_variance)
    decode_ms = spread.osl * spread.tpot_ms
    # a prefill's own steps, not its processor-sharing slowdown: its chunk shares those steps
    own = service if spread.prefill_service_ms is None else spread.prefill_service_ms
    per_prefill_ms = own * jnp.maximum(spread.mixed_step_ms - spread.decode_step_ms, 0.0) \
        / jnp.maximum(spread.mixed_step_ms, 1e-30)
    # the share of a request's steps that carry a prefill cannot pass 1: the count's variance has
    # the binomial factor 1 - c_f of that share (0 when every step carries one)
    steps_f = spread.mixed_time_share / spread.mixed_step_ms
    steps_0 = (1.0 - spread.mixed_time_share) / spread.decode_step_ms
    share_f = steps_f / (steps_f + steps_0)
    chunk_variance = spread.turn_rate_per_ms * decode_ms * (1.0 + mix.scv) * per_prefill_ms ** 2 * \
        spread.prefill_dispersion * (1.0 - share_f)
    # clusters of prefills bring their requests with them: the two parts move together, with the
    # correlation 1 - 1 / F of a count whose excess variance is the clusters' (0 when Poisson)
    batch_sd = jnp.sqrt(_AVERAGED_BATCH_VARIANCE) * step_sd
    chunk_sd = sqrt_or_zero(chunk_variance) / jnp.maximum(spread.osl, 1.0)
    together = 1.0 - 1.0 / jnp.maximum(spread.prefill_dispersion, 1.0)
    tpot_sd = sqrt_or_zero(batch_sd ** 2 + chunk_sd ** 2 + 2.0 * together * batch_sd * chunk_sd)
    tpot_cv = tpot_sd / spread.tpot_ms
    tpot = [lognormal_quantile(spread.tpot_ms, tpot_cv, p) for p in PERCENTILES]
    lognormal_top = tpot[-1]
    if spread.batch_rise_ms is not None:
        # the lognormal's right tail can pass what the batch makes possible where T(B) levels off
        # (a mixture of experts once all are awake): an upper quantile is at most the step at the
        # batch's quantile plus the prefill chunks' own deviation, the two summed as if they
        # moved together (for a dense model's linear T(B) the bound lies above the lognormal)
        chunk_cv = chunk_sd / spread.tpot_ms
        bound = dict(zip(TAIL_PERCENTILES, spread.batch_rise_ms))
        tpot = [jnp.minimum(q, bound[p] + lognormal_quantile(spread.tpot_ms, chunk_cv, p)) if p in bound else q
                for p, q in zip(PERCENTILES, tpot)]
    bounded_top = tpot[-1]
    tpot = tuple(jnp.maximum(jnp.minimum(q, jnp.maximum(spread.tpot_cap_ms, spread.tpot_ms)), spread.fastest_step_ms)
                 for q in tpot)

    # an ITL is one step: the share of steps with a prefill chunk is time share / T_f over the mean
    itl_w = jnp.stack([1.0 - share_f, share_f])
    itl_m = jnp.stack([spread.decode_step_ms, spread.mixed_step_ms])
    itl = normal_mix_quantiles(itl_w, itl_m, jnp.stack([step_sd, step_sd]))
    # one step: at most the longer kind's at the most a step decodes, at least one request's alone
    itl = tuple(jnp.maximum(jnp.minimum(q, jnp.max(itl_m) + spread.longest_rise_ms), spread.fastest_step_ms)
                for q in itl)

    # E2E: each prefill kind plus the decode time as one lognormal of matched moments
    # where the batch bounds TPOT's tail, the decode time takes the spread that bound implies: the
    # lognormal through the mean and the bounded P99 (its σ the smaller root of
    # z σ - σ²/2 = ln(P99 / mean)); else a P99 E2E SLO would keep the islands P99 TPOT lost
    z, log_ratio = _Z[PERCENTILES[-1]], jnp.log(jnp.maximum(bounded_top / spread.tpot_ms, 1.0))
    tail_sigma = z - sqrt_or_zero(z * z - 2.0 * log_ratio)
    tpot_cv = jnp.where(bounded_top < lognormal_top, sqrt_or_zero(jnp.expm1(tail_sigma * tail_sigma)), tpot_cv)
    decode_cv2 = (1.0 + spread.osl_cv ** 2) * (1.0 + tpot_cv ** 2) - 1.0
    means = prefill_means + decode_ms
    variance = prefill_variance + decode_ms ** 2 * decode_cv2
    e2el = ttft._replace(means=means, sigmas=lognormal_sigma(sqrt_or_zero(variance) / means))
    shifted = lambda quantiles: tuple(q + spread.fixed_ms for q in quantiles)  # noqa: E731
    return LatencyPercentiles(shifted(delay_quantiles(ttft, with_wait)), tpot, itl,
                              shifted(delay_quantiles(e2el, with_wait)))
