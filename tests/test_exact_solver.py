"""The closed-form solver against the damped iteration (the reference solver)."""

import jax
import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.mapper import evaluate_points, shared_scalars, stack_params
from jaxpareto.definitions.settings import Efficiency, Solver, Workload

CONTINUOUS = ("ttft_ms", "tpot_ms", "latency_ms", "gpu_active_ratio", "turns_per_s", "output_tokens_per_s_per_user",
              "output_tokens_per_s_per_gpu", "t_weight_ms", "t_kv_ms", "t_compute_ms")


def _random_points(n, seed):
    """Random configurations over every catalog GPU and model (MoE and MLA included)."""
    rng = np.random.default_rng(seed)
    gpus, models = list(jp.catalog.gpus().values()), list(jp.catalog.models().values())
    m = rng.integers(len(models), size=n)
    points = dict(
        gpu=[gpus[i].to_params() for i in rng.integers(len(gpus), size=n)],
        model=[models[i].to_params() for i in m],
        tp=rng.choice([1, 2, 4, 8, 16, 32], size=n),
        concurrency=np.round(np.exp(rng.uniform(0, np.log(4096), size=n))),
        think_time_s=np.where(rng.random(n) < 0.2, 0.0, np.exp(rng.uniform(np.log(0.01), np.log(120), size=n))),
        context_tokens=np.round(np.exp(rng.uniform(np.log(64), np.log(400_000), size=n))),
        hit_rate=rng.choice([0.0, 0.5, 0.9, 1.0], size=n),
    )
    return points, np.asarray([models[i].is_moe for i in m])


def _evaluate(points, method, dtype="float32", tol=1e-6):
    args = {k: stack_params(v, dtype) if k in ("gpu", "model") else np.asarray(v, dtype) for k, v in points.items()}
    scalars = shared_scalars(Workload(), Efficiency(), Solver(tol=tol, name=method), dtype)
    with jax.enable_x64(dtype == "float64"):
        out = evaluate_points(GridPoint(**args), *scalars)
        return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.slow
def test_exact_agrees_with_damped_on_random_points():
    points, moe = _random_points(12_000, seed=1)
    damped = _evaluate(points, "damped")
    exact = _evaluate(points, "exact")
    np.testing.assert_array_equal(damped["feasible"], exact["feasible"])
    feasible = damped["feasible"]
    assert 3_000 < feasible.sum() < 11_000 and (feasible & moe).sum() > 1_000  # infeasible and MoE both covered
    assert exact["converged"][feasible].all() and not exact["converged"][~feasible].any()
    assert (exact["iterations"] == 0).all()
    both = feasible & damped["converged"]
    # B's error from the damped stopping rule is tol / (1 - slope of the map); slow points
    # (many iterations) sit closer to slope 1, hence their looser bound.
    fast = both & (damped["iterations"] < 200)
    rel = lambda name, where: np.abs(damped[name][where] - exact[name][where]) / np.abs(exact[name][where])
    assert rel("batch_eff", both).max() <= 1e-4
    for name in CONTINUOUS:
        assert rel(name, fast).max() <= 1e-5, name
        assert rel(name, both).max() <= 1e-4, name
    for name in ("ttft_ms", "kv_per_session_gb", "prefill_tokens"):
        np.testing.assert_array_equal(damped[name], exact[name])
    np.testing.assert_array_equal(damped["concurrency_eff"], exact["concurrency_eff"])


@pytest.mark.slow
def test_exact_root_solves_the_fixed_point_in_float64():
    points, _ = _random_points(4_000, seed=2)
    exact = _evaluate(points, "exact", dtype="float64")
    damped = _evaluate(points, "damped", dtype="float64", tol=1e-13)
    ok = exact["feasible"] & damped["converged"]
    residual = np.abs(exact["concurrency_eff"][ok] * exact["gpu_active_ratio"][ok] - exact["batch_eff"][ok])
    assert (residual <= 1e-9 * exact["batch_eff"][ok]).all()
    np.testing.assert_allclose(exact["batch_eff"][ok], damped["batch_eff"][ok], rtol=1e-9)


def test_exact_sweep_through_public_api():
    kwargs = dict(gpu=["h100-sxm", "mi355x"], model=["kimi-k2.5", "llama-3.1-70b"], tp=[4, 8, 16],
                  concurrency=[1, 10, 100, 1000], think_time_s=[0.0, 3.0], context_tokens=[8192, 65536], hit_rate=0.9)
    a, b = jp.sweep(**kwargs), jp.sweep(**kwargs, solver="exact")
    assert b.attrs["solver"] == "exact"
    ok = (a.converged & b.converged).values
    np.testing.assert_allclose(a.batch_eff.values[ok], b.batch_eff.values[ok], rtol=1e-4)
