"""Streaming to zarr: identical to the in-memory sweep, resumable after SIGKILL, refuses a
different spec, and identical on 4 CPU devices and on a dask LocalCluster."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import xarray as xr
import zarr

import jaxpareto as jp
from jaxpareto.dataset.store import DONE_GROUP

from devices import run_on_cpu_devices

GRID = dict(gpu=["h100-sxm", "b200"], model=["llama-3.1-70b", "deepseek-v3"], tp=[1, 2, 4, 8],
            concurrency=list(range(1, 200, 7)), think_time_s=[0.0, 1.0, 5.0], context_tokens=[4096, 32768, 131072],
            hit_rate=[0.0, 0.5, 0.9], chunk_points=2000)


def same_sweep(a: xr.Dataset, b: xr.Dataset) -> None:
    """Identical data, coordinates and attributes, apart from bookkeeping of the store."""
    b = b.load().copy()
    b.attrs = {k: v for k, v in b.attrs.items() if k in a.attrs}
    b.attrs["created"] = a.attrs["created"]
    a = a.copy()
    a.attrs = {k: v for k, v in a.attrs.items() if k in b.attrs}
    xr.testing.assert_identical(a, b)


@pytest.fixture(scope="module")
def in_memory():
    return jp.sweep(**GRID)


def test_streamed_equals_in_memory(in_memory, tmp_path):
    ds = jp.sweep_to_zarr(tmp_path / "s.zarr", **GRID)
    same_sweep(in_memory, ds)
    group = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert group.attrs["jaxpareto_complete"] is True
    assert group["ttft_ms"].chunks == tuple(group.attrs["jaxpareto_block"])  # zarr chunks = compute blocks
    assert group.attrs["infeasible_points"] == int((~in_memory.feasible).sum())
    assert np.asarray(group[DONE_GROUP]["done"][:]).all()


def test_refuses_existing_and_different_spec(tmp_path):
    path = tmp_path / "s.zarr"
    jp.sweep_to_zarr(path, **GRID)
    with pytest.raises(jp.JaxparetoError, match="complete"):
        jp.sweep_to_zarr(path, **GRID)
    # the refusal names what differs
    with pytest.raises(jp.JaxparetoError, match=r"different inputs \(changed: osl\)"):
        jp.sweep_to_zarr(path, **{**GRID, "osl": 256})
    with pytest.raises(jp.JaxparetoError, match=r"different inputs \(changed: hit_rate values, chunking\)"):
        jp.sweep_to_zarr(path, **{**GRID, "hit_rate": [0.0, 0.5]})
    with pytest.raises(jp.JaxparetoError, match=r"different inputs \(changed: variables\)"):
        jp.sweep_to_zarr(path, **GRID, variables=["ttft_ms"])
    whole = tmp_path / "whole.zarr"  # a sweep written whole is a sweep, but not one a stream resumes
    jp.to_zarr(jp.sweep(**GRID), whole)
    with pytest.raises(jp.JaxparetoError, match=r"a sweep written whole \(`to_zarr`\), which a streamed sweep"):
        jp.sweep_to_zarr(whole, **GRID)
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("user data")
    for overwrite in (False, True):  # never deletes what is not a zarr store
        with pytest.raises(jp.JaxparetoError, match="not a zarr store"):
            jp.sweep_to_zarr(other, overwrite=overwrite, **GRID)
    assert (other / "keep.txt").read_text() == "user data"
    with pytest.raises(jp.JaxparetoError, match="does not exist"):
        jp.sweep_to_zarr(tmp_path / "missing" / "s.zarr", **GRID)
    jp.sweep_to_zarr(path, **{**GRID, "osl": 256}, overwrite=True)


def test_variable_selection(tmp_path):
    ds = jp.sweep_to_zarr(tmp_path / "s.zarr", **GRID, variables=["ttft_ms", "output_tokens_per_s_per_gpu"])
    assert set(ds.data_vars) == {"ttft_ms", "output_tokens_per_s_per_gpu", "feasible", "infeasible_reason", "converged"}


SCRIPT = textwrap.dedent("""
    import sys, jaxpareto as jp
    grid = {grid!r}
    jp.sweep_to_zarr(sys.argv[1], progress=False, **grid)
""")


@pytest.mark.slow
def test_sigkill_then_resume_is_identical(in_memory, tmp_path):
    path = tmp_path / "killed.zarr"
    grid = {**GRID, "chunk_points": 200}  # many small blocks, so the kill lands mid-run
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(grid=grid))
    proc = subprocess.Popen([sys.executable, str(script), str(path)], env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                done = np.asarray(zarr.open_group(path, mode="r")[DONE_GROUP]["done"][:])
            except Exception:
                done = np.zeros(1)
            if 3 <= done.sum() < done.size:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    done = np.asarray(zarr.open_group(path, mode="r")[DONE_GROUP]["done"][:])
    assert 0 < done.sum() < done.size, "the kill did not land mid-run"
    partial = xr.open_zarr(path)  # a killed store opens
    assert partial.attrs["jaxpareto_complete"] is False
    resumed = jp.sweep_to_zarr(path, **grid)
    expected = jp.sweep(**grid)
    same_sweep(expected, resumed)


DEVICES_SCRIPT = textwrap.dedent("""
    import math, sys, jax, jaxpareto as jp
    from jaxpareto.dataset.plan import plan_sweep
    assert len(jax.devices()) == 4, jax.devices()
    grid = {grid!r}
    problem = plan_sweep(**grid).problem()
    assert math.prod(problem.block) % 4  # padding to the device count is exercised
    out = problem.launch(problem.origins()[0])  # flat: whole sub-batches
    assert len(out["ttft_ms"].sharding.device_set) == 4, out["ttft_ms"].sharding
    jp.sweep_to_zarr(sys.argv[1], progress=False, **grid)
""")


@pytest.mark.slow
def test_four_cpu_devices_identical(in_memory, tmp_path):
    run_on_cpu_devices(DEVICES_SCRIPT.format(grid=GRID), tmp_path, str(tmp_path / "d.zarr"))
    same_sweep(in_memory, xr.open_zarr(tmp_path / "d.zarr"))


def test_dask_local_cluster_identical(in_memory, tmp_path):
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        ds = jp.sweep_to_zarr(tmp_path / "dask.zarr", client=client, **GRID)
    same_sweep(in_memory, ds)


def test_template_is_created_atomically(tmp_path, monkeypatch):
    """A kill while the template is laid out leaves no store at the path: the rerun starts clean."""
    import jaxpareto.dataset.store as store

    path = tmp_path / "s.zarr"

    def killed(scratch, *args):
        scratch.mkdir()
        (scratch / "zarr.json").write_text("{}")  # half a template
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "_write_template", killed)
    with pytest.raises(KeyboardInterrupt):
        jp.sweep_to_zarr(path, **GRID)
    assert not path.exists()
    monkeypatch.undo()
    ds = jp.sweep_to_zarr(path, **GRID)  # the stale scratch folder is cleared, the sweep runs
    assert ds.attrs["jaxpareto_complete"] and not list(tmp_path.glob(".s.zarr.tmp-*"))
