"""Reduced sweeps keep exactly each cell's Pareto front and best configurations."""

import numpy as np
import pytest

import jaxpareto as jp

GRID = dict(gpu=["h100-sxm", "b200"], model=["llama-3.1-70b", "deepseek-v3"], tp=[1, 2, 4, 8],
            concurrency=list(range(1, 300, 9)), think_time_s=[0.0, 2.0], context_tokens=[8192, 65536],
            hit_rate=[0.0, 0.9], chunk_points=700)


@pytest.fixture(scope="module")
def full():
    return jp.sweep(**GRID)


@pytest.mark.parametrize("maximize", [(True, True), (False, True)])
def test_reduced_front_equals_full_front(full, maximize):
    x, y = ("output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu") if maximize[0] else ("ttft_ms", "turns_per_s")
    reduced = jp.pareto_sweep(**GRID, x=x, y=y, maximize=maximize, max_front_points=200)
    front = jp.pareto_front(full, x=x, y=y, maximize=maximize)
    sizes = front.sum(["tp", "concurrency"]).transpose(*reduced.front_size.dims)
    np.testing.assert_array_equal(sizes.values, reduced.front_size.values)
    assert reduced.front_size.values.max() > 3
    cell = dict(gpu="b200", model="llama-3.1-70b", engine="seed", think_time_s=2.0, context_tokens=65536, hit_rate=0.9)
    table = jp.frontier_table(full.sel(cell), front.sel(cell), x=x, y=y)
    got = reduced.sel(cell)
    k = int(got.front_size)
    assert sorted(zip(got.front_tp.values[:k], got.front_concurrency.values[:k])) == \
        sorted(zip(table.tp, table.concurrency))
    xs = got[f"front_{x}"].values[:k] * (1 if maximize[0] else -1)
    assert (np.diff(xs) >= 0).all()  # from the worst x to the best
    assert (got.front_tp.values[k:] == -1).all() and np.isnan(got[f"front_{x}"].values[k:]).all()
    # best configuration per objective
    valid = (full.feasible & full.converged).sel(cell)
    best_y = full[y].sel(cell).where(valid).max()
    assert float(got[f"best_{y}"]) == pytest.approx(float(best_y))
    point = full.sel(cell).sel(tp=int(got[f"best_{y}_tp"]), concurrency=int(got[f"best_{y}_concurrency"]))
    assert float(point[y]) == pytest.approx(float(best_y))


def test_truncated_front_is_visible(full):
    reduced = jp.pareto_sweep(**GRID, max_front_points=2)
    assert reduced.sizes["front_point"] == 2
    assert int(reduced.front_size.max()) > 2  # the full count is kept


def test_bad_reduction_arguments():
    with pytest.raises(jp.JaxparetoError, match="x"):
        jp.pareto_sweep(**GRID, x="feasible")
    with pytest.raises(jp.JaxparetoError, match="dims"):
        jp.pareto_sweep(**GRID, dims=("tp", "tp"))
    with pytest.raises(jp.JaxparetoError, match="max_front_points"):
        jp.pareto_sweep(**GRID, max_front_points=0)


def test_fronts_over_float_and_named_axes_keep_their_values():
    """A front taken over hit rate (float) or GPU (names) stores the axis' own values, padded
    with NaN or "" (not truncated to integers)."""
    import jaxpareto as jp

    by_h = jp.pareto_sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 8, 64],
                           hit_rate=[0.0, 0.25, 0.9], dims=("tp", "hit_rate"), max_front_points=8)
    h = by_h.front_hit_rate.values.reshape(-1, 8)[0]  # the first cell's front
    k = int(by_h.front_size.values.ravel()[0])
    assert by_h.front_hit_rate.dtype == np.float64 and set(h[:k]) <= {0.0, 0.25, 0.9} and np.isnan(h[k:]).all()
    by_gpu = jp.pareto_sweep(gpu=["h100-sxm", "b200"], model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 8],
                             dims=("gpu", "tp"), max_front_points=6)
    names = by_gpu.front_gpu.values.reshape(-1, 6)[0]
    k = int(by_gpu.front_size.values.ravel()[0])
    assert set(names[:k]) <= {"h100-sxm", "b200"} and (names[k:] == "").all()
