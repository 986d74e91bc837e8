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


@pytest.mark.parametrize("on_device", [False, True])
@pytest.mark.parametrize("maximize", [(True, True), (False, True)])
def test_reduced_front_equals_full_front(full, maximize, on_device, monkeypatch):
    """On the host (a CPU's default) and on the device (an accelerator's), the same fronts."""
    import jaxpareto.dataset.reduce as reduce

    monkeypatch.setattr(reduce, "reduces_on_device", lambda: on_device)
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
    with pytest.raises(jp.JaxparetoError, match="not a numeric output: 'decode_bound'"):
        jp.pareto_sweep(**GRID, y="decode_bound")
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


def test_device_front_mask_equals_the_host_one_with_ties_and_invalid_points():
    """The on-device reduction's sort-and-scan picks exactly `front_mask`'s points, ties and
    invalid points included."""
    import jax.numpy as jnp

    from jaxpareto.dataset.pareto import front_mask
    from jaxpareto.dataset.reduce import front_mask_rows

    rng = np.random.default_rng(3)
    x = rng.integers(0, 12, size=(400, 37)).astype(np.float32)  # many ties in x, y and both
    y = rng.integers(0, 12, size=(400, 37)).astype(np.float32)
    valid = rng.random((400, 37)) < 0.8
    want = front_mask(x.astype(np.float64), y.astype(np.float64), valid)
    got = np.asarray(front_mask_rows(jnp.asarray(x), jnp.asarray(y), jnp.asarray(valid)))
    np.testing.assert_array_equal(got, want)
    assert want.sum() > 400 and (~valid & want).sum() == 0


def test_device_and_host_reductions_are_identical(monkeypatch):
    import xarray as xr

    import jaxpareto.dataset.reduce as reduce

    kw = dict(GRID, max_front_points=5, x="ttft_ms", y="output_tokens_per_s_per_gpu", maximize=(False, True))
    monkeypatch.setattr(reduce, "reduces_on_device", lambda: True)
    device = jp.pareto_sweep(**kw)
    monkeypatch.setattr(reduce, "reduces_on_device", lambda: False)
    host = jp.pareto_sweep(**kw)
    host.attrs["created"] = device.attrs["created"]  # wall-clock stamps may differ by a second
    xr.testing.assert_identical(device, host)


def test_a_dimensionless_quantity_is_an_objective_as_in_the_full_sweep():
    """Objectives are what `pareto_front` takes: gpu_utilization (units "1") had been refused
    here as "not a numeric output" while the full sweep's front took it."""
    grid = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 8, 64, 256], think_time_s=[0.0, 5.0])
    reduced = jp.pareto_sweep(**grid, x="gpu_utilization", y="turns_per_s", maximize=(False, True))
    front = jp.pareto_front(jp.sweep(**grid), x="gpu_utilization", y="turns_per_s", maximize=(False, True))
    sizes = front.sum(["tp", "concurrency"]).transpose(*reduced.front_size.dims)
    np.testing.assert_array_equal(sizes.values, reduced.front_size.values)


def test_the_cli_summary_says_why_it_prints_fewer_rows_than_the_front(tmp_path, capsys):
    """The headline cell's front counts configurations that tie exactly (concurrency beyond what
    KV memory admits) and the printed table drops them: the summary says so, and says when
    --max-front-points kept fewer."""
    from jaxpareto.cli import main

    spec = tmp_path / "s.toml"
    spec.write_text('[grid]\ngpu = ["h100-sxm"]\nmodel = ["llama-3.1-70b"]\ntp = [4, 8]\n'
                    'concurrency = [1, 8, 64, 256, 512]\ncontext_tokens = [65536]\nhit_rate = [0.0]\n'
                    'think_time_s = [0.0]\n')
    assert main(["sweep", str(spec), "--reduce"]) == 0
    out = capsys.readouterr().out
    assert ": 5 configurations" in out and "(2 more frontier configurations tie exactly" in out
    assert main(["sweep", str(spec), "--reduce", "--max-front-points", "1"]) == 0
    assert "(the front holds 5 configurations; 1 kept: --max-front-points)" in capsys.readouterr().out
