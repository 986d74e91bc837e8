"""The batch a request sees (``seen_batch="distribution"``): the routed experts averaged over the
batch's law, checked against float64 quadrature of that law, finite differences, and the exact
occupancy of a decode engine whose steps slow down with its batch (a birth-death chain of state-
dependent speed, whose law is insensitive to the output lengths: Kelly, Reversibility and
Stochastic Networks, 1979, section 3.3), computed here from the model's own step times."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

import jaxpareto as jp
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.spec import parse_spec
from jaxpareto.physics.decode import BatchLaw, expected_experts_touched, experts_touched
from simulator import model_step

GPU, MODEL, TP, OSL = "h200-sxm", "mixtral-8x7b", 2, 256  # 8 experts, 2 a token: all awake at B = 4


def _gamma_mean(f, mean, variance):
    """E[f(Y)], Y ~ gamma of that mean and variance, by adaptive quadrature in float64."""
    law = stats.gamma(mean * mean / variance, scale=variance / mean)
    value, _ = integrate.quad(lambda y: f(y) * law.pdf(y), 0.0, law.ppf(1.0 - 1e-13), points=[3.0, 7.0], limit=400)
    return value


@pytest.mark.parametrize("routing", ["seed", "uniform"])
@pytest.mark.parametrize("ranks", [1.0, 4.0])
@pytest.mark.parametrize("seen,variance", [(1.3, 0.3), (3.0, 2.0), (4.0, 1.0), (6.5, 9.0), (2.2, 0.3)])
def test_expected_experts_are_the_laws_mean(routing, ranks, seen, variance):
    """The request itself (1 / D of a rank's batch) and gamma-distributed others (their mean
    seen - 1, their variance over D)."""
    experts, per_token = 8.0 / ranks, 2.0  # a rank's share of Mixtral's experts under the seed's routing
    with jax.enable_x64(True):
        own = 1.0 / ranks
        law = BatchLaw(own, jnp.float64(seen - 1.0), jnp.float64(variance / ranks))
        got = float(expected_experts_touched(law, jnp.float64(experts), jnp.float64(per_token), routing))
        touched = np.vectorize(lambda x: float(experts_touched(jnp.float64(x), experts, per_token, routing)))
        want = _gamma_mean(lambda y: touched(own + y), seen - 1.0, variance / ranks)
        assert got == pytest.approx(want, rel=1e-7)
        # Jensen, and a request sees itself at least
        assert float(touched(own)) - 1e-12 <= got <= float(touched(own + seen - 1.0)) + 1e-12
        at_mean = float(experts_touched(jnp.float64(seen), experts, per_token, routing))
        if ranks == 1.0:  # variance 0: the count at the mean
            at_zero = expected_experts_touched(law._replace(variance=0.0), experts, per_token, routing)
            assert float(at_zero) == pytest.approx(at_mean, rel=1e-15)


def test_many_others_take_the_normal_law():
    """Past a gamma shape of 50 the normal law's partial expectation stands in (float32 keeps its
    precision there); it agrees with the gamma law's quadrature."""
    with jax.enable_x64(True):
        for seen, variance in [(40.0, 30.0), (120.0, 100.0)]:
            law = BatchLaw(1.0, jnp.float64(seen - 1.0), jnp.float64(variance))
            got = float(expected_experts_touched(law, 256.0, 8.0, "seed"))
            want = _gamma_mean(lambda y: min(8.0 * (1.0 + y), 256.0), seen - 1.0, variance)
            assert got == pytest.approx(want, rel=2e-3)


def test_a_request_always_sees_itself():
    """One rank's share of the experts is K (E / (D K) = 1): a request alone already wakes them all,
    whatever the others do (the normal law over the whole batch had put 1.92 of 2)."""
    assert float(expected_experts_touched(BatchLaw(1.0, jnp.float32(0.5), 0.25), 2.0, 2.0, "seed")) \
        == pytest.approx(2.0)
    for ranks in (1.0, 4.0):
        law = BatchLaw(1.0 / ranks, jnp.float32(0.2), 0.2 / ranks)
        assert float(expected_experts_touched(law, 8.0 / ranks, 2.0, "seed")) >= 2.0 / ranks - 1e-6


def test_expected_experts_gradients_match_finite_differences():
    with jax.enable_x64(True):
        for mean, variance, experts, routing in [(3.0, 2.0, 8.0, "seed"), (4.5, 0.5, 8.0, "seed"),
                                                  (1.2, 4.0, 8.0, "seed"), (3.0, 2.0, 8.0, "uniform"),
                                                  (33.0, 10.0, 256.0, "seed")]:  # the last one: normal
            def f(mean, variance):
                per_token = 8.0 if experts == 256.0 else 2.0  # DeepSeek-V3's 8 of 256: all awake at 32
                return expected_experts_touched(BatchLaw(1.0, mean - 1.0, variance), jnp.float64(experts),
                                                jnp.float64(per_token), routing)

            grad = jax.grad(f, argnums=(0, 1))(jnp.float64(mean), jnp.float64(variance))
            h = 1e-6
            fd_mean = (f(mean + h, variance) - f(mean - h, variance)) / (2 * h)
            fd_variance = (f(mean, variance + h) - f(mean, variance - h)) / (2 * h)
            np.testing.assert_allclose([float(g) for g in grad], [float(fd_mean), float(fd_variance)], rtol=1e-6)
            assert abs(float(grad[0])) > 1e-3  # on the kink's slope, not a flat stretch
        # dense models touch no expert, with finite gradients
        dense = jax.grad(lambda m: expected_experts_touched(BatchLaw(1.0, m, 2.0), 0.0, 0.0, "seed"))(jnp.float64(3.0))
        assert float(dense) == 0.0


def _decode_steps(context_tokens: int, most: int) -> np.ndarray:
    """T(k) [ms] for k = 1..most decoding requests: the model's own decode step (seed profile)."""
    step = model_step(GPU, MODEL, context_tokens, tp=TP, max_batch=most + 1)
    return np.array([step(k, 0) for k in range(1, most + 1)])


def _chain_law(log_ratio: np.ndarray) -> np.ndarray:
    """A birth-death chain's stationary law from log(π(n) / π(n - 1)), n = 1.."""
    log_weights = np.concatenate([[0.0], np.cumsum(log_ratio)])
    weights = np.exp(log_weights - log_weights.max())
    return weights / weights.sum()


def _closed_chain_tpot_ms(steps: np.ndarray, sessions: int, away_ms: float) -> float:
    """C sessions away (pausing, prefilling) ``away_ms`` on average, each decoding OSL tokens, one
    per step of T(n) for the n decoding: π(n) / π(n - 1) = (C - n + 1) / away x OSL T(n) / n (the
    away time's distribution does not matter: an infinite-server station), TPOT = E[n] / (token
    rate)."""
    n = np.arange(1, sessions + 1)
    law = _chain_law(np.log((sessions - n + 1) / away_ms * OSL * steps[:sessions] / n))
    busy = (law * np.arange(sessions + 1)).sum()
    return busy / ((sessions - busy) / away_ms * OSL)


def test_closed_loop_tpot_follows_the_exact_engine_occupancy():
    think_s, context = 5.0, 256
    steps = _decode_steps(context, 64)
    sessions = np.array([2, 4, 6, 8, 12])
    exact = [_closed_chain_tpot_ms(steps, c, think_s * 1000.0) for c in sessions]
    settings = dict(tp=TP, concurrency=sessions, context_tokens=context, osl=OSL, think_time_s=think_s,
                    dtype="float64")
    seed = jp.sweep(GPU, MODEL, **settings).tpot_ms.squeeze().values
    law = jp.sweep(GPU, MODEL, seen_batch="distribution", **settings).tpot_ms.squeeze().values
    seed_error, law_error = seed / exact - 1.0, law / exact - 1.0
    # the seed's step at the mean batch misses by up to 37 % (C = 4: B = 1.3 sessions; a session
    # sees itself and the others running, 2 on average, on the steep side of the experts' kink)
    assert np.abs(seed_error).max() > 0.3
    assert np.abs(law_error).max() < 0.12
    assert (np.abs(law_error) <= np.abs(seed_error) + 0.09).all()


def test_open_loop_tpot_follows_the_exact_engine_occupancy():
    """Poisson arrivals at λ, the seed's isolated prefill (decode steps carry no prefill):
    π(n) / π(n - 1) = λ OSL T(n) / n (an M/G/∞ count when T is flat), TPOT = E[n] / (λ OSL)."""
    context = 2048
    steps = _decode_steps(context, 400)
    rates = np.array([0.2, 0.35, 0.44, 0.6, 1.0])  # requests/s
    exact = []
    for rate in rates:
        x = rate / 1000.0 * OSL  # the chain's arrivals times tokens, per ms
        law = _chain_law(np.log(x * steps / np.arange(1, len(steps) + 1)))
        exact.append((law * np.arange(len(law))).sum() / x)
    settings = dict(tp=TP, arrivals="poisson", request_rate=rates, context_tokens=context, osl=OSL, dtype="float64")
    seed = jp.sweep(GPU, MODEL, **settings).tpot_ms.squeeze().values
    law = jp.sweep(GPU, MODEL, seen_batch="distribution", **settings).tpot_ms.squeeze().values
    seed_error, law_error = seed / exact - 1.0, law / exact - 1.0
    assert np.abs(seed_error).max() > 0.4  # at 0.44/s: every expert awake at the mean, half of them in fact
    assert np.abs(law_error).max() < 0.2
    assert (np.abs(law_error) <= np.abs(seed_error) + 0.01).all()


def test_disaggregated_decode_workers_follow_the_exact_occupancy():
    """A decode worker only decodes: the chain above, its sessions away for the pause and TTFT
    (their prefill on the prefill pool and the KV's transfer)."""
    think_s, context = 5.0, 2048
    steps = _decode_steps(context, 64)
    sessions = np.array([2, 4, 6, 8, 12])
    settings = dict(tp=TP, concurrency=sessions, context_tokens=context, osl=OSL, think_time_s=think_s,
                    serving="disaggregated", prefill_tp=[TP], prefill_workers=[1], decode_workers=[1],
                    dtype="float64")
    seed = jp.sweep(GPU, MODEL, **settings).squeeze()
    law = jp.sweep(GPU, MODEL, seen_batch="distribution", **settings).squeeze()
    exact = np.array([_closed_chain_tpot_ms(steps, c, think_s * 1000.0 + ttft)
                      for c, ttft in zip(sessions, law.ttft_ms.values)])
    seed_error, law_error = seed.tpot_ms.values / exact - 1.0, law.tpot_ms.values / exact - 1.0
    assert np.abs(seed_error).max() > 0.3 and np.abs(law_error).max() < 0.12
    assert bool(law.converged.all())


def test_a_lone_session_reads_what_its_token_routes_to():
    """C = 1: a pipeline stage reads K / S experts of each of its S requests' worth (the seed's
    floor, both modes alike); attention-DP ranks share the replica's experts, so a lone token on
    one of four ranks reads its 2 experts, not all 8 as four ranks of one request each would, and
    TPOT rises to the seed's as the sessions fill the ranks; with eight ranks, still 2."""
    settings = dict(tp=[1], concurrency=[1, 2, 4, 8, 12], think_time_s=5.0, context_tokens=2048, osl=OSL)
    for stages in (2, 4):
        seed = jp.sweep(GPU, MODEL, pp=[stages], **settings).tpot_ms.values.ravel()
        law = jp.sweep(GPU, MODEL, pp=[stages], seen_batch="distribution", **settings).tpot_ms.values.ravel()
        assert law[0] == pytest.approx(seed[0], rel=1e-5)
    seed = jp.sweep(GPU, MODEL, dp_attention=[4], **settings).tpot_ms.values.ravel()
    law = jp.sweep(GPU, MODEL, dp_attention=[4], seen_batch="distribution", **settings).tpot_ms.values.ravel()
    assert law[0] < 0.4 * seed[0]  # 2 of 8 experts: 5.2 ms against 14.9
    assert (np.diff(law) > 0).all() and law[-1] == pytest.approx(seed[-1], rel=0.02)
    # eight ranks hold one expert each, fewer than a token's 2: the lone token still reads 2, as
    # uniform routing counts them too (a rank's K had been held to its one expert: 2.66 ms)
    lone = {routing: jp.sweep(GPU, MODEL, dp_attention=[8], seen_batch="distribution", expert_routing=routing,
                              **{**settings, "concurrency": [1]}).tpot_ms.item() for routing in ("seed", "uniform")}
    assert lone["seed"] == pytest.approx(lone["uniform"], rel=1e-4)


def test_dense_models_hardly_move():
    """A dense step is linear in B: only the closed loop's mean (itself and the others' share)
    moves it, by a step's slope per session."""
    settings = dict(tp=1, concurrency=[1, 4, 16, 64], context_tokens=2048, osl=OSL, think_time_s=2.0)
    seed = jp.sweep("h100-sxm", "llama-3.1-8b", **settings).tpot_ms.values
    law = jp.sweep("h100-sxm", "llama-3.1-8b", seen_batch="distribution", **settings).tpot_ms.values
    np.testing.assert_allclose(law, seed, rtol=0.03)
    assert (law >= seed - 1e-6).all()


def test_option_is_checked_and_reaches_specs():
    with pytest.raises(JaxparetoError, match="seen_batch.*mean, distribution"):
        jp.ModelOptions(seen_batch="median").validate()
    with pytest.raises(JaxparetoError, match="seen_batch='distribution'"):
        jp.sweep("h100-sxm", "mixtral-8x7b", tp=2, concurrency=[4], seen_batch="distribution", solver="exact")
    assert "seen_batch='distribution'" in jp.ModelOptions(seen_batch="distribution").nonlinear_choices
    spec = parse_spec({"grid": {"gpu": ["h100-sxm"], "model": ["mixtral-8x7b"], "tp": [2], "concurrency": [4]},
                       "workload": {"seen_batch": "distribution"}})
    assert spec.workload.seen_batch == "distribution"
    with pytest.raises(JaxparetoError, match="seen_batch"):
        parse_spec({"grid": {"gpu": ["h100-sxm"], "model": ["mixtral-8x7b"], "concurrency": [4]},
                    "workload": {"seen_batch": "median"}})
