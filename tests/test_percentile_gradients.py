"""Derivatives of the latency percentiles (P50/P90/P99 of TTFT, TPOT, ITL and E2E latency).

The quantiles are found by bisection of a CDF; their derivatives are the implicit function's,
dx = -∂F/∂θ / F'(x) (`jaxpareto.physics.numerics.increasing_quantile`), checked here against
closed forms (a lognormal's and a normal's quantile) and float64 central differences, in both
forward and reverse mode. Before, they were NaN wherever a spread was exactly 0 (it went
through sqrt, whose derivative is infinite there: with the default fixed lengths, every point)
and elsewhere the bisection bracket's derivative rather than the quantile's, so the gradient
optimiser could not see a percentile SLO.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from statistics import NormalDist

import jaxpareto as jp
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.mapper import shared_scalars, stack_params
from jaxpareto.physics.numerics import increasing_quantile, sqrt_or_zero
from jaxpareto.physics.percentiles import PERCENTILES, Delay, delay_cdf, delay_quantiles, normal_mix_quantiles
from jaxpareto.physics.point import evaluate_point


def test_sqrt_or_zero_has_a_finite_derivative_at_zero():
    with jax.enable_x64(True):
        for mode in (jax.grad, jax.jacfwd):
            assert float(mode(sqrt_or_zero)(jnp.float64(0.0))) == 0.0
            assert float(mode(sqrt_or_zero)(jnp.float64(4.0))) == pytest.approx(0.25, rel=1e-14)
        assert float(sqrt_or_zero(jnp.float64(-1.0))) == 0.0 and float(sqrt_or_zero(jnp.float64(9.0))) == 3.0


def test_quantile_derivative_is_the_implicit_functions():
    """A quantile of an exponential CDF, F(x) = 1 - exp(-x / m): x = -m ln(1 - q), dx/dm = x / m,
    dx/dq = m / (1 - q); the bisection's value is kept to its precision."""
    with jax.enable_x64(True):
        def quantile(m, q):
            return increasing_quantile(lambda x: -jnp.expm1(-x / m), q, jnp.float64(0.0), 50.0 * m, 60)

        m, q = jnp.float64(3.0), jnp.float64(0.9)
        exact = -3.0 * np.log(0.1)
        assert float(quantile(m, q)) == pytest.approx(exact, rel=1e-12)
        for mode in (jax.grad, jax.jacfwd):
            dm, dq = mode(quantile, argnums=(0, 1))(m, q)
            assert float(dm) == pytest.approx(exact / 3.0, rel=1e-10)
            assert float(dq) == pytest.approx(3.0 / 0.1, rel=1e-10)


def test_lognormal_and_normal_quantiles_have_their_closed_form_derivatives():
    """One lognormal kind without a wait: q_p = m exp(σ z_p - σ²/2), dq/dm = q / m and
    dq/dσ = q (z_p - σ); one normal: q_p = μ + z_p s, dq/dμ = 1, dq/ds = z_p."""
    with jax.enable_x64(True):
        def lognormal(mean, sigma):
            delay = Delay(jnp.ones(1), jnp.stack([mean]), jnp.stack([sigma]), jnp.float64(0.0), jnp.float64(0.0))
            return jnp.stack(delay_quantiles(delay, with_wait=False))

        def normal(mean, sd):
            return jnp.stack(normal_mix_quantiles(jnp.ones(1), jnp.stack([mean]), jnp.stack([sd])))

        mean, sigma = jnp.float64(120.0), jnp.float64(0.4)
        # (the search stops 1e-5 below each level: within 2e-4 of these)
        z = np.array([NormalDist().inv_cdf(p / 100.0) for p in PERCENTILES])
        q = 120.0 * np.exp(0.4 * z - 0.08)
        np.testing.assert_allclose(lognormal(mean, sigma), q, rtol=2e-4)
        for mode in (jax.jacrev, jax.jacfwd):
            d_mean, d_sigma = mode(lognormal, argnums=(0, 1))(mean, sigma)
            np.testing.assert_allclose(d_mean, q / 120.0, rtol=2e-4)
            np.testing.assert_allclose(d_sigma, q * (z - 0.4), rtol=2e-4)
            d_mu, d_sd = mode(normal, argnums=(0, 1))(jnp.float64(40.0), jnp.float64(3.0))
            np.testing.assert_allclose(d_mu, np.ones(3), rtol=2e-4)
            np.testing.assert_allclose(d_sd, z, rtol=2e-4, atol=1e-4)


def test_mixture_with_a_wait_matches_central_differences():
    """Two kinds (hits and misses) and an exponential queueing wait: every input's derivative
    against float64 central differences of the same CDF's quantiles solved to float64 rounding
    (the model's 26 halvings leave a few 1e-8 of the value, too coarse to difference)."""
    with jax.enable_x64(True):
        def delay_of(x):
            share, hit, miss, sigma, busy, wait = x
            return Delay(jnp.stack([share, 1.0 - share]), jnp.stack([hit, miss]), jnp.stack([sigma, 1.5 * sigma]),
                         busy, wait)

        def quantiles(x):
            return jnp.stack(delay_quantiles(delay_of(x)))

        def reference(x):  # the model's CDF and levels, its roots bisected 100 times in [1, 1e5] ms
            delay = delay_of(x)
            return np.array([float(jnp.exp(increasing_quantile(lambda u: delay_cdf(delay, jnp.exp(u)), p / 100.0 - 1e-5,
                                                               jnp.float64(0.0), jnp.log(1e5), 100)))
                             for p in PERCENTILES])

        x = jnp.array([0.7, 80.0, 900.0, 0.3, 0.4, 150.0])
        np.testing.assert_allclose(quantiles(x), reference(x), rtol=1e-6)
        steps = 1e-5 * np.asarray(x)
        central = np.stack([(reference(x.at[k].add(steps[k])) - reference(x.at[k].add(-steps[k]))) / (2 * steps[k])
                            for k in range(x.size)], axis=1)
        for mode in (jax.jacrev, jax.jacfwd):
            np.testing.assert_allclose(mode(quantiles)(x), central, rtol=2e-4, atol=1e-6)


def test_a_quantile_at_a_mixtures_step_follows_its_kind():
    """Fixed-length hits and misses whose hit share is the level itself (0.9 and P90): the search
    stops 1e-5 below the level, at the hits' upper end, whose derivative in the hits' length is
    theirs, 1 (not NaN, nor 0)."""
    with jax.enable_x64(True):
        def p90(hit_ms):
            delay = Delay(jnp.array([0.9, 0.1]), jnp.stack([hit_ms, 2_000.0]), jnp.full(2, 1e-4), jnp.float64(0.0),
                          jnp.float64(0.0))
            return delay_quantiles(delay, with_wait=False)[1]

        for mode in (jax.grad, jax.jacfwd):
            assert float(mode(p90)(jnp.float64(100.0))) == pytest.approx(1.0, rel=1e-3)


@pytest.mark.parametrize("mean", np.linspace(20.0, 80.0, 13))
def test_an_itl_of_no_spread_follows_its_steps_length(mean):
    """An ITL mix of decode and mixed steps whose batch has no spread (every session active, Z =
    0): P50 is the decode step, whose derivative is 1. Where a spread below what the bisection
    resolves was kept, the density had underflowed where it stopped: 0 for most lengths, 1e250
    for some."""
    with jax.enable_x64(True):
        def p50(means):
            return normal_mix_quantiles(jnp.array([0.7, 0.3]), means, jnp.zeros(2))[0]

        means = jnp.array([mean, 445.81])
        assert float(p50(means)) == pytest.approx(mean, rel=5e-5)  # (the floor: 2^-20 of the span, ~5e-7 of it here)
        for mode in (jax.grad, jax.jacfwd):
            np.testing.assert_allclose(mode(p50)(means), [1.0, 0.0], atol=1e-5)


def _params(gpu, model):
    return [jax.tree_util.tree_map(lambda a: a[0], stack_params([table[name].to_params()], "float64"))
            for table, name in ((jp.catalog.gpus(), gpu), (jp.catalog.models(), model))]


# (options, workload, point: concurrency or request rate, think time [s], context, hit rate)
CASES = {
    # (fixed lengths: a hit rate away from the percentiles' levels, where a quantile jumps between kinds)
    "seed, closed loop, fixed lengths": (ModelOptions(), Workload(), [12.0, 2.0, 16_000.0, 0.6]),
    "shared engine and LRU, closed loop": (ModelOptions(prefill_model="shared", cache_model="lru"),
                                           Workload(isl_cv=0.5, osl_cv=0.5), [40.0, 2.0, 16_000.0, 0.5]),
    "shared engine, Poisson arrivals": (ModelOptions(arrivals="poisson", prefill_model="shared"),
                                        Workload(isl_cv=0.5, osl_cv=0.7), [0.3, 0.0, 8_000.0, 0.0]),
    "seed, Poisson arrivals, fixed lengths": (ModelOptions(arrivals="poisson"), Workload(), [0.3, 0.0, 8_000.0, 0.0]),
    # every session active: the batch has no spread, and an ITL is a decode or a mixed step
    "shared engine, closed loop, no pauses": (ModelOptions(prefill_model="shared"), Workload(),
                                             [8.0, 0.0, 16_000.0, 0.6]),
}
OUTPUTS = ("p50_ttft_ms", "p99_ttft_ms", "p90_tpot_ms", "p50_itl_ms", "p99_itl_ms", "p50_e2el_ms", "p99_e2el_ms")


# forward mode's program through the open loop's shared engine compiles for about 30 s: its
# check against reverse mode runs with the slow checks (scripts/slow_checks.sh)
FORWARD_IN_SLOW_CHECKS = ("shared engine, Poisson arrivals",)


def _central_reverse_forward(case, forward_mode=True):
    """The gradient of a sum of log-percentiles at the case's point: float64 central
    differences, reverse mode, and forward mode (or None), and which coordinates the
    differences measured."""
    options, workload, start = CASES[case]
    hw, model = _params("h100-sxm", "llama-3.1-70b")
    with jax.enable_x64(True):
        shared = shared_scalars(workload, Efficiency(), Solver(tol=1e-12), "float64")

        def log_sum(x):
            load = dict(request_rate=x[0]) if options.open_loop else dict(concurrency=x[0])
            point = GridPoint(gpu=hw, model=model, tp=4.0, **load, think_time_s=x[1], context_tokens=x[2],
                              hit_rate=x[3])
            out = evaluate_point(point, *shared, options=options)
            return sum(jnp.log(getattr(out, name)) for name in OUTPUTS)

        x = jnp.array(start)
        value = jax.jit(log_sum)
        assert np.isfinite(float(value(x)))
        steps = 1e-3 * np.asarray(x)
        central = np.array([(value(x.at[k].add(steps[k])) - value(x.at[k].add(-steps[k]))) / (2 * steps[k])
                            if steps[k] > 0 else 0.0 for k in range(x.size)])
        reverse = np.asarray(jax.jit(jax.grad(log_sum))(x))
        forward = np.asarray(jax.jit(jax.jacfwd(log_sum))(x)) if forward_mode else None
    return central, reverse, forward, steps > 0  # think time 0 and the open loop's hit rate 0 sit at their range's end


# each case compiles a reverse-mode program of the whole model for 15-70 s: the default run
# differentiates one closed loop and the open loop's shared engine (the percentiles' richest
# path); the other three run with the slow checks (scripts/slow_checks.sh)
IN_SLOW_CHECKS = ("shared engine and LRU, closed loop", "seed, Poisson arrivals, fixed lengths",
                  "shared engine, closed loop, no pauses")


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case in IN_SLOW_CHECKS else case
                                  for case in CASES])
def test_point_percentiles_match_central_differences(case):
    """Through the whole model (the closed loop's implicit B included): the gradient of a sum
    of log-percentiles against float64 central differences, in reverse and forward mode (for
    `FORWARD_IN_SLOW_CHECKS`, forward mode with the slow checks)."""
    central, reverse, forward, measured = _central_reverse_forward(case, case not in FORWARD_IN_SLOW_CHECKS)
    np.testing.assert_allclose(reverse[measured], central[measured], rtol=2e-3, atol=1e-7)
    if forward is not None:
        np.testing.assert_allclose(forward, reverse, rtol=1e-8, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("case", FORWARD_IN_SLOW_CHECKS)
def test_forward_mode_through_the_open_loops_shared_engine(case):
    """Forward mode agrees with reverse mode where its program is costly to compile."""
    _, reverse, forward, _ = _central_reverse_forward(case)
    np.testing.assert_allclose(forward, reverse, rtol=1e-8, atol=1e-12)


def test_gradient_search_sees_percentile_slos():
    """`optimize(method="gradient")` under P99 TTFT and P90 TPOT limits finds the exhaustive
    optimum; with NaN percentile gradients it had stopped where it started (up to 48 % short)."""
    scenarios = dict(gpu=["h100-sxm", "b200"], model="llama-3.1-70b", think_time_s=[2.0, 10.0],
                     context_tokens=[8_192, 32_768], hit_rate=0.9)
    constraints = {"p99_ttft_ms": ("<=", 1500.0), "p90_tpot_ms": ("<=", 40.0)}
    best = jp.optimize(**scenarios, constraints=constraints, method="exhaustive")
    found = jp.optimize(**scenarios, constraints=constraints, method="gradient")
    assert best.feasible.values.all() and found.feasible.values.all()
    np.testing.assert_allclose(found.value.values, best.value.values, rtol=1e-5)
