"""The bracketing search of `jp.optimize` (method="bracket", the default): its grid, a feasible
interval narrower than a grid step, and agreement with the exhaustive search on random grids
(the value within the solvers' rounding, the same feasibility and reasons, never an SLO broken)."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.search.bracket import COARSE_POINTS, bracket_search, coarse_grid

SCENARIO = dict(gpu="h100-sxm", model="llama-3.1-8b", think_time_s=2.0, context_tokens=16384, hit_rate=0.9)


@pytest.mark.parametrize("lo, hi", [(1, 1024), (1, 67), (5, 9), (3, 3), (1, 65536), (40, 71)])
def test_coarse_grid_spans_the_range_one_apart(lo, hi):
    grid = np.asarray(coarse_grid(jnp.float32(lo), jnp.float32(hi)))
    assert grid.shape == (COARSE_POINTS,)
    assert grid[0] == lo and grid[-1] == hi
    assert np.all(grid == np.round(grid)) and np.all(np.diff(grid) >= 0)
    if hi - lo + 1 >= COARSE_POINTS:
        assert np.all(np.diff(grid) >= 1)  # no concurrency evaluated twice
        # geometric: no step wider than the range's share at that concurrency (with rounding)
        ratio = (hi / lo) ** (1 / (COARSE_POINTS - 1))
        assert np.all(np.diff(grid) <= grid[1:] * (1 - 1 / ratio) + 1)
    else:
        np.testing.assert_array_equal(np.unique(grid), np.arange(lo, hi + 1))  # every concurrency


def test_a_feasible_interval_between_two_grid_points_is_found():
    ds = jp.sweep(**SCENARIO, tp=[2], concurrency=list(range(1, 129))).squeeze()
    x, u = ds.output_tokens_per_s_per_gpu.values, ds.output_tokens_per_s_per_user.values
    cmax = int(ds.concurrency_max.max())
    # (speed per user is level while the pauses keep the mean batch under one request: a step
    # runs one at least)
    one = int(np.argmax(ds.batch_eff.values >= 1.0))
    assert np.all(np.diff(x[:cmax]) > 0) and np.all(np.diff(u[:cmax]) <= 0) and np.all(np.diff(u[one:cmax]) < 0)
    # throughput >= its value between C = 39 and 40, speed per user >= its value between 43
    # and 44: C in [40, 43] only, strictly inside one step of the grid
    slo = {"output_tokens_per_s_per_gpu": (">=", float((x[38] + x[39]) / 2)),
           "output_tokens_per_s_per_user": (">=", float((u[42] + u[43]) / 2))}
    grid = np.asarray(coarse_grid(jnp.float32(1), jnp.float32(cmax)))
    step = np.searchsorted(grid, 40)
    assert grid[step - 1] < 40 and grid[step] > 43
    for objective, sense, want in (("ttft_ms", "min", 40), ("output_tokens_per_s_per_gpu", "max", 43)):
        kw = dict(tp=(2,), concurrency=(1, 1024), objective=objective, sense=sense, constraints=slo)
        exact, found = jp.optimize(**SCENARIO, **kw, method="exhaustive"), jp.optimize(**SCENARIO, **kw)
        assert found.method == "bracket"
        assert exact.concurrency == found.concurrency == want
        assert found.value == pytest.approx(exact.value, rel=1e-6)
        assert found.binding == exact.binding
        # the sense a latency or a throughput takes when none is given: min and max
        assert jp.optimize(**SCENARIO, **{k: v for k, v in kw.items() if k != "sense"}).concurrency == want


@pytest.mark.parametrize("context, think, slo, best", [
    (16384, 0.5, {"ttft_ms": ("<=", 2000.0)}, 410),  # the peak is the feasible interval's top
    (35000, 0.5, {}, 243),  # the peak before the LRU collapse, beside the grid's second local peak
])
def test_a_second_peak_of_the_lru_collapse_is_found(context, think, slo, best):
    """Shared prefill with the LRU cache: throughput peaks, dips as the cache thrashes, then rises
    again to the collapse or to the TTFT limit. The grid's best point sits on the first peak; the
    search now climbs from the grid's second local peak too and compares the feasible interval's
    top (before: C 216 and 129, 1.2 % and 1.6 % below the exhaustive optimum)."""
    args = dict(gpu="h200-sxm", model="llama-3.1-8b", think_time_s=think, context_tokens=context, hit_rate=0.9,
                constraints=slo, tp=(8,), concurrency=(1, 512), prefill_model="shared", cache_model="lru")
    exhaustive = jp.optimize(method="exhaustive", **args)
    bracket = jp.optimize(method="bracket", **args)
    assert exhaustive.concurrency == best
    assert bracket.concurrency == exhaustive.concurrency and bracket.value == pytest.approx(exhaustive.value, rel=1e-6)


def test_limits_are_traced_and_nothing_is_listed_without_slos(programs_kept):
    kw = dict(tp=(1, 2), concurrency=(1, 256), method="bracket")
    jp.optimize(**SCENARIO, **kw, constraints={"ttft_ms": ("<=", 500.0)})
    compiled = bracket_search._cache_size()
    tight = jp.optimize(**SCENARIO, **kw, constraints={"ttft_ms": ("<=", 50.0)})
    assert bracket_search._cache_size() == compiled  # new SLO values: no recompilation
    assert tight.metrics["ttft_ms"] <= 50.0
    free = jp.optimize(**SCENARIO, **kw)
    exact = jp.optimize(**SCENARIO, **{**kw, "method": "exhaustive"})
    assert (free.tp, free.concurrency) == (exact.tp, exact.concurrency) and free.binding == exact.binding


def _random_gpus(rng, n):
    return [jp.Hardware(name=f"gpu-{i}", memory_gb=float(rng.choice([48, 80, 141, 192])),
                        bandwidth_gbs=float(rng.uniform(800, 8000)), tflops_fp16=float(rng.uniform(300, 2500)),
                        tflops_fp8=float(rng.uniform(600, 5000)) if rng.random() < 0.7 else None) for i in range(n)]


CASES = {
    "throughput under ttft and speed": (dict(constraints={"output_tokens_per_s_per_user": (">=", 25.0),
                                                          "ttft_ms": ("<=", 3000.0)}), {}),
    "least ttft over a throughput floor": (dict(objective="ttft_ms", sense="min",
                                                constraints={"output_tokens_per_s_per_gpu": (">=", 60.0)}), {}),
    "turns under tpot, lru": (dict(objective="turns_per_s", constraints={"tpot_ms": ("<=", 80.0)}),
                              dict(cache_model="lru")),
    "p99 ttft, lengths spread": (dict(constraints={"p99_ttft_ms": ("<=", 3000.0)}), dict(isl_cv=0.5, osl_cv=0.5)),
    "shared engine and lru, float64": (dict(constraints={"ttft_ms": ("<=", 3000.0)}),
                                       dict(cache_model="lru", prefill_model="shared", dtype="float64")),
}


@pytest.mark.parametrize("case", [pytest.param(name, marks=[] if k == 0 else pytest.mark.slow)
                                  for k, name in enumerate(CASES)])
def test_bracket_matches_exhaustive_on_random_scenarios(case):
    search, options = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    scenario = dict(gpu=_random_gpus(rng, 3), model=["llama-3.1-8b", "llama-3.1-70b", "qwen3-235b-a22b", "mixtral-8x7b"],
                    think_time_s=sorted(rng.uniform(0, 30, 2).round(2).tolist()),
                    context_tokens=sorted(rng.integers(2000, 120_000, 2).tolist()), hit_rate=[0.0, 0.9])
    kw = dict(search, tp=(1, 2, 4, 8), concurrency=(1, 700), **options)
    exact = jp.optimize(**scenario, **kw, method="exhaustive")
    found = jp.optimize(**scenario, **kw, method="bracket")
    assert found.attrs["method"] == "bracket"
    ok = exact.feasible.values
    assert 0.2 * ok.size < ok.sum() < ok.size  # both outcomes exercised
    np.testing.assert_array_equal(found.feasible.values, ok)
    np.testing.assert_array_equal(found.reason.values, exact.reason.values)
    # the optimum itself; where the objective is flat to the solver's rounding, another C of it
    rel = found.value.values[ok] / exact.value.values[ok] - 1
    sense = -1.0 if search.get("sense") == "min" else 1.0
    assert (sense * rel).max() <= 1e-5, rel  # never past the exhaustive optimum
    if options.get("cache_model") == "lru" and options.get("prefill_model") == "shared":
        # the documented miss (README, "Optimal configurations"): two peaks of the LRU collapse
        # within one grid step, the search on the lower one; here 1 of 58 scenarios, 0.09 %
        # below (peaks at C 52 and 55 of a 112K-token agent, a dip at 54)
        missed = np.abs(rel) > 1e-5
        assert missed.sum() <= max(1, ok.sum() // 20) and np.abs(rel).max() <= 0.012, rel
    else:
        assert np.abs(rel).max() <= 1e-5, rel
    for name, (op, limit) in (search.get("constraints") or {}).items():
        got = found[name].values[ok]
        assert np.all(got <= limit) if op == "<=" else np.all(got >= limit)
    if options.get("cache_model") != "lru":
        assert np.all(found.concurrency.values[ok] <= found.concurrency_max.values[ok])
