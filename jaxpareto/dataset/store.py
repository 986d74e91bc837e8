"""Streaming sweeps into a zarr store: bounded memory, resumable, optionally on dask.

The store is laid out before any computation as a template: coordinates, attributes and one
chunked, compressed array per output, with zarr chunks equal to the compute blocks, and
consolidated metadata, so it opens at any moment. Each block is then evaluated and written as
a region, and only after its data is written is the block marked done in the store's
``_jaxpareto/done`` array (one zarr chunk per block, so concurrent writers never share a file).
A killed sweep leaves a store that opens; running the same sweep again skips the blocks marked
done and fills in the rest, giving the same data as an uninterrupted run. A store written for
different inputs is refused: its ``jaxpareto_fingerprint`` attribute must match.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import xarray as xr
import zarr
from tqdm.auto import tqdm
from zarr.codecs import BloscCodec

from jaxpareto.definitions.checks import check_output_folder
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.mapper import GridProblem, block_origins, block_region
from jaxpareto.definitions.axes import AXIS_BY_NAME, coordinate_attrs, dataset_table
from jaxpareto.definitions.schema import FLAG_VARIABLES, OUTPUTS
from jaxpareto.dataset.plan import SweepPlan, as_plan
from jaxpareto.dataset.sweep import with_ridge_points

DONE_GROUP = "_jaxpareto"
COMPRESSOR = BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")  # fast enough not to bound a sweep
_QUIET_ZARR = (
    # gpu/model names are fixed-width strings and v3 consolidated metadata is not yet in the
    # zarr v3 spec; both round-trip exactly with zarr-python and xarray.
    ".*does not have a Zarr V3 specification.*",
    "Consolidated metadata is currently not part.*",
)


@contextlib.contextmanager
def _quiet():
    """Silence zarr's two known, harmless warnings (names above)."""
    with warnings.catch_warnings():
        for message in _QUIET_ZARR:
            warnings.filterwarnings("ignore", message=message)
        yield


#: Attributes that describe a sweep without determining its values: a CLI spec's own text (its
#: description among it) and its report. Out of the fingerprint, and refreshed when a store resumes.
DESCRIPTIVE_ATTRS = ("spec", "report")


def fingerprint(plan: SweepPlan, block: Sequence[int]) -> str:
    """Hash of everything that determines the store's contents (not the creation time, nor
    `DESCRIPTIVE_ATTRS`)."""
    attrs = plan.attrs()
    for name in ("created", *DESCRIPTIVE_ATTRS):
        attrs.pop(name, None)
    content = {
        "attrs": attrs,
        "coords": {k: np.asarray(v).tolist() for k, v in plan.coords.items()},
        "variables": list(plan.variables),
        "block": list(block),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _output_dtypes(plan: SweepPlan) -> dict[str, np.dtype]:
    floating = np.dtype(plan.dtype)
    ints = {"concurrency_max": np.int32, "concurrency_eff": np.int32, "iterations": np.int32,
            "decode_bound": np.int8, "infeasible_reason": np.int8, "feasible": np.bool_, "converged": np.bool_}
    return {name: np.dtype(ints.get(name, floating)) for name in plan.variables}


def _create_template(path: Path, plan: SweepPlan, problem: GridProblem, key: str) -> None:
    """Lay the store out in a scratch folder beside ``path`` and rename it into place, so a
    kill at any moment leaves either no store or a complete template (never a half one)."""
    for stale in path.parent.glob(f".{path.name}.tmp-*"):  # left by a killed run
        shutil.rmtree(stale, ignore_errors=True)
    scratch = path.parent / f".{path.name}.tmp-{os.getpid()}"
    _write_template(scratch, plan, problem, key)
    os.rename(scratch, path)  # atomic: path does not exist here


def _write_template(path: Path, plan: SweepPlan, problem: GridProblem, key: str) -> None:
    coords = xr.Dataset(coords={
        name: xr.Variable(name, np.asarray(values, dtype=str) if AXIS_BY_NAME[name].categorical else np.asarray(values),
                          coordinate_attrs(name))
        for name, values in plan.coords.items()
    })
    coords = with_ridge_points(coords, plan)
    coords.attrs = {**plan.attrs(), "jaxpareto_fingerprint": key, "jaxpareto_block": list(problem.block),
                    "jaxpareto_complete": False}
    with _quiet():
        coords.to_zarr(path, mode="w", zarr_format=3, consolidated=False)
        group = zarr.open_group(path, mode="a", zarr_format=3)
        for name, dtype in _output_dtypes(plan).items():
            attrs = {"units": OUTPUTS[name].units, "long_name": OUTPUTS[name].long_name}
            flags = FLAG_VARIABLES.get(name)
            if flags:
                attrs.update(flags[0])
            fill = np.nan if dtype.kind == "f" else (False if dtype.kind == "b" else (flags[2] if flags else 0))
            group.create_array(name, shape=problem.shape, chunks=problem.block, dtype=dtype, fill_value=fill,
                               compressors=COMPRESSOR, dimension_names=plan.dims, attributes=attrs)
        n_blocks = len(problem.origins())
        book = group.create_group(DONE_GROUP)
        book.create_array("done", shape=(n_blocks,), chunks=(1,), dtype=np.uint8, fill_value=0, compressors=None)
        book.create_array("counts", shape=(n_blocks, 2), chunks=(1, 2), dtype=np.int64, fill_value=0,
                          compressors=None)
        zarr.consolidate_metadata(path)


def check_output_path(path: Path, overwrite: bool) -> None:
    """Refuse, before anything is computed, an output path that cannot or must not be written.

    Only a zarr store (a directory with ``zarr.json``) is ever replaced, and only with
    ``overwrite``: any other existing file or directory is refused, so a typo cannot delete
    user data.
    """
    parent = check_output_folder(path, "out")
    if not os.access(parent, os.W_OK):
        raise JaxparetoError("out", f"the folder {parent} is not writable")
    if path.exists() and not (path / "zarr.json").is_file():
        raise JaxparetoError("out", f"{path} exists and is not a zarr store; refusing to replace it")


def check_new_output(path: Path, overwrite: bool) -> None:
    """`check_output_path`, and an existing store is refused unless ``overwrite``."""
    check_output_path(path, overwrite)
    if path.exists() and not overwrite:
        raise JaxparetoError("out", f"{path} already exists; pass overwrite=True (CLI: --overwrite)")


def _differences(group: zarr.Group, plan: SweepPlan, block: Sequence[int]) -> list[str]:
    """What differs between a stored sweep and ``plan``: its attributes (scalars, definitions,
    options), axes' values, variables and chunking, by name."""
    names = []
    for name, value in plan.attrs().items():
        # as JSON text: NaN equals NaN, as the fingerprint sees them
        stored = json.dumps(group.attrs.get(name), sort_keys=True)
        if name not in ("created", *DESCRIPTIVE_ATTRS) and stored != json.dumps(value, sort_keys=True):
            names.append(name)
    for name, values in plan.coords.items():
        stored = np.asarray(group[name][:]) if name in group else None
        wanted = np.asarray(values, dtype=str) if AXIS_BY_NAME[name].categorical else np.asarray(values)
        if stored is None or stored.shape != wanted.shape or not np.array_equal(stored.astype(wanted.dtype), wanted):
            names.append(f"{name} values")
    if set(plan.variables) != {name for name in group.array_keys() if name in OUTPUTS}:
        names.append("variables")
    if group.attrs.get("jaxpareto_block") != list(block):
        names.append("chunking")
    return names


def _open_existing(path: Path, key: str, overwrite: bool, plan: SweepPlan,
                   block: Sequence[int]) -> zarr.Group | None:
    """The existing store to resume, or None to create one. Refuses what must not be touched."""
    check_output_path(path, overwrite)
    if not path.exists():
        return None
    if overwrite:
        shutil.rmtree(path)
        return None
    try:
        group = zarr.open_group(path, mode="r+", zarr_format=3)
        found, title = group.attrs.get("jaxpareto_fingerprint"), group.attrs.get("title")
    except Exception:  # not a zarr v3 store at all
        found = title = None
    if found is None:
        what = ("a sweep written whole (`to_zarr`), which a streamed sweep does not resume" if title else
                "a zarr store but not a jaxpareto sweep")
        raise JaxparetoError("out", f"{path} is {what}; choose another path or pass overwrite=True (CLI: "
                                    "--overwrite)")
    if found != key:
        differ = _differences(group, plan, block)
        what = (f"changed: {', '.join(differ)}" if differ else
                "no input differs by name: a store of another jaxpareto version, whose fingerprint was taken "
                "otherwise")
        raise JaxparetoError("out", f"{path} holds a sweep of different inputs ({what}); resuming it would mix two "
                                    "sweeps. Choose another path or pass overwrite=True (CLI: --overwrite)")
    if group.attrs.get("jaxpareto_complete"):
        raise JaxparetoError("out", f"{path} already exists and is complete; pass overwrite=True "
                                    "(CLI: --overwrite) to compute it again")
    # the spec as it reads now (a description edited between the runs): it describes, not determines
    group.attrs.update({name: value for name, value in plan.attrs().items() if name in DESCRIPTIVE_ATTRS})
    return group


def _block_counts(block: dict[str, np.ndarray]) -> np.ndarray:
    """[infeasible, unconverged] points of one block."""
    feasible, converged = block["feasible"], block["converged"]
    return np.asarray([(~feasible).sum(), (feasible & ~converged).sum()], dtype=np.int64)


def _mark_done(group: zarr.Group, index: int, block: dict[str, np.ndarray]) -> None:
    """Record a block as written (its flag counts first, then the done marker)."""
    group[DONE_GROUP]["counts"][index] = _block_counts(block)
    group[DONE_GROUP]["done"][index] = 1


def _run_local(path: Path, problem: GridProblem, todo: list[int], origins, bar, interrupted: list,
               writers: int = 4) -> None:
    """Evaluate and write the blocks in ``todo``: the device computes block k + 1 while a
    thread pool compresses and writes block k's variables in parallel; a block is marked
    done only once all its variables are written. ``interrupted`` (`_ctrl_c_never_lost`'s mark)
    is checked after every block."""
    group = zarr.open_group(path, mode="r+", zarr_format=3)
    arrays = {name: group[name] for name in problem.outputs}
    pending: list[tuple[int, dict, list]] = []

    def settle(entry):
        index, block, futures = entry
        for future in futures:
            future.result()  # re-raises a failed write
        _mark_done(group, index, block)
        bar.update(int(block["feasible"].size))

    with ThreadPoolExecutor(max_workers=writers) as pool:
        for index, (region, block) in zip(todo, problem.iter_blocks([origins[i] for i in todo])):
            futures = [pool.submit(arrays[name].__setitem__, region, values) for name, values in block.items()]
            pending.append((index, block, futures))
            if len(pending) > 1:  # at most two blocks in flight: memory stays bounded
                settle(pending.pop(0))
            if interrupted:  # the blocks computed so far are kept
                for entry in pending:
                    settle(entry)
                raise KeyboardInterrupt
        for entry in pending:
            settle(entry)


@contextlib.contextmanager
def _ctrl_c_never_lost():
    """Ctrl-C during a stored sweep stops it cleanly. From the store's creation to the last
    block, the first Ctrl-C leaves a mark (and says so on stderr) that the block loop checks
    after every block and the sweep once more at its end, so the sweep stops between blocks with
    every write finished; a second Ctrl-C raises KeyboardInterrupt at once. Raising on the first
    would land wherever the main thread is: inside a garbage-collector callback (JAX registers
    one) Python prints and drops it, and inside a zarr call it abandons writes that the
    interpreter's exit then reports. A KeyboardInterrupt dropped that way is not printed
    (``sys.unraisablehook``: the mark stands for it). A handler the program set itself, or an
    ignored SIGINT, is left alone."""
    seen: list[bool] = []

    def handler(signum, frame):
        if seen:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        seen.append(True)
        print("jaxpareto: stopping after the block in progress (Ctrl-C again to stop at once)", file=sys.stderr,
              flush=True)

    previous = sys.unraisablehook

    def unraisable(info):
        if not (seen and isinstance(info.exc_value, KeyboardInterrupt)):
            previous(info)

    own = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if own:
        signal.signal(signal.SIGINT, handler)
        sys.unraisablehook = unraisable
    try:
        yield seen
    finally:
        if own:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.unraisablehook = previous


def _dask_task(path: str, problem: GridProblem, index: int, origin: tuple[int, ...]) -> int:
    """One block on a dask worker: evaluate with JAX, write its region, mark it done."""
    region, block = next(problem.iter_blocks([origin]))
    group = zarr.open_group(path, mode="r+", zarr_format=3)
    for name, values in block.items():
        group[name][region] = values
    _mark_done(group, index, block)
    return int(block["feasible"].size)


def _run_dask(path: Path, problem: GridProblem, todo: list[int], origins, bar, client, interrupted: list) -> None:
    """The blocks in ``todo`` as dask tasks; after ``interrupted`` (`_ctrl_c_never_lost`'s mark)
    the tasks left are cancelled (one already running on a worker finishes there and marks its
    block done, as every task writes its block before its mark)."""
    from distributed import as_completed

    shared = client.scatter(problem, broadcast=True)
    futures = [client.submit(_dask_task, str(path), shared, i, origins[i], key=f"jaxpareto-block-{i}-{path.name}",
                             pure=False) for i in todo]
    for future in as_completed(futures):
        bar.update(future.result())
        if interrupted:
            client.cancel(futures)
            raise KeyboardInterrupt


def _progress(total: int, initial: int, enabled: bool | None):
    disable = not (sys.stderr.isatty() if enabled is None else enabled)
    return tqdm(total=total, initial=initial, unit="configs", unit_scale=True, file=sys.stderr,
                disable=disable, desc="sweep", smoothing=0.1)


def sweep_to_zarr(
    path: str | Path,
    *args,
    overwrite: bool = False,
    progress: bool | None = None,
    client=None,
    **kwargs,
) -> xr.Dataset:
    """Run a sweep straight into a zarr store, block by block, and return it opened lazily.

    Takes every argument of `jaxpareto.sweep`, or a `SweepPlan`. Peak memory is set by
    ``chunk_points`` (and the number of ``variables`` kept), not by the grid; zarr chunks equal
    the compute blocks.

    Args:
        path: the store (a directory). If it exists: a partial store of the same sweep is
            resumed; a complete one, or one of other inputs, is refused unless ``overwrite``.
        overwrite: delete whatever is at ``path`` first.
        progress: a tqdm bar on stderr with configs/s and ETA; None: only when stderr is a
            terminal.
        client: a ``distributed.Client``: each block becomes a task that evaluates on a
            worker and writes its own region (workers must see ``path``).

    Returns:
        ``xarray.open_zarr(path)``, with the attribute ``points_resumed`` (not stored): the
        points an earlier, interrupted run had already computed (0 for a new store).

    Raises:
        JaxparetoError: invalid inputs (before anything is written), or a refused ``path``.
    """
    plan = as_plan(*args, **kwargs)
    path = Path(path)
    problem = plan.problem()
    key = fingerprint(plan, problem.block)
    with _ctrl_c_never_lost() as interrupted:
        with _quiet():  # reading an existing store's string coordinates warns as writing them does
            group = _open_existing(path, key, overwrite, plan, problem.block)
        if group is None:
            _create_template(path, plan, problem, key)
            group = zarr.open_group(path, mode="r+", zarr_format=3)
        origins = problem.origins()
        done = np.asarray(group[DONE_GROUP]["done"][:], dtype=bool)
        todo = [i for i in range(len(origins)) if not done[i]]
        finished = sum(int(np.prod([s.stop - s.start for s in problem.region(origins[i])]))
                       for i in range(len(origins)) if done[i])
        with _progress(problem.size, finished, progress) as bar:
            if client is None:
                _run_local(path, problem, todo, origins, bar, interrupted)
            else:
                _run_dask(path, problem, todo, origins, bar, client, interrupted)
        if interrupted:  # a Ctrl-C that was dropped where nothing checked for it
            raise KeyboardInterrupt
    if not np.asarray(group[DONE_GROUP]["done"][:], dtype=bool).all():
        raise RuntimeError(f"{path}: some blocks were not written")  # a worker failed silently
    infeasible, unconverged = (int(n) for n in np.asarray(group[DONE_GROUP]["counts"][:]).sum(axis=0))
    with _quiet():
        group.attrs.update({"jaxpareto_complete": True, "infeasible_points": infeasible,
                            "unconverged_points": unconverged})
        zarr.consolidate_metadata(path)
        ds = xr.open_zarr(path)
    ds.attrs["points_resumed"] = finished  # this object only: what an earlier run had computed
    return ds


def open_sweep(path: str | Path, *, incomplete: str = "refuse") -> xr.Dataset:
    """A stored sweep (`sweep_to_zarr`, `to_zarr` or ``jaxpareto sweep --out``), opened lazily.

    A store whose sweep was interrupted holds only some blocks; its other points are fill
    values, which read as infeasible. It is refused by default, so that it is never taken for a
    result.

    Args:
        path: the store.
        incomplete: "refuse" (default) or "mark": open an interrupted store with a boolean
            ``computed`` variable, False at every point no finished block covers (there, every
            other variable is a fill value, not a result).

    Returns:
        The dataset (``xarray.open_zarr``).

    Raises:
        JaxparetoError: ``path`` is not a zarr store, ``incomplete`` is not "refuse" or "mark",
            or (with "refuse") the store is incomplete: the message says how much is done and
            how to resume.
    """
    if incomplete not in ("refuse", "mark"):
        raise JaxparetoError("incomplete", f"unknown {incomplete!r}", ("refuse", "mark"))
    path = Path(path)
    if not path.exists():
        raise JaxparetoError("store", f"{path} does not exist")
    if not (path / "zarr.json").is_file():
        raise JaxparetoError("store", f"{path} is not a zarr store (written by `jaxpareto sweep --out`)")
    try:
        with _quiet():
            ds = xr.open_zarr(path)
    except (ValueError, KeyError, TypeError) as error:  # unreadable metadata (JSONDecodeError is a ValueError)
        raise JaxparetoError("store", f"{path} is not a readable zarr store ({type(error).__name__}: {error})") \
            from error
    if ds.attrs.get("jaxpareto_complete", True):
        return ds
    done = np.asarray(zarr.open_group(path, mode="r", zarr_format=3)[DONE_GROUP]["done"][:], dtype=bool)
    if incomplete == "refuse":
        raise JaxparetoError("store", f"{path} is incomplete: {int(done.sum()):,} of {done.size:,} blocks were "
                                      "computed before the sweep stopped. Run the command that wrote it again to "
                                      "resume (finished blocks are kept), or open it with incomplete='mark'")
    dims = tuple(a.name for a in dataset_table(ds.dims))
    shape = tuple(ds.sizes[a] for a in dims)
    block = tuple(ds.attrs["jaxpareto_block"])
    computed = np.zeros(shape, dtype=bool)
    for index, origin in enumerate(block_origins(shape, block)):
        if done[index]:
            computed[block_region(origin, block, shape)] = True
    return ds.assign(computed=(dims, computed, {"units": "1", "long_name": "point computed (False: the sweep "
                                                                         "stopped before its block was written)"}))


def to_zarr(ds: xr.Dataset, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write an in-memory sweep to a zarr v3 store with consolidated metadata.

    The store is written whole into a hidden folder beside ``path`` and renamed to it once
    complete, so that an interrupted write leaves no store that reads as a result (the hidden
    folder is removed; an existing store being replaced is kept until then).

    Raises:
        JaxparetoError: ``path`` exists (an existing zarr store is replaced only with
            ``overwrite``; anything else is never replaced), or its folder is missing.
    """
    path = Path(path)
    check_new_output(path, overwrite)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with _quiet():
            ds.to_zarr(partial, mode="w", zarr_format=3, consolidated=True)
        if path.exists():  # a store `check_new_output` lets ``overwrite`` replace
            shutil.rmtree(path)
        partial.rename(path)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    return path
