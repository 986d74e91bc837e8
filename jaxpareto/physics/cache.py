"""Prefix-cache retention: the hit rate as a result of pause length and KV memory.

The grid's hit rate h is that of a warm cache (the share of a turn's prompt a cached prefix
covers). A cache model says how often the prefix is still cached when the session returns after
its pause Z, and the hit rate used is h x that survival:

- ``cache_model="given"``: always (the seed's model).
- ``cache_model="ttl"``: the cache keeps a prefix for a fixed retention time, so it survives if
  Z < TTL. Anthropic's prompt cache keeps 5 minutes (1 hour optional); TraceLab measures 85.4 %
  hits at a 1-minute TTL and 98.6 % at 1 hour (the TraceLab agent-trace study).
- ``cache_model="lru"``: the KV memory the active sessions leave free holds the caches of paused
  sessions under LRU. By the characteristic-time approximation (Che, Tung and Wang 2002; Fricker,
  Robert and Roberts 2012 for its accuracy), an entry survives while younger than T_c, where T_c
  makes the expected number of cached entries fill the free memory:
  N_paused x P(age < T_c) = free slots. The age of a paused session (time since its pause
  began) has the equilibrium density P(Z > a) / E[Z] of renewal theory, and the cache survives
  the pause if Z < T_c.

Pauses of mean Z are

- deterministic: P(Z < t) = 1 if Z < t; P(age < t) = min(t / Z, 1);
- exponential: P(Z < t) = P(age < t) = 1 - exp(-t / Z) (memoryless);
- lognormal with log-spread σ (μ = ln Z - σ² / 2): P(Z < t) = Φ((ln t - μ) / σ) and
  P(age < t) = [t (1 - Φ((ln t - μ) / σ)) + Z Φ((ln t - μ - σ²) / σ)] / Z.

Under LRU a session's whole cache is evicted at once, so a miss prefills the whole context.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr

from jaxpareto.definitions.options import PAUSE_DISTRIBUTIONS
from jaxpareto.physics.roots import InnerRoot, inner_root

LOG_BRACKET = 30.0  # the lognormal T_c / Z in [e^-30, e^30]


def _safe_mean(think_time_s):
    return jnp.maximum(think_time_s, 1e-12)  # a zero pause always finds its cache (every limit)


def pause_cdf(t: jax.Array, think_time_s: jax.Array, distribution: str, sigma: jax.Array) -> jax.Array:
    """P(Z < t) for pauses of mean ``think_time_s`` [s]; ``t`` [s] may be inf.

    Args:
        t: time [s] (scalar, > 0).
        think_time_s: mean pause Z [s] (scalar, >= 0).
        distribution: one of `PAUSE_DISTRIBUTIONS` (static).
        sigma: lognormal log-spread σ.
    """
    z = _safe_mean(think_time_s)
    if distribution == "deterministic":
        return jnp.where(z < t, 1.0, 0.0)
    if distribution == "exponential":
        return 1.0 - jnp.exp(-t / z)
    mu = jnp.log(z) - 0.5 * sigma * sigma
    return ndtr((jnp.log(t) - mu) / sigma)


def paused_age_cdf(t: jax.Array, think_time_s: jax.Array, distribution: str, sigma: jax.Array) -> jax.Array:
    """P(age < t) for a session seen paused: the equilibrium distribution of its pause [s]."""
    z = _safe_mean(think_time_s)
    if distribution == "deterministic":
        return jnp.minimum(t / z, 1.0)
    if distribution == "exponential":
        return 1.0 - jnp.exp(-t / z)
    mu = jnp.log(z) - 0.5 * sigma * sigma
    log_t = jnp.log(t)
    return jnp.minimum(t * ndtr((mu - log_t) / sigma) / z + ndtr((log_t - mu - sigma * sigma) / sigma), 1.0)


def cache_survival(think_time_s: jax.Array, ttl_s: jax.Array, distribution: str, sigma: jax.Array) -> jax.Array:
    """``cache_model="ttl"``: P(Z < TTL) for a pause of mean ``think_time_s`` [s].

    Args:
        think_time_s: mean pause Z [s] (scalar, >= 0).
        ttl_s: cache retention [s] (> 0).
        distribution: one of `PAUSE_DISTRIBUTIONS` (static).
        sigma: lognormal log-spread σ.
    """
    if distribution not in PAUSE_DISTRIBUTIONS:
        raise ValueError(f"pause distribution {distribution!r} not in {PAUSE_DISTRIBUTIONS}")
    return pause_cdf(ttl_s, think_time_s, distribution, sigma)


def _log_odds(p: jax.Array) -> jax.Array:
    """ln(p / (1 - p)) for p in [0, 1], finite: p is kept a rounding step inside (0, 1)."""
    info = jnp.finfo(jnp.result_type(p))
    p = jnp.clip(p, info.tiny, 1.0 - info.epsneg)
    return jnp.log(p) - jnp.log1p(-p)


class LruSurvival(NamedTuple):
    """Outcome of the characteristic-time approximation for one point (scalars).

    Attributes:
        survival: P(Z < T_c), the share of returning sessions that find their cache.
        lifetime_s: T_c [s]; inf when every paused session's cache fits.
        root: lognormal pauses: ln(T_c / Z) and its residual (`lru_survival`); None otherwise.
    """

    survival: jax.Array
    lifetime_s: jax.Array
    root: InnerRoot | None = None


def lru_survival(free_slots: jax.Array, paused_sessions: jax.Array, think_time_s: jax.Array,
                 distribution: str, sigma: jax.Array, log_lifetime_given: jax.Array | None = None,
                 polish: bool = False) -> LruSurvival:
    """``cache_model="lru"``: the Che approximation's T_c and survival (module docstring).

    Args:
        free_slots: session caches the memory left by the active sessions holds (>= 0).
        paused_sessions: sessions in their pause (>= 0); none means nothing is ever evicted.
        think_time_s: mean pause Z [s].
        distribution: one of `PAUSE_DISTRIBUTIONS` (static).
        sigma: lognormal log-spread σ.
        log_lifetime_given, polish: lognormal pauses: ln(T_c / Z) given by the joint solve
            instead of solved here (`jaxpareto.physics.roots.inner_root`).

    Returns:
        `LruSurvival`; exact when everything fits (survival 1, T_c inf) or nothing does
        (survival 0, T_c 0).
    """
    if distribution not in PAUSE_DISTRIBUTIONS:
        raise ValueError(f"pause distribution {distribution!r} not in {PAUSE_DISTRIBUTIONS}")
    fits = free_slots >= paused_sessions
    # the share of paused sessions whose cache is kept, double-where'd away from 0/0 and 1
    share = jnp.where(fits, 0.5, free_slots / jnp.where(fits, 1.0, paused_sessions))
    z = _safe_mean(think_time_s)
    root = None
    if distribution == "exponential":
        lifetime = -z * jnp.log1p(-share)
    elif distribution == "deterministic":
        lifetime = share * z
    else:
        def excess(u):  # increasing in u = ln(T / Z); in log-odds, near linear in both tails
            return _log_odds(paused_age_cdf(z * jnp.exp(u), z, distribution, sigma)) - _log_odds(share)

        zero = 0.0 * z
        root = inner_root(excess, zero - LOG_BRACKET, zero + LOG_BRACKET, log_lifetime_given, polish)
        lifetime = z * jnp.exp(root.value)
    survival = pause_cdf(lifetime, z, distribution, sigma)
    return LruSurvival(jnp.where(fits, 1.0, survival), jnp.where(fits, jnp.inf, lifetime), root)
