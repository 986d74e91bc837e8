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
from jaxpareto.physics.decode import expected_experts_touched, experts_touched
from simulator import model_step

GPU, MODEL, TP, OSL = "h200-sxm", "mixtral-8x7b", 2, 256  # 8 experts, 2 a token: all awake at B = 4


def _normal_mean(f, mean, variance):
    """E[f(X)], X ~ N(mean, variance), by adaptive quadrature in float64."""
    sd = np.sqrt(variance)
    value, _ = integrate.quad(lambda x: f(x) * stats.norm.pdf(x, mean, sd), mean - 12 * sd, mean + 12 * sd,
                              points=[4.0], limit=200)
    return value


@pytest.mark.parametrize("routing", ["seed", "uniform"])
@pytest.mark.parametrize("mean,variance", [(0.7, 0.3), (3.0, 2.0), (4.0, 1.0), (6.5, 9.0), (40.0, 30.0)])
def test_expected_experts_are_the_normal_laws_mean(routing, mean, variance):
    experts, per_token = 8.0, 2.0
    with jax.enable_x64(True):
        got = float(expected_experts_touched(jnp.float64(mean), jnp.float64(variance), jnp.float64(experts),
                                             jnp.float64(per_token), routing))
    if routing == "seed":
        want = _normal_mean(lambda x: min(per_token * x, experts), mean, variance)
    else:  # E (1 - q^x) over the whole real line, as the moment-generating function takes it
        want = _normal_mean(lambda x: experts * (1.0 - (1.0 - per_token / experts) ** x), mean, variance)
        want = max(want, 0.0)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    # Jensen: never above the count at the mean batch, which variance 0 gives to the last bit
    with jax.enable_x64(True):
        at_mean = float(experts_touched(jnp.float64(mean), 8.0, 2.0, routing))
        assert got <= at_mean + 1e-12
        assert float(expected_experts_touched(jnp.float64(mean), 0.0, 8.0, 2.0, routing)) == at_mean


def test_expected_experts_gradients_match_finite_differences():
    def f(mean, variance):
        return expected_experts_touched(mean, variance, jnp.float64(8.0), jnp.float64(2.0), "seed")

    with jax.enable_x64(True):
        for mean, variance in [(3.0, 2.0), (4.5, 0.5), (1.2, 4.0)]:
            grad = jax.grad(f, argnums=(0, 1))(jnp.float64(mean), jnp.float64(variance))
            h = 1e-6
            fd_mean = (f(mean + h, variance) - f(mean - h, variance)) / (2 * h)
            fd_variance = (f(mean, variance + h) - f(mean, variance - h)) / (2 * h)
            np.testing.assert_allclose([float(g) for g in grad], [float(fd_mean), float(fd_variance)], rtol=1e-6)
        # dense models touch no expert, with finite gradients
        dense = jax.grad(lambda m: expected_experts_touched(m, 2.0, 0.0, 0.0, "seed"))(jnp.float64(3.0))
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


def test_closed_loop_tpot_follows_the_exact_engine_occupancy():
    """C sessions pausing Z (exponential), each decoding OSL tokens, one per step of T(n) for the n
    decoding: π(n) / π(n - 1) = (C - n + 1) / Z x OSL T(n) / n, and TPOT = E[n] / (token rate)."""
    think_s, context = 5.0, 256
    steps = _decode_steps(context, 64)
    sessions = np.array([2, 4, 6, 8, 12])
    exact = []
    for c in sessions:
        n = np.arange(1, c + 1)
        law = _chain_law(np.log((c - n + 1) / (think_s * 1000.0) * OSL * steps[:c] / n))
        busy = (law * np.arange(c + 1)).sum()
        exact.append(busy / ((c - busy) / (think_s * 1000.0) * OSL))
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
        jp.ModelOptions(seen_batch="distribution", serving="disaggregated").validate()
    with pytest.raises(JaxparetoError, match="seen_batch='distribution'"):
        jp.sweep("h100-sxm", "mixtral-8x7b", tp=2, concurrency=[4], seen_batch="distribution", solver="exact")
    assert "seen_batch='distribution'" in jp.ModelOptions(seen_batch="distribution").nonlinear_choices
    spec = parse_spec({"grid": {"gpu": ["h100-sxm"], "model": ["mixtral-8x7b"], "tp": [2], "concurrency": [4]},
                       "workload": {"seen_batch": "distribution"}})
    assert spec.workload.seen_batch == "distribution"
    with pytest.raises(JaxparetoError, match="seen_batch"):
        parse_spec({"grid": {"gpu": ["h100-sxm"], "model": ["mixtral-8x7b"], "concurrency": [4]},
                    "workload": {"seen_batch": "median"}})
