"""The closed loop's wait for a KV slot under ``seen_batch="distribution"``
(`jaxpareto.physics.queueing.closed_slot_wait_turns`): the binomial tails against their exact
sums, its limits, its derivative, a finite-source queue simulated event by event, and the
whole model, where the fluid bound (no wait while the mean batch is under M) let a GPU with
more memory come out slower."""

from __future__ import annotations

import heapq

import jax
import numpy as np
import pytest
from scipy import stats

import jaxpareto as jp
from jaxpareto.physics.queueing import closed_slot_wait_chance, closed_slot_wait_turns


def _exact_turns(batch, concurrency, slots):
    """E[(K - M + 1)+] / M, K ~ binomial(C - 1, B / C), summed term by term (integers)."""
    others = np.arange(concurrency)
    pmf = stats.binom(concurrency - 1, batch / concurrency).pmf(others)
    return float(np.sum(np.maximum(others - slots + 1, 0) * pmf)) / slots


@pytest.mark.parametrize("concurrency, slots", [(2, 1), (4, 1), (8, 3), (8, 5), (8, 7), (33, 8), (200, 150)])
@pytest.mark.parametrize("share", [0.05, 0.35, 0.8, 0.999])
def test_binomial_tails_match_their_sums(concurrency, slots, share):
    batch = share * concurrency
    with jax.enable_x64(True):
        got = float(closed_slot_wait_turns(batch, float(concurrency), float(slots)))
    np.testing.assert_allclose(got, _exact_turns(batch, concurrency, slots), rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("concurrency, slots", [(2, 1), (8, 3), (8, 7), (33, 8), (200, 150)])
@pytest.mark.parametrize("share", [0.05, 0.35, 0.8, 0.999])
def test_chance_of_waiting_is_the_binomial_tail(concurrency, slots, share):
    """P(K >= M) against scipy's binomial survival function; 1 at Z = 0 where C > M, 0 where C <= M."""
    batch = share * concurrency
    with jax.enable_x64(True):
        got = float(closed_slot_wait_chance(batch, float(concurrency), float(slots)))
        assert float(closed_slot_wait_chance(float(concurrency), float(concurrency), float(slots))) == 1.0
        assert float(closed_slot_wait_chance(batch, float(slots), float(slots))) == 0.0
    want = stats.binom(concurrency - 1, share).sf(slots - 1)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-14)


def test_limits():
    with jax.enable_x64(True):
        # every session in its turn (Z = 0): the fluid R = S C / M, C - M of them queueing
        for c, m in [(8, 3), (16, 16), (100, 7), (3.5, 2.0)]:
            np.testing.assert_allclose(float(closed_slot_wait_turns(c, c, m)), max(c - m, 0.0) / m, rtol=1e-12)
        # never M others in their turn: no wait, at any batch
        for b in [0.1, 2.0, 5.0]:
            assert float(closed_slot_wait_turns(b, 5.0, 5.0)) == 0.0
            assert float(closed_slot_wait_turns(b, 5.0, 9.0)) == 0.0
        # one slot: every other session in its turn is ahead, (C - 1) B / C of them
        np.testing.assert_allclose(float(closed_slot_wait_turns(1.5, 6.0, 1.0)), 5.0 * 1.5 / 6.0, rtol=1e-12)


@pytest.mark.parametrize("function", [closed_slot_wait_turns, closed_slot_wait_chance])
def test_derivative_matches_finite_differences(function):
    """The mean wait and the chance of waiting (an objective or a constraint of the gradient
    search) against central differences in B and C."""
    grad = jax.grad(function, argnums=(0, 1))
    with jax.enable_x64(True):
        for batch, concurrency, slots in [(2.8, 8.0, 3.0), (9.5, 32.0, 8.0), (1.2, 4.0, 1.0), (7.9999, 8.0, 3.0)]:
            by_batch, by_concurrency = (float(g) for g in grad(batch, concurrency, slots))
            h = 1e-6
            fd_b = (float(function(batch + h, concurrency, slots))
                    - float(function(batch - h, concurrency, slots))) / (2 * h)
            fd_c = (float(function(batch, concurrency + 1e-4, slots))
                    - float(function(batch, concurrency - 1e-4, slots))) / 2e-4
            np.testing.assert_allclose(by_batch, fd_b, rtol=1e-5, atol=1e-12)
            np.testing.assert_allclose(by_concurrency, fd_c, rtol=1e-3, atol=1e-6)
        # at the edges (every session in its turn; M others impossible) the derivative is finite
        for args in [(8.0, 8.0, 3.0), (3.0, 5.0, 5.0)]:
            assert all(np.isfinite(float(g)) for g in grad(*args))


def _simulate(concurrency, slots, service_ms, think_ms, turns, seed):
    """C sessions alternating an exponential pause and a turn that holds one of M slots for an
    exponential time (first come, first served). Returns (mean wait, mean sessions in their turn,
    share of turns that wait)."""
    rng = np.random.default_rng(seed)
    events = [(rng.exponential(think_ms), 0, s) for s in range(concurrency)]
    heapq.heapify(events)
    busy, queue, arrived, waits = 0, [], {}, []
    in_turn, area, last, done = 0, 0.0, 0.0, 0
    while done < turns:
        time, kind, s = heapq.heappop(events)
        area += in_turn * (time - last)
        last = time
        if kind == 0:  # a turn starts and asks for a slot
            in_turn += 1
            arrived[s] = time
            if busy < slots:
                busy += 1
                waits.append(0.0)
                heapq.heappush(events, (time + rng.exponential(service_ms), 1, s))
            else:
                queue.append(s)
        else:  # a turn ends: its slot goes to the first in line
            in_turn -= 1
            done += 1
            heapq.heappush(events, (time + rng.exponential(think_ms), 0, s))
            if queue:
                first = queue.pop(0)
                waits.append(time - arrived[first])
                heapq.heappush(events, (time + rng.exponential(service_ms), 1, first))
            else:
                busy -= 1
    return float(np.mean(waits[1000:])), area / last, float(np.mean(np.asarray(waits[1000:]) > 0.0))


@pytest.mark.parametrize("concurrency, slots, service_ms, think_ms", [
    (8, 3, 16.0, 30.0),   # the agent loop below: B about M
    (8, 5, 16.0, 30.0),   # B well under M: the fluid bound says no wait
    (32, 8, 10.0, 30.0),  # B past M
    (16, 12, 10.0, 5.0),
])
def test_wait_follows_a_simulated_finite_source_queue(concurrency, slots, service_ms, think_ms):
    """Within 10 % of the simulated queue where the fluid bound misses by 29-100 %; with fewer
    sessions the arrival theorem's binomial law of the others over-counts them (2 on one slot:
    21 % over, 4 on one 18 %; not checked here). The chance of waiting within 20 % (the same
    over-count: up to 18 % over where most turns wait)."""
    wait, batch, waited = _simulate(concurrency, slots, service_ms, think_ms, turns=60_000, seed=1)
    with jax.enable_x64(True):
        model = service_ms * float(closed_slot_wait_turns(batch, float(concurrency), float(slots)))
        chance = float(closed_slot_wait_chance(batch, float(concurrency), float(slots)))
    fluid = service_ms * max(batch / slots - 1.0, 0.0)
    assert wait * 0.9 <= model <= wait * 1.1
    assert chance == pytest.approx(waited, rel=0.2)  # 0.60, 0.057, 0.79, 0.22 against 0.52, 0.055, 0.67, 0.22
    assert abs(fluid - wait) > 0.2 * wait


def _agent_loop(memory_gb, think_time_s, seen_batch):
    gpus = [jp.Hardware(name=f"m{int(m)}", memory_gb=float(m), bandwidth_gbs=4800.0, tflops_fp16=990.0,
                        tflops_fp8=1980.0) for m in memory_gb]
    return jp.sweep(gpu=gpus, model="llama-3.1-70b", tp=2, concurrency=8, think_time_s=think_time_s,
                    context_tokens=32768, hit_rate=0.0, prefill_model="shared", cache_model="lru", dtype="float64",
                    tol=1e-10, seen_batch=seen_batch,
                    variables=["turns_per_s", "memory_wait_ms", "memory_wait_probability", "concurrency_max",
                               "batch_eff"])


def test_more_memory_no_longer_slows_the_agent_loop():
    """Llama-3.1-70B at TP 2, 8 sessions pausing 30 s, 32K-token contexts: 90 GB holds 3 sessions'
    KV, 100 GB 5. Under the fluid bound ("mean") the 3 slots cost no wait at B = 2.8 and the
    turn sees a smaller batch, so 90 GB served more turns than 100 GB; with the wait a turn finds
    (about half of them find the 3 slots full) 90 GB serves fewer. At Z = 0 every session is in
    its turn and the two agree."""
    paused = _agent_loop([90.0, 100.0], 30.0, "distribution").squeeze()
    assert list(paused.concurrency_max.values) == [3, 5]
    x = paused.turns_per_s.values
    assert x[1] > x[0] * 1.05
    assert paused.memory_wait_ms.values[0] > 0.2 * 16_000  # several seconds at 90 GB; fluid: none
    fluid = _agent_loop([90.0, 100.0], 30.0, "mean").squeeze()
    assert fluid.memory_wait_ms.values[0] == 0.0 and fluid.turns_per_s.values[1] < fluid.turns_per_s.values[0]
    assert 0.3 < paused.memory_wait_probability.values[0] < 0.7 and fluid.memory_wait_probability.values[0] == 0.0
    busy = [_agent_loop([90.0, 100.0], 0.0, mode).squeeze() for mode in ("mean", "distribution")]
    np.testing.assert_allclose(busy[1].turns_per_s.values, busy[0].turns_per_s.values, rtol=1e-9)
    np.testing.assert_allclose(busy[1].memory_wait_ms.values, busy[0].memory_wait_ms.values, rtol=1e-9)
