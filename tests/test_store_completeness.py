"""An interrupted store is never read as a result: readers refuse it (or mark what was not
computed), Ctrl-C ends with one line, and a resumed run says so."""

import json
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.cli import main
from jaxpareto.dataset.store import DONE_GROUP, open_sweep

GRID = dict(gpu="h100-sxm", model=["llama-3.1-8b", "llama-3.1-70b"], tp=[1, 2, 4, 8], concurrency=[1, 8, 64],
            think_time_s=[0.5, 2.0], context_tokens=[4096, 16384], hit_rate=[0.0, 0.9], chunk_points=48)


def _interrupted_store(path):
    """A complete store turned back into one whose last blocks were never written."""
    import zarr

    jp.sweep_to_zarr(path, **GRID, progress=False)
    group = zarr.open_group(path, mode="r+", zarr_format=3)
    done = group[DONE_GROUP]["done"]
    done[done.shape[0] // 2:] = 0
    for name in ("ttft_ms", "feasible"):
        group[name][:, 1] = group[name].fill_value  # the second model's blocks: unwritten
    group.attrs["jaxpareto_complete"] = False
    zarr.consolidate_metadata(path)
    return done.shape[0]


def test_readers_refuse_an_interrupted_store(tmp_path, capsys):
    path = tmp_path / "s.zarr"
    blocks = _interrupted_store(path)
    with pytest.raises(jp.JaxparetoError, match=rf"incomplete: {blocks // 2} of {blocks} blocks.*resume"):
        open_sweep(path)
    for argv in (["pareto", str(path), "--sel", "model=llama-3.1-70b"], ["plot", str(path), "--out", str(tmp_path / "p")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "incomplete" in err and "resume" in err and "no feasible" not in err
    assert not (tmp_path / "p").exists()


def test_an_interrupted_store_opened_to_mark_what_was_computed(tmp_path):
    path = tmp_path / "s.zarr"
    _interrupted_store(path)
    ds = open_sweep(path, incomplete="mark")
    computed = ds.computed.values
    assert ds.computed.sel(model="llama-3.1-8b").values.all()
    assert not ds.computed.sel(model="llama-3.1-70b").values.any()
    full = jp.sweep(**GRID)
    np.testing.assert_array_equal(ds.ttft_ms.where(ds.computed).values[computed], full.ttft_ms.values[computed])
    with pytest.raises(jp.JaxparetoError, match="incomplete: unknown 'ignore'"):
        open_sweep(path, incomplete="ignore")


def test_a_complete_store_opens_as_it_was_written(tmp_path):
    path = tmp_path / "s.zarr"
    written = jp.sweep_to_zarr(path, **GRID, progress=False)
    assert written.attrs["points_resumed"] == 0
    assert "computed" not in open_sweep(path, incomplete="mark")
    np.testing.assert_array_equal(open_sweep(path).tpot_ms.values, written.tpot_ms.values)


def test_a_resumed_run_says_so_and_counts_only_its_own_work(tmp_path, capsys):
    path = tmp_path / "s.zarr"
    _interrupted_store(path)
    spec = tmp_path / "spec.toml"
    spec.write_text('[grid]\ngpu = "h100-sxm"\nmodel = ["llama-3.1-8b", "llama-3.1-70b"]\ntp = [1, 2, 4, 8]\n'
                    'concurrency = [1, 8, 64]\nthink_time_s = [0.5, 2.0]\ncontext_tokens = [4096, 16384]\n'
                    'hit_rate = [0.0, 0.9]\n[output]\nchunk_points = 48\n')
    # a spec run writes its spec into the attributes: make the store one of that spec first
    assert main(["sweep", str(spec), "--out", str(path), "--overwrite", "--no-progress"]) == 0
    import zarr

    group = zarr.open_group(path, mode="r+", zarr_format=3)
    done = group[DONE_GROUP]["done"]
    done[: done.shape[0] // 2] = 0
    group.attrs["jaxpareto_complete"] = False
    zarr.consolidate_metadata(path)
    capsys.readouterr()
    # a description edited between the runs describes the sweep, it does not change it: resumed,
    # and the store then holds the spec as it reads now
    spec.write_text('description = "edited between the runs"\n' + spec.read_text())
    with warnings.catch_warnings(record=True) as caught:  # reading the store's names back warned
        warnings.simplefilter("always")
        assert main(["sweep", str(spec), "--out", str(path), "--no-progress"]) == 0
    assert not [w for w in caught if "Zarr V3" in str(w.message)]
    out = capsys.readouterr().out
    total = 2 * 4 * 3 * 2 * 2 * 2
    assert f"resumed {path}: {total // 2:,} configurations were computed by an earlier run, {total // 2:,} by this one" \
        in out
    assert open_sweep(path).attrs["jaxpareto_complete"]
    assert json.loads(open_sweep(path).attrs["spec"])["description"] == "edited between the runs"


def test_ctrl_c_ends_with_one_line_saying_how_to_resume(tmp_path):
    # a terminal's foreground process has Python's SIGINT handler; a child of a shell's background job
    # inherits SIGINT ignored, so the handler is set as a terminal would have it
    script = ("import signal, sys, jaxpareto.cli.app as m; signal.signal(signal.SIGINT, signal.default_int_handler); "
              "sys.exit(m.main(['sweep', '--out', sys.argv[1], '--no-progress', '--chunk-points', '2048']))")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "s.zarr")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / "s.zarr" / "zarr.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # the template appears before the first of ~100 blocks is computed: the interrupt lands mid-sweep
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("jaxpareto: interrupted; run the same command again to resume"), err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("overwrite", [False, True])
def test_the_resume_advice_after_ctrl_c_drops_overwrite(tmp_path, monkeypatch, capsys, overwrite):
    # run again as it was, a sweep with --overwrite would start over, not resume
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("jaxpareto.cli.sweep.sweep_to_zarr", interrupted)
    argv = ["sweep", "--out", str(tmp_path / "s.zarr"), "--no-progress"] + (["--overwrite"] if overwrite else [])
    assert main(argv) == 130
    err = capsys.readouterr().err.strip()
    assert ("without --overwrite to resume" in err) == overwrite, err
    assert "run the same command again" in err


def test_ctrl_c_inside_a_garbage_collector_callback_is_marked_not_printed(capsys):
    # the race CI met: SIGINT lands while JAX's gc callback runs; Python drops that KeyboardInterrupt
    import gc

    from jaxpareto.dataset.store import _ctrl_c_never_lost

    def callback(phase, info):
        if phase == "start":
            signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with _ctrl_c_never_lost() as interrupted:
            gc.callbacks.append(callback)
            try:
                gc.collect()
            finally:
                gc.callbacks.remove(callback)
            assert interrupted  # the loop stops after this block
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "Traceback" not in capsys.readouterr().err


def test_a_whole_store_interrupted_while_written_leaves_nothing(tmp_path, monkeypatch):
    """A session or reduced sweep's store is written whole at the end (`to_zarr`): into a hidden
    folder renamed once complete, so that a write cut short leaves no store (it had left a
    half-written one that `pareto` read, printing NaN where the complete store holds numbers),
    nor the hidden folder, and a store it was to replace stays as it was."""
    import xarray as xr

    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=[1, 8])
    path = jp.to_zarr(ds, tmp_path / "s.zarr")
    written = xr.Dataset.to_zarr

    def cut_short(self, store, *args, **kwargs):  # the metadata and some arrays, then Ctrl-C
        written(self[["ttft_ms"]], store, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(xr.Dataset, "to_zarr", cut_short)
    with pytest.raises(KeyboardInterrupt):
        jp.to_zarr(ds, tmp_path / "new.zarr")
    with pytest.raises(KeyboardInterrupt):
        jp.to_zarr(ds.assign(ttft_ms=ds.ttft_ms * 2), path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]
    assert open_sweep(path).ttft_ms.equals(ds.ttft_ms)


def test_a_store_with_unreadable_metadata_is_refused_by_name(tmp_path, capsys):
    path = jp.to_zarr(jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1), tmp_path / "s.zarr")
    (path / "zarr.json").write_text("{garbage")
    with pytest.raises(jp.JaxparetoError, match="not a readable zarr store"):
        open_sweep(path)
    assert main(["pareto", str(path)]) == 2
    assert "not a readable zarr store" in capsys.readouterr().err
