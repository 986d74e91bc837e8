"""Pareto extraction: sort-and-scan against an O(n^2) brute force, and dataset semantics."""

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxpareto as jp
from jaxpareto.dataset.pareto import front_mask
from jaxpareto.definitions.schema import best_sense


def brute_force(x, y, valid):
    n = len(x)
    out = np.zeros(n, dtype=bool)
    for i in range(n):
        if not valid[i]:
            continue
        dominated = False
        for j in range(n):
            if j != i and valid[j] and x[j] >= x[i] and y[j] >= y[i] and (x[j] > x[i] or y[j] > y[i]):
                dominated = True
                break
        out[i] = not dominated
    return out


# Few distinct values so that ties and exact duplicates are common; NaN marks missing points.
values = st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.0, -1.0, np.nan])


@given(data=st.data(), groups=st.integers(1, 4), n=st.integers(0, 30))
def test_front_equals_brute_force(data, groups, n):
    x = data.draw(hnp.arrays(np.float64, (groups, n), elements=values))
    y = data.draw(hnp.arrays(np.float64, (groups, n), elements=values))
    flags = data.draw(hnp.arrays(np.bool_, (groups, n)))
    valid = flags & np.isfinite(x) & np.isfinite(y)
    got = front_mask(x, y, valid)
    for g in range(groups):
        np.testing.assert_array_equal(got[g], brute_force(x[g], y[g], valid[g]))


@given(data=st.data(), n=st.integers(1, 40))
def test_front_is_permutation_invariant_and_undominated(data, n):
    x = data.draw(hnp.arrays(np.float64, (1, n), elements=st.floats(-5, 5)))
    y = data.draw(hnp.arrays(np.float64, (1, n), elements=st.floats(-5, 5)))
    valid = np.ones((1, n), dtype=bool)
    front = front_mask(x, y, valid)[0]
    assert front.any()
    perm = np.random.default_rng(n).permutation(n)
    np.testing.assert_array_equal(front_mask(x[:, perm], y[:, perm], valid)[0], front[perm])
    for i in np.flatnonzero(front):
        assert not np.any((x[0] >= x[0, i]) & (y[0] >= y[0, i]) & ((x[0] > x[0, i]) | (y[0] > y[0, i])))


def test_large_random_sets_against_brute_force():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 40, size=(5, 400)).astype(float)
    y = rng.integers(0, 40, size=(5, 400)).astype(float)
    valid = rng.random((5, 400)) > 0.1
    got = front_mask(x, y, valid)
    for g in range(5):
        np.testing.assert_array_equal(got[g], brute_force(x[g], y[g], valid[g]))


def test_dataset_front_groups_and_flags(small_grid):
    front = jp.pareto_front(small_grid)
    assert front.dims == small_grid.ttft_ms.dims
    assert front.dtype == bool
    assert not (front & ~small_grid.feasible).any()
    assert not (front & ~small_grid.converged).any()
    # Recompute one group by brute force.
    cell = small_grid.sel(gpu="h100-sxm", model="llama-3.1-70b", engine="seed", think_time_s=2.0, context_tokens=4096,
                          hit_rate=0.9)
    x = cell.output_tokens_per_s_per_user.values.ravel()
    y = cell.output_tokens_per_s_per_gpu.values.ravel()
    valid = (cell.feasible & cell.converged).values.ravel()
    expected = brute_force(x, y, valid)
    got = front.sel(gpu="h100-sxm", model="llama-3.1-70b", engine="seed", think_time_s=2.0, context_tokens=4096,
                    hit_rate=0.9)
    np.testing.assert_array_equal(got.transpose("tp", "concurrency").values.ravel(), expected)
    assert expected.sum() >= 2


def test_latencies_and_costs_are_minimised_unless_told(small_grid):
    """A latency (``*_ms``) or a cost objective is minimised by default, any other maximised: the
    front of TTFT against turns/s is the lowest-TTFT one, as with ``maximize=(False, True)``."""
    assert jp.pareto_front(small_grid, x="ttft_ms", y="turns_per_s").equals(
        jp.pareto_front(small_grid, x="ttft_ms", y="turns_per_s", maximize=(False, True)))
    assert not jp.pareto_front(small_grid, x="ttft_ms", y="turns_per_s").equals(
        jp.pareto_front(small_grid, x="ttft_ms", y="turns_per_s", maximize=(True, True)))
    assert [best_sense(name) for name in ("p99_ttft_ms", "gpu_cost_per_turn_usd", "task_time_s", "cache_lifetime_s",
                                          "turns_per_s", "tasks_per_s")] == ["min", "min", "min", "max", "max", "max"]


def test_minimise_and_other_dims(small_grid):
    # Lowest TTFT and highest throughput over tp alone.
    front = jp.pareto_front(small_grid, x="ttft_ms", y="turns_per_s", dims="tp", maximize=(False, True))
    cell = small_grid.isel(gpu=0, model=1, engine=0, concurrency=1, think_time_s=1, context_tokens=0, hit_rate=0)
    x, y = -cell.ttft_ms.values, cell.turns_per_s.values
    valid = (cell.feasible & cell.converged).values
    np.testing.assert_array_equal(front.isel(gpu=0, model=1, engine=0, concurrency=1, think_time_s=1, context_tokens=0,
                                             hit_rate=0).values,
                                  brute_force(x, y, valid))


def test_frontier_table(small_grid):
    cell = small_grid.sel(gpu="b200", model="llama-3.1-70b", engine="seed", think_time_s=2.0, context_tokens=65536,
                          hit_rate=0.9)
    table = jp.frontier_table(cell)
    front = jp.pareto_front(cell)
    assert len(table) == int(front.sum())
    assert {"tp", "concurrency", "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu", "ttft_ms",
            "decode_bound"} <= set(table.columns)
    assert set(table.decode_bound) <= {"memory", "compute"}
    assert table.output_tokens_per_s_per_user.is_monotonic_increasing
    for _, row in table.iterrows():
        point = cell.sel(tp=row.tp, concurrency=row.concurrency)
        assert float(point.ttft_ms) == pytest.approx(row.ttft_ms)


def test_bad_names():
    ds = xr.Dataset({"a": (("tp",), [1.0])}, coords={"tp": [1]})
    with pytest.raises(jp.JaxparetoError, match="unknown variable 'b'"):
        jp.pareto_front(ds, x="a", y="b", dims=("tp",))
    flags = ds.assign(feasible=(("tp",), [True]), ok=(("tp",), [True]))
    for flag in ("feasible", "ok"):  # a status flag, not a quantity (had been taken as 0 / 1)
        with pytest.raises(jp.JaxparetoError, match=f"'{flag}' is a status flag"):
            jp.pareto_front(flags, x="a", y=flag, dims=("tp",))
    with pytest.raises(jp.JaxparetoError, match="unknown dimension 'gpu'"):
        jp.pareto_front(ds, x="a", y="a", dims=("gpu",))
