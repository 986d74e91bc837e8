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


@pytest.mark.parametrize("arrivals, load", [("staggered", dict(concurrency=[1, 2, 3, 5, 16, 100, 1000, 3000],
                                                              think_time_s=[0.0, 5.0])),
                                            ("poisson", dict(request_rate=[0.05, 0.1, 0.3, 1.0, 3.0, 10.0]))])
def test_exact_solves_the_measured_profile_and_pipelines(arrivals, load):
    """The measured profile's R(B) has two more linear pieces, the sessions beyond KV memory
    waiting (R_run(M) B / M; the open loop's TPOT flat at TPOT(M + 1)) and a pipeline's bubble
    (flat below S sessions): the exact root matches a tightly converged float64 damped
    iteration to 1e-10, where the float32 damped iteration is 1e-4 off."""
    kw = dict(gpu=["h100-sxm", "l40s"], model=["llama-3.1-70b", "qwen3-235b-a22b"], tp=[2, 4], pp=[1, 2],
              context_tokens=[4096, 65536], hit_rate=[0.0, 0.9], profile="measured",
              arrivals=arrivals, **load,  # only the outputs checked: less to compile
              variables=["batch_eff", "ttft_ms", "tpot_ms", "latency_ms", "memory_wait_ms", "iterations"])
    reference = jp.sweep(**kw, solver=jp.Solver(name="damped", tol=1e-13, max_iter=200_000), dtype="float64")
    exact = jp.sweep(**kw, solver="exact", dtype="float64")
    usable = reference.feasible.values & reference.converged.values
    assert usable.sum() > 100
    np.testing.assert_array_equal(exact.feasible.values, reference.feasible.values)
    assert exact.converged.values[usable].all() and (exact.iterations.values == 0).all()
    if arrivals == "staggered":  # some points wait for memory (C = 1 with pp = 2 sits in the bubble)
        assert (reference.memory_wait_ms.values[usable] > 0).any()
    for name in ("batch_eff", "ttft_ms", "tpot_ms", "latency_ms"):
        np.testing.assert_allclose(exact[name].values[usable], reference[name].values[usable], rtol=1e-10, err_msg=name)
    # and the validation's gradients use it (the differentiable solver of the measured profile)
    assert jp.ModelOptions(profile="measured").differentiable_solver == "exact"
    assert jp.ModelOptions(profile="measured", prefill_model="shared").differentiable_solver == "damped"
