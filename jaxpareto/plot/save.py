"""Every plot a dataset supports, written into a folder as PNG files (``jaxpareto plot``)."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.schema import INFEASIBLE_REASON_LABELS
from jaxpareto.plot._figure import DEFAULT_DPI, DEFAULT_SIZE, check_figure
from jaxpareto.plot._select import grid_values, selection_value
from jaxpareto.plot.cache import plot_cache_comparison
from jaxpareto.plot.frontier import plot_frontier
from jaxpareto.plot.memory import plot_memory_wall
from jaxpareto.plot.support import PLOTS, unsupported, xvar


def _safe(name) -> str:
    """``name`` usable in a file name: runs of other characters become one underscore."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("_") or "x"


def _file_tags(names) -> dict[str, str]:
    """Each name's part of a file name (`_safe`), where names that `_safe` makes alike (``a/b``
    and ``a_b``; any two of other scripts) take a short hash of their own, so no file is written
    twice."""
    safe = {name: _safe(name) for name in names}
    counts = Counter(safe.values())
    return {name: tag if counts[tag] == 1 else f"{tag}_{hashlib.sha1(str(name).encode()).hexdigest()[:8]}"
            for name, tag in safe.items()}


def _out_folder(out: str | Path) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise JaxparetoError("--out", f"{out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _no_feasible_point(ds: xr.Dataset, gpu, model) -> str:
    """Why a GPU x model pair has nothing to draw ("" when it has a feasible point): the
    infeasibility reasons of its points, most frequent first."""
    if "feasible" not in ds.data_vars or bool(ds.feasible.sel(gpu=gpu, model=model).any()):
        return ""
    if "infeasible_reason" not in ds.data_vars:
        return "no feasible point"
    codes, counts = np.unique(np.asarray(ds.infeasible_reason.sel(gpu=gpu, model=model).values), return_counts=True)
    labels = INFEASIBLE_REASON_LABELS
    order = [labels.get(int(c), str(c)).replace("_", " ") for _, c in sorted(zip(-counts, codes)) if c > 0]
    return "no feasible point (" + ", ".join(order) + ")"


def save_plots(
    ds: xr.Dataset,
    out: str | Path,
    *,
    size: tuple[float, float] = DEFAULT_SIZE,
    dpi: float = DEFAULT_DPI,
    sel: Mapping | None = None,
    echo: Callable[[str], object] | None = None,
    overwrite: bool = True,
) -> tuple[list[Path], list[str]]:
    """Write every plot ``ds`` supports into the folder ``out`` as PNG files.

    Per GPU x model: ``frontier_<gpu>_<model>.png`` (`plot_frontier`; names as file names allow,
    with a short hash where two would be alike),
    ``cache_<gpu>_<model>.png`` (`plot_cache_comparison`, from the dataset's own cells) and
    ``memory_wall_<gpu>_<model>.png`` (`plot_memory_wall`, one line per TP); with several GPUs also
    ``memory_wall_<model>_by_gpu.png`` (one line per GPU at the largest TP). Only draws: no sweep
    is computed.

    Args:
        ds: a sweep or session sweep, or a reduced sweep (``jaxpareto sweep --reduce``: the
            frontier and cache plots from its stored fronts; the memory wall is skipped).
        out: the folder, created if missing; existing PNGs of the same name are replaced.
        size: figure (width, height) [inches]; each side of a PNG is size x dpi rounded to the
            nearest whole pixel.
        dpi: figure resolution [pixels per inch].
        sel: axis values. ``gpu`` and ``model`` restrict the figures to that one; the others fix
            the cell (the frontier highlights the selected think time; the cache comparison takes
            a selected ``think_time_s`` [s] / ``hit_rate`` > 0 as the agent's Z / h; the memory
            wall marks a selected context [tokens] or turn). ``tp`` and ``concurrency`` cannot be
            selected: the frontiers span them. Everything is checked before anything is drawn.
        echo: called with each written path and each skip reason as they happen (e.g. ``print``).
        overwrite: replace PNGs of the same names already in ``out`` (False: refuse, before
            drawing anything; the CLI's default).

    Returns:
        (paths written, reasons for the plots skipped, each "<plot>: <reason>", or
        "<gpu>_<model>: <reason>" for a pair with no feasible point, whose plots would be empty).

    Raises:
        JaxparetoError: ``ds`` has no ``gpu`` and ``model`` dimensions; a selection off the grid,
            naming an unknown axis, tp or concurrency; a bad size or dpi; ``out`` exists and is
            not a folder; ``out`` already holds plots of these names and ``overwrite`` is False.
        OSError: a folder or file that cannot be written.
    """
    sel = dict(sel or {})
    check_figure(size, dpi)
    if "gpu" not in ds.dims or "model" not in ds.dims:
        raise JaxparetoError("store", "not a jaxpareto sweep: no 'gpu' and 'model' dimensions")
    for key in list(sel):
        sel[key] = selection_value(ds, key, sel[key], f"sel {key}")
    out = _out_folder(out)
    gpus = [sel["gpu"]] if "gpu" in sel else grid_values(ds, "gpu")
    models = [sel["model"]] if "model" in sel else grid_values(ds, "model")
    gpu_tag, model_tag = _file_tags(grid_values(ds, "gpu")), _file_tags(grid_values(ds, "model"))
    cell = {k: v for k, v in sel.items() if k not in ("gpu", "model")}
    if not overwrite:
        names = {f"{kind}_{gpu_tag[g]}_{model_tag[m]}.png" for kind in ("frontier", "cache", "memory_wall")
                 for g in gpus for m in models} | {f"memory_wall_{model_tag[m]}_by_gpu.png" for m in models}
        present = sorted(name for name in names if (out / name).exists())
        if present:
            raise JaxparetoError("out", f"{out} already holds {len(present)} of these plots ({', '.join(present[:3])}"
                                        f"{', ...' if len(present) > 3 else ''}); pass overwrite=True (CLI: --overwrite) "
                                        "to replace them")
    echo = echo or (lambda message: None)
    written, skipped = [], []

    def save(fig, name):
        path = out / f"{name}.png"
        fig.savefig(path, dpi=fig.dpi, format="png")
        written.append(path)
        echo(str(path))

    reasons = {plot: unsupported(ds, plot) for plot in PLOTS}
    for plot, reason in reasons.items():
        if reason:
            skipped.append(f"{plot}: {reason}")
            echo(f"skipped {plot}: {reason}")
    # each plot's share of the selection: the axes its variables have
    front_dims = () if reasons["frontier"] and reasons["cache"] else ds[xvar(ds)].dims
    frontier_cell = {k: v for k, v in cell.items() if k != "think_time_s" and k in front_dims}
    agent = {k: cell[k] for k in ("think_time_s", "hit_rate") if cell.get(k, 0) > 0}
    cache_cell = {k: v for k, v in cell.items() if k not in ("think_time_s", "hit_rate") and k in front_dims}
    wall_dims = ()
    if not reasons["memory_wall"]:  # its variable's axes, and the context or turn it marks
        wall_dims = (*ds.concurrency_max.dims, "turn" if "turn" in ds.dims else "context_tokens")
    wall_cell = {k: v for k, v in cell.items() if k in wall_dims}
    for g in gpus:
        for m in models:
            tag = f"{gpu_tag[g]}_{model_tag[m]}"
            empty = _no_feasible_point(ds, g, m)
            if empty:  # an empty figure says nothing: skip the pair, saying why
                skipped.append(f"{tag}: {empty}")
                echo(f"skipped gpu {g} x model {m}: {empty}")
                continue
            if not reasons["frontier"]:
                save(plot_frontier(ds, g, m, think_time_s=cell.get("think_time_s"), size=size, dpi=dpi,
                                   **frontier_cell), f"frontier_{tag}")
            if not reasons["cache"]:
                save(plot_cache_comparison(ds, g, m, size=size, dpi=dpi, **agent, **cache_cell), f"cache_{tag}")
            if not reasons["memory_wall"]:
                save(plot_memory_wall(ds, g, m, size=size, dpi=dpi, **wall_cell), f"memory_wall_{tag}")
    if not reasons["memory_wall"] and len(gpus) > 1:
        for m in models:
            save(plot_memory_wall(ds, None, m, by="gpu", size=size, dpi=dpi, **wall_cell),
                 f"memory_wall_{model_tag[m]}_by_gpu")
    return written, skipped
