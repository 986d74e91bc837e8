"""Plots (jaxpareto.plot and `jaxpareto plot`): files, pixel sizes, plotted data, CLI errors."""

import ast
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxpareto as jp
import jaxpareto.plot
from jaxpareto.cli import main
from jaxpareto.dataset.comparison import cache_comparison_sweep
from jaxpareto.plot import unsupported

X, Y = "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu"
GPU, MODEL = "h100-sxm", "llama-3.1-70b"
SIZE, DPI = (6.0, 4.0), 30  # 180 x 120 pixels: fast to render


# Every sweep here has 321 to 384 points, padded to the same 384 lanes: one compilation serves them all.
@pytest.fixture(scope="module")
def grid():
    return jp.sweep(gpu=[GPU, "h200-sxm"], model=MODEL, tp=[2, 4, 8], concurrency=[1, 4, 16, 64, 256],
                    think_time_s=[0.0, 2.0, 10.0], context_tokens=[16384, 65536], hit_rate=[0.0, 0.9])


@pytest.fixture(scope="module")
def sessions():
    return jp.session_sweep(gpu=GPU, model=MODEL, tp=[4, 8], concurrency=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                            think_time_s=2.0, hit_rate=0.9, turns=20, kv_demand="synchronised")


def png_size(path) -> tuple[int, int]:
    """(width, height) from the PNG's IHDR chunk."""
    with open(path, "rb") as f:
        data = f.read(32)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def save(fig, path):
    fig.savefig(path, dpi=fig.dpi)
    assert path.stat().st_size > 1000
    return png_size(path)


def lines(fig, prefix):
    return {line.get_gid(): line for ax in fig.axes for line in ax.get_lines()
            if (line.get_gid() or "").startswith(prefix)}


def front_points(cell):
    """Unique (x, y) of the cell's pareto_front mask, sorted by x: what a frontier curve must show."""
    mask = np.asarray(jp.pareto_front(cell).transpose(*cell[X].dims).values)
    points = np.unique(np.stack([np.asarray(cell[X].values)[mask], np.asarray(cell[Y].values)[mask]], 1), axis=0)
    return points[np.argsort(points[:, 0], kind="stable")]


def test_frontier_curves_are_the_pareto_fronts(grid, tmp_path):
    fig = jp.plot_frontier(grid, GPU, MODEL, context_tokens=65536, hit_rate=0.9, size=SIZE, dpi=DPI)
    assert save(fig, tmp_path / "f.png") == (180, 120)
    curves = lines(fig, "frontier")
    assert set(curves) == {"frontier think_time_s=0", "frontier think_time_s=2", "frontier think_time_s=10"}
    for z in (0.0, 2.0, 10.0):
        expected = front_points(grid.sel(gpu=GPU, model=MODEL, context_tokens=65536, hit_rate=0.9, think_time_s=z))
        got = np.stack(curves[f"frontier think_time_s={z:g}"].get_data(), 1).astype(float)
        assert len(expected) >= 3
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    ax = fig.axes[0]
    assert "tokens/s" in ax.get_xlabel() and "tokens/s/GPU" in ax.get_ylabel()
    assert MODEL in fig.get_suptitle() and GPU in fig.get_suptitle()
    assert "65,536" in ax.get_title() and "0.9" in ax.get_title()
    assert any(t.get_text().startswith("TP") for t in ax.texts)  # TP/C labels on the highlighted curve
    assert ax.get_legend() is not None


def test_open_loop_frontier_spans_tp_and_the_request_rate(tmp_path):
    """An open-loop sweep's frontier is over TP x request rate (it had been refused: "needs a
    'concurrency' dimension"), from the full sweep and from a reduced one alike, and the CLI
    draws it from a store."""
    grid = dict(tp=[4, 8], request_rate=[0.25, 0.5, 1.0, 2.0, 4.0, 8.0], think_time_s=[0.0, 5.0], turns_per_session=4,
                context_tokens=16384, hit_rate=[0.0, 0.9], arrivals="poisson", prefill_model="shared")
    ds = jp.sweep(GPU, MODEL, **grid)
    fig = jp.plot_frontier(ds, hit_rate=0.9, size=SIZE, dpi=DPI)
    cell = ds.sel(gpu=GPU, model=MODEL, hit_rate=0.9, think_time_s=0.0).squeeze()
    mask = np.asarray(jp.pareto_front(cell, dims=("tp", "request_rate")).transpose(*cell[X].dims).values)
    expected = np.unique(np.stack([cell[X].values[mask], cell[Y].values[mask]], 1), axis=0)
    got = np.stack(lines(fig, "frontier")["frontier think_time_s=0"].get_data(), 1).astype(float)
    np.testing.assert_allclose(got, expected[np.argsort(expected[:, 0])], rtol=1e-6)
    assert len(got) >= 3 and "request rate" in fig.axes[0].get_title()
    assert any("λ" in t.get_text() for t in fig.axes[0].texts)
    front = jp.pareto_sweep(GPU, MODEL, **grid)
    from_front = jp.plot_frontier(front, hit_rate=0.9)
    assert "concurrency" not in from_front.axes[0].get_title()  # a reduced store's load is the rate too
    reduced = lines(from_front, "frontier")["frontier think_time_s=0"]
    np.testing.assert_allclose(np.stack(reduced.get_data(), 1).astype(float), got, rtol=1e-6)
    assert jp.plot.unsupported(ds, "cache") is None
    jp.to_zarr(ds, tmp_path / "open.zarr")
    assert main(["plot", str(tmp_path / "open.zarr"), "--out", str(tmp_path / "png"), "--size", "6x4",
                 "--dpi", "30"]) == 0
    assert {p.name.split("_")[0] for p in (tmp_path / "png").glob("*.png")} >= {"frontier", "cache"}


def test_frontier_defaults_and_selection_errors(grid):
    fig = jp.plot_frontier(grid, think_times=[2.0])  # first GPU, model and cell
    (line,) = lines(fig, "frontier").values()
    expected = front_points(grid.isel(gpu=0, model=0, context_tokens=0, hit_rate=0).sel(think_time_s=2.0))
    np.testing.assert_allclose(np.stack(line.get_data(), 1).astype(float), expected, rtol=1e-6)
    with pytest.raises(jp.JaxparetoError, match="context_tokens.*not on the grid"):
        jp.plot_frontier(grid, context_tokens=1234)
    with pytest.raises(jp.JaxparetoError, match="bogus: not a dimension"):
        jp.plot_frontier(grid, bogus=1)
    with pytest.raises(jp.JaxparetoError, match="tp: this plot spans"):
        jp.plot_frontier(grid, tp=8)
    with pytest.raises(jp.JaxparetoError, match="size"):
        jp.plot_frontier(grid, size=(0, 3))


def assert_cache_curves(fig, cell, z, h):
    """The three curves are the fronts of standard serving, the agent (Z, h) and the agent without cache."""
    curves = lines(fig, "frontier")
    for gid, zz, hh in (("standard", 0.0, 0.0), ("agent cache", z, h), ("agent no-cache", z, 0.0)):
        got = np.stack(curves[f"frontier {gid}"].get_data(), 1).astype(float)
        np.testing.assert_allclose(got, front_points(cell.sel(think_time_s=zz, hit_rate=hh)), rtol=1e-6)


def test_cache_comparison_three_frontiers(grid, tmp_path):
    fig = jp.plot_cache_comparison(grid, GPU, MODEL, context_tokens=16384, size=SIZE, dpi=DPI)
    assert save(fig, tmp_path / "c.png") == (180, 120)
    # default agent: the first positive think time (2 s) and the highest hit rate (0.9)
    assert_cache_curves(fig, grid.sel(gpu=GPU, model=MODEL, context_tokens=16384), 2.0, 0.9)
    with pytest.raises(jp.JaxparetoError, match="think_time_s: the agent's value must be > 0"):
        jp.plot_cache_comparison(grid, think_time_s=0.0)
    assert "think_time_s = 0" in unsupported(grid.sel(think_time_s=[2.0]), "cache")
    assert "hit_rate = 0" in unsupported(grid.sel(hit_rate=[0.9]), "cache")


@pytest.fixture
def no_sweep(monkeypatch):
    """Every function that computes a dataset raises: what runs under it draws only given datasets."""
    def refuse(*args, **kwargs):
        raise AssertionError("the plot package computed a sweep")

    for module, name in (("jaxpareto.dataset.sweep", "sweep"), ("jaxpareto.dataset.session", "session_sweep"),
                         ("jaxpareto.dataset.reduce", "pareto_sweep"),
                         ("jaxpareto.dataset.comparison", "cache_comparison_sweep"), ("jaxpareto", "sweep"),
                         ("jaxpareto", "session_sweep"), ("jaxpareto", "pareto_sweep")):
        monkeypatch.setattr(f"{module}.{name}", refuse)


def test_cache_comparison_of_a_computed_comparison_sweep(tmp_path):
    ds = cache_comparison_sweep(GPU, MODEL, think_time_s=5.0, hit_rate=0.8, tp=[2, 4, 8],
                                concurrency=list(range(1, 301, 10)))  # 360 points
    np.testing.assert_allclose(ds.think_time_s.values, [0.0, 5.0])
    np.testing.assert_allclose(ds.hit_rate.values, [0.0, 0.8], rtol=1e-6)
    fig = jp.plot_cache_comparison(ds, size=SIZE, dpi=DPI)
    assert save(fig, tmp_path / "c.png") == (180, 120)
    curves = lines(fig, "frontier")
    assert len(curves) == 3 and all(len(line.get_xdata()) >= 3 for line in curves.values())
    assert "Z = 5 s" in curves["frontier agent cache"].get_label()
    assert_cache_curves(fig, ds.sel(gpu=GPU, model=MODEL).isel(context_tokens=0), *ds.think_time_s.values[1:],
                        *ds.hit_rate.values[1:])
    with pytest.raises(jp.JaxparetoError, match="gpu/model"):
        cache_comparison_sweep(GPU, None)
    with pytest.raises(jp.JaxparetoError, match="think_time_s: the agent's value must be > 0"):
        cache_comparison_sweep(GPU, MODEL, think_time_s=0.0)
    with pytest.raises(jp.JaxparetoError, match="hit_rate: the agent's value must be > 0"):
        cache_comparison_sweep(GPU, MODEL, hit_rate=0.0)


def test_cache_comparison_draws_given_datasets_without_a_sweep(grid, no_sweep, tmp_path):
    fig = jp.plot_cache_comparison(grid, GPU, MODEL, think_time_s=10.0, context_tokens=65536, size=SIZE, dpi=DPI)
    assert_cache_curves(fig, grid.sel(gpu=GPU, model=MODEL, context_tokens=65536), 10.0, 0.9)
    with pytest.raises(jp.JaxparetoError, match="ds: expected an xarray.Dataset"):
        jp.plot_cache_comparison(None, GPU, MODEL)
    written, skipped = jp.save_plots(grid.sel(gpu=[GPU]), tmp_path / "p", size=SIZE, dpi=DPI)
    assert sorted(p.name for p in written) == sorted(f"{kind}_{GPU}_{MODEL}.png"
                                                     for kind in ("cache", "frontier", "memory_wall"))
    assert skipped == []


def test_plot_package_imports_nothing_that_computes_a_sweep():
    """The plot package draws given datasets: no import, lazy ones included, reaches a sweep."""
    allowed = ("jaxpareto.plot", "jaxpareto.definitions", "jaxpareto.dataset.pareto", "jaxpareto.dataset.selection")
    folder = Path(jaxpareto.plot.__file__).parent
    imported = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: relative import"
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    ours = {name for name in imported if name.split(".")[0] == "jaxpareto"}
    assert ours and all(name.startswith(allowed) for name in ours), sorted(ours)
    assert "argparse" not in imported


def test_plot_package_does_not_print():
    folder = Path(jaxpareto.plot.__file__).parent
    for path in folder.glob("*.py"):
        calls = [node for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]
        assert not calls, f"{path.name} prints"


def test_memory_wall_per_turn_is_the_seed_wall(sessions, tmp_path):
    fig = jp.plot_memory_wall(sessions, size=(5, 3), dpi=40)
    assert save(fig, tmp_path / "m.png") == (200, 120)
    curves = lines(fig, "memory_wall")
    assert set(curves) == {"memory_wall tp=4", "memory_wall tp=8"}
    for tp in (4, 8):
        x, y = curves[f"memory_wall tp={tp}"].get_data()
        np.testing.assert_array_equal(x, np.arange(1, 21))
        np.testing.assert_array_equal(y, sessions.concurrency_max.sel(tp=tp).isel(concurrency=0).squeeze().values)
    # the seed's Step 4 numbers (70B FP16 on 8 x H100; the equations: 92, 42, 26 with the catalog's 70.55B)
    assert [t.get_text() for t in fig.axes[0].texts] == ["92", "42", "26"]
    assert "turn" in fig.axes[0].get_xlabel() and "sessions" in fig.axes[0].get_ylabel()


def test_memory_wall_against_context_by_tp_and_gpu(grid, tmp_path):
    fig = jp.plot_memory_wall(grid, GPU, MODEL, size=SIZE, dpi=DPI)
    assert save(fig, tmp_path / "m.png") == (180, 120)
    x, y = lines(fig, "memory_wall")["memory_wall tp=8"].get_data()
    np.testing.assert_array_equal(x, [16384, 65536])
    wall = grid.concurrency_max.sel(gpu=GPU, model=MODEL, engine="seed", tp=8).isel(concurrency=0, think_time_s=0,
                                                                                 hit_rate=0)
    np.testing.assert_array_equal(y, wall.values)
    by_gpu = lines(jp.plot_memory_wall(grid, model=MODEL, by="gpu"), "memory_wall")
    assert set(by_gpu) == {"memory_wall gpu=h100-sxm", "memory_wall gpu=h200-sxm"}
    assert by_gpu["memory_wall gpu=h200-sxm"].get_ydata()[0] > by_gpu["memory_wall gpu=h100-sxm"].get_ydata()[0]
    assert "two or more context_tokens" in unsupported(grid.sel(context_tokens=[16384]), "memory_wall")
    # a grid given out of order is drawn left to right (its line had zig-zagged in the list's order)
    backwards = lines(jp.plot_memory_wall(grid.isel(context_tokens=[1, 0]), GPU, MODEL), "memory_wall")
    np.testing.assert_array_equal(backwards["memory_wall tp=8"].get_data(), (x, y))
    with pytest.raises(jp.JaxparetoError, match="by"):
        jp.plot_memory_wall(grid, by="model")


@pytest.fixture(scope="module")
def store(grid, tmp_path_factory):
    return jp.to_zarr(grid.sel(gpu=[GPU]), tmp_path_factory.mktemp("plot") / "s.zarr")


def test_cli_writes_every_plot(store, tmp_path, capsys):
    out = tmp_path / "plots"
    code = main(["plot", str(store), "--out", str(out), "--size", "4x3", "--dpi", "40",
                 "--sel", "context_tokens=65536", "--sel", "think_time_s=10"])
    printed = capsys.readouterr().out.split()
    assert code == 0
    names = {f"{kind}_{GPU}_{MODEL}.png" for kind in ("frontier", "cache", "memory_wall")}
    assert {p.name for p in out.iterdir()} == names
    assert sorted(printed) == sorted(str(out / n) for n in names)
    for name in names:
        assert png_size(out / name) == (160, 120)


def test_cli_skips_what_the_dataset_lacks(grid, tmp_path, capsys):
    path = jp.to_zarr(grid.sel(gpu=[GPU], think_time_s=[2.0], context_tokens=[16384]), tmp_path / "one.zarr")
    assert main(["plot", str(path), "--out", str(tmp_path / "p"), "--dpi", "20"]) == 0
    out = capsys.readouterr().out
    assert "skipped cache: needs think_time_s = 0" in out and "skipped memory_wall: needs two or more" in out
    assert [p.name for p in (tmp_path / "p").iterdir()] == [f"frontier_{GPU}_{MODEL}.png"]


def test_cli_on_a_stored_session_sweep(sessions, tmp_path, capsys):
    path = jp.to_zarr(sessions, tmp_path / "sessions.zarr")  # lazily loaded: context_tokens along turn
    out = tmp_path / "p"
    assert main(["plot", str(path), "--out", str(out), "--dpi", "20", "--sel", "turn=10"]) == 0
    assert "skipped cache: needs think_time_s = 0" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [f"frontier_{GPU}_{MODEL}.png", f"memory_wall_{GPU}_{MODEL}.png"]


@pytest.mark.parametrize("args, message", [
    (["--sel", "bogus=1"], "--sel bogus: unknown axis"),
    (["--sel", "context_tokens=1234"], "--sel context_tokens: '1234' is not on the grid"),
    (["--sel", "gpu=b200"], "--sel gpu: 'b200' is not on the grid"),
    (["--sel", "tp=8"], "--sel tp: the plots span every tp"),
    (["--sel", "hit_rate"], "--sel: expected AXIS=VALUE"),
    (["--size", "big"], "--size: expected WIDTHxHEIGHT"),
    (["--dpi", "0"], "dpi: must be 10 to 1200"),
])
def test_cli_bad_arguments_exit_2_before_plotting(store, tmp_path, capsys, args, message):
    out = tmp_path / "never"
    assert main(["plot", str(store), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxpareto: error: ") and message in err, err
    assert not out.exists()
    if "(allowed: " in err and args[0] == "--sel" and "not on the grid" not in err:  # the axes it may fix, only
        allowed = err.split("(allowed: ")[1].split(")")[0].split(", ")
        assert "tp" not in allowed and "concurrency" not in allowed and "hit_rate" in allowed, err


def test_cli_refuses_a_path_that_is_not_a_store(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "missing.zarr"), "--out", str(tmp_path / "p")]) == 2
    assert "missing.zarr does not exist" in capsys.readouterr().err
    (tmp_path / "folder").mkdir()
    assert main(["plot", str(tmp_path / "folder"), "--out", str(tmp_path / "p")]) == 2
    assert "is not a zarr store" in capsys.readouterr().err


def test_import_jaxpareto_does_not_import_matplotlib():
    code = "import sys, jaxpareto; print('matplotlib' in sys.modules, callable(jaxpareto.plot_frontier))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.stdout.split() == ["False", "True"], result.stderr


# ----------------------------------------------------------------------------- reduced stores and pixel sizes


@pytest.fixture(scope="module")
def reduced_store(tmp_path_factory):
    """A stored `jaxpareto sweep --reduce` of the `store` fixture's grid, fronts cut at 64 points."""
    reduced = jp.pareto_sweep(gpu=[GPU], model=MODEL, tp=[2, 4, 8], concurrency=[1, 4, 16, 64, 256],
                              think_time_s=[0.0, 2.0, 10.0], context_tokens=[16384, 65536], hit_rate=[0.0, 0.9])
    return jp.to_zarr(reduced, tmp_path_factory.mktemp("reduced") / "r.zarr")


def curves(fig):
    return {gid: np.stack(line.get_data(), 1).astype(float) for gid, line in lines(fig, "frontier").items()}


def test_reduced_store_draws_its_fronts(grid, reduced_store, tmp_path, capsys):
    import xarray as xr

    reduced = xr.open_zarr(reduced_store)
    for plot in (jp.plot_frontier, jp.plot_cache_comparison):  # the stored fronts are the full sweep's
        full = curves(plot(grid, GPU, MODEL, context_tokens=65536, size=SIZE, dpi=DPI))
        drawn = curves(plot(reduced, GPU, MODEL, context_tokens=65536, size=SIZE, dpi=DPI))
        assert full.keys() == drawn.keys() and len(full) == 3
        for gid in full:
            np.testing.assert_array_equal(drawn[gid], full[gid])
    out = tmp_path / "p"
    assert main(["plot", str(reduced_store), "--out", str(out), "--dpi", "30", "--size", "4.1x3"]) == 0
    printed = capsys.readouterr().out
    assert "skipped memory_wall: a reduced store (`jaxpareto sweep --reduce`) keeps only each cell's Pareto front" \
        in printed and "without --reduce" in printed
    assert sorted(p.name for p in out.iterdir()) == [f"cache_{GPU}_{MODEL}.png", f"frontier_{GPU}_{MODEL}.png"]
    assert png_size(out / f"frontier_{GPU}_{MODEL}.png") == (123, 90)  # rounded: 4.1 * 30 == 122.99999999999999


def test_reduced_front_cut_short_says_so():
    cut = jp.pareto_sweep(gpu=GPU, model=MODEL, tp=[2, 4, 8], concurrency=[1, 4, 16, 64, 256], think_time_s=[0.0],
                          context_tokens=16384, hit_rate=0.0, max_front_points=2)
    (line,) = lines(jp.plot_frontier(cut, size=SIZE, dpi=DPI), "frontier").values()
    assert len(line.get_xdata()) == 2 and "2 lowest-interactivity of" in line.get_label()


def test_reduced_store_of_other_objectives_skips_every_plot(tmp_path, capsys):
    other = jp.pareto_sweep(gpu=GPU, model=MODEL, tp=[2, 4], concurrency=[1, 4], think_time_s=[0.0, 2.0],
                            context_tokens=16384, hit_rate=[0.0, 0.9], x="output_tokens_per_s_per_user",
                            y="ttft_ms", maximize=(True, False))
    path = jp.to_zarr(other, tmp_path / "other.zarr")
    code = main(["plot", str(path), "--out", str(tmp_path / "p"), "--dpi", "20"])
    captured = capsys.readouterr()
    assert code == 1 and not captured.err  # nothing drawn: exit 1 as for any dataset, not a bad argument
    for plot in ("frontier", "cache", "memory_wall"):
        assert f"skipped {plot}: a reduced store" in captured.out and "without --reduce" in captured.out
    assert "ttft_ms against output_tokens_per_s_per_user" in captured.out
    assert "no plot could be drawn" in captured.out and not list((tmp_path / "p").iterdir())


@pytest.mark.parametrize("size, dpi, pixels", [
    ((8.3, 5.1), 72.5, (602, 370)),  # 601.75 x 369.75: rounded, not truncated
    ((4.1, 3.0), 30, (123, 90)),  # 4.1 * 30 == 122.99999999999999 in floating point
    ((6.0, 4.0), 30, (180, 120)),
])
def test_png_pixels_are_size_times_dpi_rounded(grid, tmp_path, size, dpi, pixels):
    fig = jp.plot_frontier(grid, GPU, MODEL, think_times=[0.0], annotate=False, size=size, dpi=dpi)
    assert save(fig, tmp_path / "f.png") == pixels


def test_a_pair_with_no_feasible_point_is_skipped_with_its_reason(tmp_path):
    ds = jp.sweep(gpu="h100-sxm", model=["llama-3.1-8b", "deepseek-v3"], tp=[1, 2], concurrency=[1, 8],
                  context_tokens=[8192, 32768], think_time_s=2.0, hit_rate=[0.0, 0.9])
    written, skipped = jp.save_plots(ds, tmp_path)
    assert not any("deepseek" in p.name for p in written) and any("llama-3.1-8b" in p.name for p in written)
    assert "h100-sxm_deepseek-v3: no feasible point (weights exceed memory)" in skipped


def test_cli_refuses_to_replace_plots_without_overwrite(grid, tmp_path, capsys):
    path = jp.to_zarr(grid.sel(gpu=[GPU], think_time_s=[2.0], context_tokens=[16384]), tmp_path / "one.zarr")
    out = tmp_path / "p"
    assert main(["plot", str(path), "--out", str(out), "--dpi", "20"]) == 0
    before = (out / f"frontier_{GPU}_{MODEL}.png").read_bytes()
    capsys.readouterr()
    assert main(["plot", str(path), "--out", str(out), "--dpi", "30"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / f"frontier_{GPU}_{MODEL}.png").read_bytes() == before  # nothing drawn
    assert main(["plot", str(path), "--out", str(out), "--dpi", "30", "--overwrite"]) == 0
    assert (out / f"frontier_{GPU}_{MODEL}.png").read_bytes() != before


def test_names_alike_as_file_names_write_files_of_their_own(grid, tmp_path):
    """Two GPUs whose names a file name makes alike (a/b and a_b) had written the same PNGs, the
    second over the first; each takes a short hash of its own name, and unique names stay plain."""
    relabelled = grid.assign_coords(gpu=["a/b", "a_b"])
    written, _ = jp.save_plots(relabelled, tmp_path / "p", size=SIZE, dpi=DPI)
    names = [p.name for p in written]
    assert len(names) == len(set(names)) == 7  # three plots per GPU, and the wall by GPU
    assert all(p.is_file() for p in written)
    assert f"memory_wall_{MODEL}_by_gpu.png" in names
    assert {n.split("_", 2)[0] for n in names} <= {"frontier", "cache", "memory"}
    plain = jp.save_plots(grid.assign_coords(gpu=["a/b", "c"]), tmp_path / "q", size=SIZE, dpi=DPI)[0]
    assert {p.name for p in plain} >= {f"frontier_a_b_{MODEL}.png", f"frontier_c_{MODEL}.png"}
