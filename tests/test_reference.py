"""The vmapped sweep against an independent float64 scalar reference (tests/reference.py)."""

import numpy as np
import pytest

import jaxpareto as jp
from reference import reference_point

CONTINUOUS = ("ttft_ms", "tpot_ms", "latency_ms", "batch_eff", "gpu_active_ratio", "turns_per_s",
              "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu", "t_weight_ms", "t_kv_ms",
              "t_compute_ms", "kv_per_session_gb", "prefill_tokens")


def _random_points(n, seed=0):
    rng = np.random.default_rng(seed)
    gpus, models = list(jp.catalog.gpus().values()), list(jp.catalog.models().values())
    for _ in range(n):
        yield dict(
            gpu=gpus[rng.integers(len(gpus))], model=models[rng.integers(len(models))],
            tp=int(rng.choice([1, 2, 4, 8, 16])), concurrency=int(np.exp(rng.uniform(0, np.log(2048)))),
            think_time_s=float(rng.choice([0.0, rng.uniform(0, 30)])),
            context_tokens=int(np.exp(rng.uniform(np.log(512), np.log(262144)))),
            hit_rate=float(rng.choice([0.0, 1.0, rng.uniform()])),
        )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sweep_matches_float64_reference(dtype):
    points = list(_random_points(2000))
    failures, boundary = [], 0
    outs = _evaluate(points, dtype)
    for p, got in zip(points, outs):
        ref = reference_point(p["gpu"].to_dict(), p["model"].to_dict(), p["tp"], p["concurrency"],
                              p["think_time_s"], p["context_tokens"], p["hit_rate"])
        assert got["feasible"] == ref["feasible"], (p, got, ref)
        if got["concurrency_eff"] != ref["concurrency_eff"]:
            boundary += 1  # floor() on the other side of an integer in float32
            continue
        if not ref["feasible"]:
            assert np.isnan(got["ttft_ms"]) and np.isnan(got["tpot_ms"])
            continue
        assert got["converged"] and ref["converged"]
        for name in CONTINUOUS:
            if not np.isclose(got[name], ref[name], rtol=1e-4, atol=0):
                failures.append((name, got[name], ref[name], p))
        assert got["decode_bound"] == ref["decode_bound"] or np.isclose(ref["t_compute_ms"], ref["t_weight_ms"] + ref["t_kv_ms"], rtol=1e-4)
    assert not failures, failures[:5]
    assert boundary <= 2, boundary
    assert sum(r["feasible"] for r in outs) > 500  # the sample exercises both branches
    assert sum(not r["feasible"] for r in outs) > 100


def _evaluate(points, dtype):
    """All points in one vmapped call of the batched model (no grid structure)."""
    import jax

    from jaxpareto.definitions.axes import GridPoint
    from jaxpareto.mapper import evaluate_points, shared_scalars, stack_params
    from jaxpareto.definitions.settings import Efficiency, Solver, Workload

    tables = {k: stack_params([p[k].to_params() for p in points], dtype) for k in ("gpu", "model")}
    axes = {k: np.asarray([p[k] for p in points], dtype=dtype)
            for k in ("tp", "concurrency", "think_time_s", "context_tokens", "hit_rate")}
    with jax.enable_x64(dtype == "float64"):
        out = evaluate_points(GridPoint(**tables, **axes), *shared_scalars(Workload(), Efficiency(), Solver(), dtype))
        host = {k: np.asarray(v) for k, v in out.items()}
    return [{k: v[i].item() for k, v in host.items()} for i in range(len(points))]


def test_grid_equals_loop_of_single_points(small_grid):
    """The outer-product block path against the float64 reference, point by point."""
    ds = small_grid
    gpus = {g["name"]: g for g in __import__("json").loads(ds.attrs["hardware"])}
    models = {m["name"]: m for m in __import__("json").loads(ds.attrs["models"])}
    stacked = ds.stack(point=ds.ttft_ms.dims)
    checked = 0
    for i in range(stacked.sizes["point"]):
        row = stacked.isel(point=i)
        c = {k: row[k].item() for k in ds.ttft_ms.dims}
        ref = reference_point(gpus[c["gpu"]], models[c["model"]], c["tp"], c["concurrency"], c["think_time_s"],
                              c["context_tokens"], c["hit_rate"])
        assert bool(row.feasible) == ref["feasible"], c
        if ref["feasible"] and int(row.concurrency_eff) == ref["concurrency_eff"]:
            for name in CONTINUOUS:
                np.testing.assert_allclose(float(row[name]), ref[name], rtol=1e-4, err_msg=f"{name} at {c}")
            checked += 1
    assert checked > 300
