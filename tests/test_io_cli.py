"""zarr round trip, the CLI end to end, and compile-once behaviour."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import jaxpareto as jp
from jaxpareto.mapper import evaluate_block
from jaxpareto.definitions.axes import AXES
from jaxpareto.definitions.schema import OUTPUTS, PERCENTILE_VARIABLES

REPO = Path(__file__).resolve().parents[1]


def test_zarr_round_trip_identical(small_grid, tmp_path):
    path = jp.to_zarr(small_grid, tmp_path / "s.zarr")
    back = xr.open_zarr(path)
    xr.testing.assert_identical(small_grid, back)
    xr.testing.assert_identical(small_grid, back.load())
    with pytest.raises(jp.JaxparetoError, match="already exists"):
        jp.to_zarr(small_grid, path)
    jp.to_zarr(small_grid, path, overwrite=True)


def test_schema(small_grid):
    assert tuple(small_grid.ttft_ms.dims) == AXES
    # every output but the percentiles, which a closed loop with fixed lengths keeps only on request
    assert set(small_grid.data_vars) == set(OUTPUTS) - set(PERCENTILE_VARIABLES)
    for name in (*small_grid.data_vars, *small_grid.coords):
        assert small_grid[name].attrs["units"] and small_grid[name].attrs["long_name"], name
    for key in ("jaxpareto_version", "created", "osl", "delta_tokens", "eta_prefill", "eta_decode",
                "elementwise_overhead", "damping", "tol", "max_iter", "hardware", "models", "engines", "dtype"):
        assert key in small_grid.attrs, key
    assert small_grid.feasible.dtype == bool and small_grid.converged.dtype == bool
    assert small_grid.iterations.dtype == np.int32


def test_second_sweep_of_as_many_sub_batches_does_not_recompile(programs_kept):
    kwargs = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=[1, 2, 4], concurrency=[1, 5, 9, 33],
                  think_time_s=[0.0, 1.0], context_tokens=[1000, 2000], hit_rate=[0.0, 0.5])
    jp.sweep(**kwargs)
    before = evaluate_block._cache_size()
    # same shapes, other values: other GPUs, models, axes and scalars
    jp.sweep(gpu="mi300x", model="deepseek-v3", tp=[2, 4, 8], concurrency=[2, 6, 10, 40],
             think_time_s=[3.0, 9.0], context_tokens=[5000, 9000], hit_rate=[0.1, 0.7], osl=512, eta_decode=0.5, tol=1e-5)
    assert evaluate_block._cache_size() == before
    # other shapes with as many sub-batches per block: 2 GPUs x 3 models x 7 concurrencies x ...
    other = jp.sweep(gpu=["h100-sxm", "b200"], model=["llama-3.1-70b", "qwen3-32b", "deepseek-v3"], tp=[8],
                     concurrency=[1, 2, 3, 5, 8, 13, 21], think_time_s=[1.0], context_tokens=[4096, 8192, 16384],
                     hit_rate=[0.5])
    assert evaluate_block._cache_size() == before
    # and the same numbers as the points swept alone (the block's indexing is right)
    for gpu, model, c, ctx in [("b200", "qwen3-32b", 13, 8192), ("h100-sxm", "deepseek-v3", 21, 16384)]:
        alone = jp.sweep(gpu=gpu, model=model, tp=[8], concurrency=[c], think_time_s=[1.0], context_tokens=[ctx],
                         hit_rate=[0.5])
        picked = other.sel(gpu=gpu, model=model, concurrency=c, context_tokens=ctx)
        for name in ("ttft_ms", "tpot_ms", "batch_eff", "turns_per_s"):
            np.testing.assert_array_equal(picked[name].values.squeeze(), alone[name].values.squeeze())


def test_small_sweeps_asking_for_other_variables_share_one_program(programs_kept):
    """A small grid computes its tier of outputs (every mean, or every output where a percentile
    is asked for) and keeps those asked for: other variables, same tier, no compilation, and the
    same bits as a sweep keeping everything. A larger grid compiles only what it keeps, in blocks
    of any size."""
    from jaxpareto.mapper import SHARED_OUTPUTS_MAX_POINTS, shared_outputs

    kwargs = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[3, 17], think_time_s=1.5,
                  context_tokens=[4096, 8192], hit_rate=0.5, isl_cv=0.5, osl_cv=0.5)
    every = jp.sweep(**kwargs)
    for variables in (["ttft_ms"], ["tpot_ms", "batch_eff"], ["p99_ttft_ms"], ["p90_tpot_ms", "turns_per_s"]):
        before = evaluate_block._cache_size()
        kept = jp.sweep(**kwargs, variables=variables)
        if variables != ["ttft_ms"]:  # the first of each tier may compile it (the means' tier)
            assert evaluate_block._cache_size() == before, variables
        assert set(variables) <= set(kept.data_vars)
        for name in variables:
            np.testing.assert_array_equal(kept[name].values, every[name].values, err_msg=name)
        assert not {*kept.data_vars} - {*variables, "feasible", "converged", "infeasible_reason"}
    assert "p99_ttft_ms" not in shared_outputs(("ttft_ms", "tpot_ms"))
    assert set(shared_outputs(("p99_ttft_ms",))) > set(shared_outputs(("ttft_ms",)))
    large = dict(kwargs, concurrency=np.arange(1, SHARED_OUTPUTS_MAX_POINTS // 2 + 1))  # 2 x 4,096 x 2 points
    for chunk_points in (1 << 20, 1024):  # one block; blocks of a sub-batch each
        jp.sweep(**large, variables=["ttft_ms"], chunk_points=chunk_points)
        before = evaluate_block._cache_size()
        jp.sweep(**large, variables=["tpot_ms"], chunk_points=chunk_points)
        assert evaluate_block._cache_size() == before + 1, chunk_points


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "jaxpareto.cli.app", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_default_sweep_writes_dataset(tmp_path):
    out = tmp_path / "default.zarr"
    result = _cli("sweep", "--out", str(out), cwd=tmp_path)  # from a directory without sweeps/
    assert result.returncode == 0, result.stderr
    assert "configurations" in result.stdout and "configs/s" in result.stdout
    assert "infeasible" in result.stdout and "unconverged" in result.stdout
    assert "Pareto frontier" in result.stdout
    ds = xr.open_zarr(out)
    assert tuple(ds.ttft_ms.dims) == AXES and set(OUTPUTS) - set(PERCENTILE_VARIABLES) <= set(ds.data_vars)
    assert int(np.prod([ds.sizes[a] for a in AXES])) >= 100_000
    # refused without --overwrite
    again = _cli("sweep", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    # pareto from the store, with a CSV of every cell's front
    csv = tmp_path / "front.csv"
    shown = _cli("pareto", str(out), "--csv", str(csv), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "Pareto frontier" in shown.stdout and csv.stat().st_size > 0


def test_cli_catalog_and_bad_spec(tmp_path):
    listed = _cli("catalog", cwd=tmp_path)
    assert listed.returncode == 0 and "h100-sxm" in listed.stdout and "kimi-k2.5" in listed.stdout
    spec = tmp_path / "bad.toml"
    spec.write_text('[grid]\ngpu = ["h100-sxm"]\nmodel = ["llama-3.1-70b"]\ntp = [1]\nconcurrency = [1]\n'
                    'context_tokens = [1024]\nhit_rat = [0.5]\n')
    result = _cli("sweep", str(spec), cwd=tmp_path)
    assert result.returncode == 2
    assert "grid.hit_rat" in result.stderr and "allowed keys" in result.stderr and "hit_rate" in result.stderr


def test_cli_version():
    from jaxpareto.definitions.version import __version__

    result = _cli("--version", cwd=REPO)
    assert result.returncode == 0 and result.stdout == f"jaxpareto {__version__}\n"


def test_presets_listed_shown_verbatim_and_shipped_only_as_package_data(tmp_path, capsys):
    from jaxpareto.cli import main
    from jaxpareto.definitions.spec import load_spec, presets

    assert main(["presets"]) == 0
    listed = capsys.readouterr().out
    names = presets()
    for name, description in names.items():
        assert f"{name:24s} {description}\n" in listed
    last = listed.splitlines()[-1]
    assert "jaxpareto sweep NAME" in last and "jaxpareto presets --show NAME" in last and "sweeps/" not in last
    for name in names:
        assert main(["presets", "--show", name]) == 0
        shown = capsys.readouterr().out
        assert shown == (REPO / "jaxpareto" / "data" / "presets" / f"{name}.toml").read_text()
        copy = tmp_path / f"{name}.toml"  # the printed text is a spec as it is: copy it, sweep the copy
        copy.write_text(shown)
        assert load_spec(copy) == load_spec(name)
    assert not (REPO / "sweeps" / "presets").exists()  # one copy: the package data


def test_default_spec_ships_inside_package_and_sweeps_holds_only_unshipped_examples():
    from jaxpareto.definitions.spec import load_spec

    assert load_spec().description == load_spec(REPO / "jaxpareto" / "data" / "code_agent.toml").description
    shipped = {p.read_text() for p in (REPO / "jaxpareto" / "data").rglob("*.toml")}
    examples = sorted((REPO / "sweeps").rglob("*.toml"))
    assert examples and not [p.name for p in examples if p.read_text() in shipped]
