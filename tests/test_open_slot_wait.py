"""The open loop's wait for a KV slot (`jaxpareto.physics.queueing.slot_wait_ms`) and its place in
the latency percentiles (`jaxpareto.physics.percentiles.Delay`): the chance of waiting against an
independent float64 reference of the occupancy's negative binomial and the clusters' longer tail,
a latency with two exclusive waits against a Monte Carlo sample of it, and the simulated server's
own record of each request's slot wait and hold (`simulator.simulate`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxpareto.physics.percentiles import PERCENTILES, Delay, delay_quantiles
from jaxpareto.physics.queueing import slot_wait_ms
from reference import erlang_c


def _reference(slots, rate, hold, hold_scv, hold_full, fano, dispersion):
    """(W, P(wait)) summed term by term: the negative binomial below M slots (Poisson at F = 1),
    a geometric tail of ratio σ beyond them for the mean wait's P_M, and that tail (F_a + 1) / 2
    times as long for the chance of waiting. (At F = 1 the model's T_hold is flat: T_hold(M) = T_hold.)"""
    mean = rate * hold
    sigma = rate * hold_full / slots
    n = np.arange(slots)
    if fano == 1.0:
        law = stats.poisson(mean)
    else:
        law = stats.nbinom(mean / (fano - 1.0), 1.0 / fano)
    below = law.pmf(n).sum()
    tail = law.pmf(slots) / (1.0 - sigma)
    full = tail / (below + tail)
    wait = full * hold_full / (slots * (1.0 - sigma)) * 0.5 * (dispersion + hold_scv)
    longer = tail * 0.5 * (dispersion + 1.0)
    return wait, longer / (below + longer)


@pytest.mark.parametrize("slots, rate, hold, hold_full, fano, dispersion, hold_scv", [
    (29, 1.45e-3, 9_295.0, 13_557.0, 5.56, 3.29, 0.0),  # 16K-token prompts at 80 % of the slots
    (40, 2.2e-3, 12_000.0, 14_700.0, 6.4, 3.6, 0.0),
    (97, 5.6e-3, 11_000.0, 13_600.0, 6.8, 4.0, 0.24),
    (14, 1.2e-3, 5_800.0, 8_800.0, 2.8, 1.24, 0.0),  # prefix-cached turns: few clusters
    (12, 1.0e-3, 4_000.0, 4_000.0, 1.0, 1.0, 1.0),  # M/M/M: Erlang's C formula
    (12, 1.0e-3, 4_000.0, 4_000.0, 1.0, 0.5, 0.3),  # arrivals more regular than Poisson
])
def test_the_chance_of_waiting_takes_the_clusters_longer_tail(slots, rate, hold, hold_full, fano, dispersion,
                                                              hold_scv):
    with jax.enable_x64(True):
        wait, waits = (float(v) for v in slot_wait_ms(float(slots), rate, hold, hold_scv, hold_full, fano, dispersion))
    ref_wait, ref_waits = _reference(slots, rate, hold, hold_scv, hold_full, fano, dispersion)
    np.testing.assert_allclose(waits, ref_waits, rtol=1e-9)
    np.testing.assert_allclose(wait, ref_wait, rtol=1e-9)


def test_poisson_arrivals_wait_with_erlangs_chance():
    """At F = F_a = 1 the slots are an M/M/M queue: P(wait) is Erlang's C formula, and the
    clusters' factor (F_a + 1) / 2 leaves it there; clusters make a wait likelier, regular
    arrivals less likely, and the mean wait does not depend on the chance's factor."""
    with jax.enable_x64(True):
        slots, rate, hold = 12.0, 1e-3, 8_000.0
        a = rate * hold
        erlang = erlang_c(12, a)
        wait, waits = slot_wait_ms(slots, rate, hold, 1.0)
        np.testing.assert_allclose(float(waits), erlang, rtol=1e-9)
        np.testing.assert_allclose(float(wait), erlang * hold / (slots - a), rtol=1e-9)
        _, clustered = slot_wait_ms(slots, rate, hold, 1.0, fano=1.0, arrival_dispersion=3.0)
        _, regular = slot_wait_ms(slots, rate, hold, 1.0, fano=1.0, arrival_dispersion=0.25)
        assert float(regular) < erlang < float(clustered)
        odds = lambda p: p / (1 - p)  # noqa: E731
        np.testing.assert_allclose(odds(float(clustered)), 2.0 * odds(erlang), rtol=1e-9)


def test_beyond_capacity_every_request_waits_without_end():
    with jax.enable_x64(True):
        wait, waits = slot_wait_ms(10.0, 1e-3, 8_000.0, 0.0, 11_000.0, 4.0, 3.0)  # σ = 1.1
    assert float(waits) == 1.0 and float(wait) == np.inf


def test_a_latency_with_two_exclusive_waits_against_a_sample_of_it():
    """TTFT = S + W, S lognormal (two kinds), W one of: none, the engine's exponential wait (per
    kind), the slot's exponential wait: the quantiles within 0.3 % of 4 million draws."""
    weights, means, cvs = np.array([0.3, 0.7]), np.array([400.0, 900.0]), np.array([0.2, 0.5])
    busy, wait = np.array([0.35, 0.2]), np.array([150.0, 260.0])
    slot_busy, slot_wait = 0.08, 2_000.0
    sigmas = np.sqrt(np.log1p(cvs ** 2))
    with jax.enable_x64(True):
        delay = Delay(*map(jnp.asarray, (weights, means, sigmas, busy, wait)),
                      jnp.full(2, slot_busy), jnp.full(2, slot_wait))
        got = np.array([float(q) for q in delay_quantiles(delay)])
    rng = np.random.default_rng(7)
    n = 4_000_000
    k = (rng.random(n) < weights[1]).astype(int)  # each draw's kind
    s = means[k] * np.exp(rng.normal(-0.5 * sigmas[k] ** 2, sigmas[k]))
    u = rng.random(n)
    engine, slot = u < busy[k], (u >= busy[k]) & (u < busy[k] + slot_busy)
    w = np.where(engine, rng.exponential(wait[k]), 0.0) + np.where(slot, rng.exponential(slot_wait, n), 0.0)
    np.testing.assert_allclose(got, np.percentile(s + w, PERCENTILES), rtol=3e-3)
    # without the slot's wait the same Delay is the one-wait latency
    with jax.enable_x64(True):
        none = Delay(*map(jnp.asarray, (weights, means, sigmas, busy, wait)), jnp.zeros(2), jnp.full(2, slot_wait))
        one = Delay(*map(jnp.asarray, (weights, means, sigmas, busy, wait)))
        np.testing.assert_allclose([float(q) for q in delay_quantiles(none)], [float(q) for q in delay_quantiles(one)],
                                   rtol=1e-12)


def test_the_simulated_server_holds_a_slot_from_admission_to_the_last_token():
    """The simulated server's KV-slot bookkeeping (`simulator.simulate`, ``slot_wait_ms`` and
    ``hold_ms``): a request's E2E latency is its slot wait plus its hold; at no time do more than
    M requests hold a slot; without a limit nobody waits; and a request that finds a slot free
    during the step it arrives in does not wait (regular arrivals far apart never do)."""
    from simulator import simulate

    def step(decoding, prefill_tokens):  # a toy engine step [ms]
        return 10.0 + 0.05 * decoding + 0.002 * prefill_tokens

    free = simulate(step, 20.0, 2_000, 500.0, 40.0, 512.0, warmup=0.0)
    assert (free.slot_wait_ms == 0.0).all()
    np.testing.assert_allclose(free.hold_ms, free.e2el_ms, rtol=1e-12)
    sparse = simulate(step, 0.5, 500, 500.0, 40.0, 512.0, warmup=0.0, slots=2, arrival_cv=0.05)
    assert (sparse.slot_wait_ms == 0.0).all()
    busy = simulate(step, 15.0, 4_000, 500.0, 40.0, 512.0, warmup=0.0, slots=8, seed=3)
    np.testing.assert_allclose(busy.slot_wait_ms + busy.hold_ms, busy.e2el_ms, rtol=1e-9)
    assert 0.05 < (busy.slot_wait_ms > 0).mean() < 0.95 and (busy.hold_ms > 0).all()
    # the holders over time: +1 when a slot is taken, -1 at the last token (released first at a tie)
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(1000.0 / 15.0, 4_000))  # simulate's own draws for this seed
    taken, released = arrivals + busy.slot_wait_ms, arrivals + busy.e2el_ms
    times = np.concatenate([released, taken])
    order = np.lexsort((np.r_[np.zeros(len(released)), np.ones(len(taken))], times))
    holders = np.cumsum(np.r_[-np.ones(len(released)), np.ones(len(taken))][order])
    assert holders.max() == 8 and holders.min() >= 0
