"""Plots of a sweep: the seed article's figures as PNG files (seed 000 sections 1.2, 3 and 4).

- `plot_frontier`: the throughput/interactivity Pareto frontier over (TP, concurrency), one curve
  per think time Z (seed 000 section 1.2's axes; Step 2 and section 4.1: "Z shifts the frontier").
- `plot_cache_comparison`: standard serving (Z = 0, no prefix cache) against an agent pausing Z
  with and without prefix caching (seed 000 Step 5 and section 4.2).
- `plot_memory_wall`: the sessions the KV memory admits, turn by turn or against the context
  (seed 000 Step 4 and section 4.3, eq. 5).
- `save_plots`: every plot a dataset supports, written into a folder (``jaxpareto plot``).

matplotlib is imported only when a plot is drawn, so ``import jaxpareto`` does not pay for it.
Figures are `matplotlib.figure.Figure` objects on the Agg canvas (no display, no pyplot state);
saved at its own dpi, a figure is width x dpi by height x dpi pixels, each rounded to the nearest
whole pixel (halves up): 8.3 x 5.1 inches at 72.5 dpi give 602 x 370 pixels.

The frontier and cache plots also draw from a reduced store (``jaxpareto sweep --reduce``, which
keeps only each cell's Pareto front over TP x concurrency): its stored fronts are the curves, the
same points `pareto_front` finds in the full sweep, unless ``--max-front-points`` cut a front (the
legend then says how many points are drawn). The memory wall needs the full sweep.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.dataset.pareto import DEFAULT_X, DEFAULT_Y, frontier_table, pareto_front

DEFAULT_SIZE = (8.0, 5.0)  # inches
DEFAULT_DPI = 120  # 960 x 600 pixels
MAX_LABELS = 10  # TP/C annotations per curve before thinning
SEED_TURNS = (1, 10, 20)  # the seed's memory-wall turns (Step 4)
# For plot_cache_comparison without a dataset: a small sweep over the usual configuration choices.
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_CONCURRENCY = tuple(int(c) for c in np.unique(np.round(np.geomspace(1, 1024, 31))))
PLOTS = ("frontier", "cache", "memory_wall")

_X_LABEL = "interactivity: output tokens/s per user"
_FULL_SWEEP = "`jaxpareto sweep SPEC --out FILE.zarr` (without --reduce) stores the full sweep"
_Y_LABEL = "throughput: output tokens/s per GPU"


# ----------------------------------------------------------------------------- selections


def _headline(ds: xr.Dataset) -> dict:
    """The headline cell stored by ``jaxpareto sweep`` (attribute ``report``), if any."""
    try:
        report = json.loads(ds.attrs.get("report", "{}"))
    except (TypeError, ValueError):
        return {}
    headline = report.get("headline", {}) if isinstance(report, dict) else {}
    return {k: v for k, v in headline.items() if k in ds.dims} if isinstance(headline, dict) else {}


def _grid_values(ds: xr.Dataset, axis: str) -> list:
    return [v.item() for v in np.asarray(ds[axis].values)]


def _match(ds: xr.Dataset, axis: str, value, field: str):
    """The grid value of ``axis`` equal to ``value`` (strings exactly, numbers to 1e-9 relative)."""
    values = np.asarray(ds[axis].values)
    if values.dtype.kind in "USO":
        hits = np.flatnonzero(values.astype(str) == str(value))
    else:
        try:
            wanted = float(value)
        except (TypeError, ValueError):
            raise JaxparetoError(field, f"not a number: {value!r}") from None
        hits = np.flatnonzero(np.isclose(values.astype(float), wanted, rtol=1e-9, atol=0))
    if not len(hits):
        raise JaxparetoError(field, f"{value!r} is not on the grid", _grid_values(ds, axis))
    return values[hits[0]].item()


def _pick(ds: xr.Dataset, axis: str, requested=None, default=None):
    """``requested`` (checked), else the dataset's headline, else ``default``, else the first value."""
    if requested is not None:
        return _match(ds, axis, requested, axis)
    headline = _headline(ds)
    if axis in headline:
        try:
            return _match(ds, axis, headline[axis], axis)
        except JaxparetoError:
            pass
    return default if default is not None else _grid_values(ds, axis)[0]


def _check_cell(ds: xr.Dataset, cell: Mapping, spread: Sequence[str]) -> None:
    for key in cell:
        if key not in ds.dims:
            raise JaxparetoError(key, "not a dimension of the dataset", [str(d) for d in ds.dims])
        if key in spread or key == "front_point":
            raise JaxparetoError(key, f"this plot spans every value of {key!r}; it cannot be fixed")


def _fixed(ds: xr.Dataset, var: str, free: Sequence[str], cell: Mapping) -> dict:
    """One value per dimension of ``ds[var]`` outside ``free``: ``cell``'s, the headline's or the first."""
    return {d: _pick(ds, d, cell.get(d)) for d in ds[var].dims if d not in free and d != "front_point"}


def _reduced(ds: xr.Dataset) -> bool:
    """Whether ``ds`` is a reduced sweep (`jaxpareto.pareto_sweep`, ``jaxpareto sweep --reduce``)."""
    return ds.attrs.get("reduction") == "pareto"


def _xvar(ds: xr.Dataset) -> str:
    """The variable holding the frontier's x values: the front's in a reduced sweep."""
    return f"front_{DEFAULT_X}" if _reduced(ds) else DEFAULT_X


def _reduced_unsupported(ds: xr.Dataset, plot: str) -> str | None:
    """Why a reduced sweep's stored fronts cannot give ``plot``; None if they can."""
    reduced = "a reduced store (`jaxpareto sweep --reduce`) keeps only each cell's Pareto front"
    if plot == "memory_wall":
        return f"{reduced}, not concurrency_max; {_FULL_SWEEP}"
    x, y = ds.attrs.get("pareto_x"), ds.attrs.get("pareto_y")
    dims = [str(d) for d in np.atleast_1d(ds.attrs.get("pareto_dims", []))]
    maximize = [bool(m) for m in np.atleast_1d(ds.attrs.get("pareto_maximize", []))]
    if (x, y) != (DEFAULT_X, DEFAULT_Y) or sorted(dims) != ["concurrency", "tp"] or maximize != [True, True]:
        return (f"{reduced}, here of {y} against {x} over {' x '.join(dims) or '?'}; the plot needs the fronts of "
                f"{DEFAULT_Y} against {DEFAULT_X}, both maximised, over tp x concurrency; {_FULL_SWEEP}")
    for name in ("front_size", "front_tp", "front_concurrency", f"front_{DEFAULT_X}", f"front_{DEFAULT_Y}"):
        if name not in ds.data_vars:
            return f"needs the variable {name} of a reduced store"
    return None


# ----------------------------------------------------------------------------- support checks


def unsupported(ds: xr.Dataset, plot: str) -> str | None:
    """Why ``plot`` ("frontier", "cache" or "memory_wall") cannot be drawn from ``ds``; None if it can."""
    if plot not in PLOTS:
        raise JaxparetoError("plot", f"unknown plot {plot!r}", PLOTS)
    missing = [d for d in ("gpu", "model") if d not in ds.dims]
    if missing:
        return f"the dataset has no {missing[0]!r} dimension (not a jaxpareto sweep)"
    reduced = _reduced(ds)
    if reduced and (reason := _reduced_unsupported(ds, plot)):
        return reason
    if plot == "memory_wall":
        if "concurrency_max" not in ds.data_vars:
            return "needs the variable concurrency_max"
        dims = ds.concurrency_max.dims
        axis = "turn" if "turn" in dims else "context_tokens"
        if "tp" not in dims or axis not in dims:
            return "needs tp and context_tokens (or turn) dimensions"
        if ds.sizes[axis] < 2:
            return f"needs two or more {axis} values (the dataset has {ds.sizes[axis]})"
        return None
    for name in (DEFAULT_X, DEFAULT_Y):
        if not reduced and name not in ds.data_vars:
            return f"needs the variable {name}"
    xvar = _xvar(ds)
    for d in ("think_time_s",) if reduced else ("tp", "concurrency", "think_time_s"):
        if d not in ds[xvar].dims:
            return f"needs a {d!r} dimension"
    if plot == "cache":
        z = np.asarray(ds.think_time_s.values, dtype=float)
        if "hit_rate" not in ds[xvar].dims:
            return "needs a 'hit_rate' dimension"
        h = np.asarray(ds.hit_rate.values, dtype=float)
        if not (np.any(z == 0) and np.any(z > 0)):
            return f"needs think_time_s = 0 (standard serving) and one > 0 (agent); the dataset has {z.tolist()}"
        if not (np.any(h == 0) and np.any(h > 0)):
            return f"needs hit_rate = 0 (no prefix cache) and one > 0 (with cache); the dataset has {h.tolist()}"
    return None


def _require(ds: xr.Dataset, plot: str) -> None:
    if not isinstance(ds, xr.Dataset):
        raise JaxparetoError("ds", f"expected an xarray.Dataset (a sweep), got {type(ds).__name__}")
    reason = unsupported(ds, plot)
    if reason:
        raise JaxparetoError("ds", f"cannot draw the {plot} plot: {reason}")


# ----------------------------------------------------------------------------- drawing helpers


def _check_figure(size, dpi) -> tuple[tuple[float, float], float]:
    try:
        w, h = (float(v) for v in size)
    except (TypeError, ValueError):
        raise JaxparetoError("size", f"expected (width, height) in inches, got {size!r}") from None
    if not (0.5 <= w <= 100 and 0.5 <= h <= 100):
        raise JaxparetoError("size", f"width and height must be 0.5 to 100 inches, got {w:g} x {h:g}")
    try:
        dpi = float(dpi)
    except (TypeError, ValueError):
        raise JaxparetoError("dpi", f"not a number: {dpi!r}") from None
    if not 10 <= dpi <= 1200:
        raise JaxparetoError("dpi", f"must be 10 to 1200, got {dpi:g}")
    if w * dpi > 32768 or h * dpi > 32768:
        raise JaxparetoError("size", f"{w:g} x {h:g} inches at {dpi:g} dpi exceeds 32,768 pixels a side")
    return (w, h), dpi


def _axes(ax, size, dpi):
    """The caller's axes, or a new Agg figure of ``size`` inches at ``dpi``."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    size, dpi = _check_figure(size, dpi)
    # Agg truncates width x dpi to whole pixels (8.3 in at 72.5 dpi: 601.75 -> 601; a product
    # such as 4.1 * 30 = 122.99999999999999 in floating point could lose one): ask for the
    # nearest whole number of pixels plus a hair, far above float error and far below a pixel,
    # so that truncating lands on it.
    figsize = tuple((math.floor(v * dpi + 0.5) + 1e-6) / dpi for v in size)
    fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _titles(fig, ax, own: bool, main: str, sub: str) -> None:
    if own:
        fig.suptitle(main, fontsize=13, fontweight="bold")
        ax.set_title(sub, fontsize=9, color="0.3")
    else:
        ax.set_title(f"{main}\n{sub}", fontsize=10)


def _plain(value, _pos=None) -> str:
    """Tick label without powers of ten: 0.5, 20, 1,000, 100,000."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _log_if_decades(ax, values, axis: str, span: float = 10.0) -> None:
    """Log scale on ``axis`` when the positive plotted values span ``span`` (a decade) or more.

    Ticks read as plain numbers; over less than two decades the 2x, 3x and 5x ticks are labelled too.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if not len(v) or v.max() / v.min() < span:
        return
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_formatter(FuncFormatter(_plain))
    if v.max() / v.min() < 100:
        target.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 5.0)))
        target.set_minor_formatter(FuncFormatter(_plain))
    else:
        target.set_minor_formatter(NullFormatter())


def _num(value) -> str:
    value = float(value)
    if value == int(value) and abs(value) >= 1000:
        return f"{int(value):,}"
    return f"{value:g}"


def _describe(ds: xr.Dataset, cell: Mapping) -> str:
    """The fixed cell and workload in words, e.g. 'context 16,384 tokens, hit rate 0.9, OSL 128'."""
    parts = []
    for key, value in cell.items():
        if key == "context_tokens":
            parts.append(f"context {_num(value)} tokens")
        elif key == "hit_rate":
            parts.append(f"prefix-cache hit rate {_num(value)}")
        elif key == "think_time_s":
            parts.append(f"think time Z = {_num(value)} s")
        elif key == "turn":
            context = float(ds.context_tokens.sel(turn=value).values) if "context_tokens" in ds.coords else None
            parts.append(f"turn {value}" + (f" (context {_num(context)} tokens)" if context is not None else ""))
        elif key not in ("gpu", "model"):
            parts.append(f"{key} {value}")
    if "osl" in ds.attrs:
        parts.append(f"OSL {_num(ds.attrs['osl'])}")
    return ", ".join(parts)


def _frontier(cell: xr.Dataset, x: str = DEFAULT_X, y: str = DEFAULT_Y):
    """Frontier points of one cell over (tp, concurrency): exact ties dropped, sorted by x.

    From a reduced sweep, the stored front (the same points, ordered by x, ties in grid order).
    """
    if _reduced(cell):
        kept = min(int(cell.front_size), cell.sizes["front_point"])
        table = pd.DataFrame({name: np.asarray(cell[f"front_{name}"].values)[:kept]
                              for name in ("tp", "concurrency", x, y)})
        return table[~table.duplicated(subset=[x, y], keep="first")].reset_index(drop=True)
    front = pareto_front(cell, x=x, y=y, dims=("tp", "concurrency"))
    return frontier_table(cell, front, x=x, y=y, dims=("tp", "concurrency"), metrics=(), drop_ties=True)


def _front_note(cell: xr.Dataset) -> str:
    """For a reduced sweep's cell whose front was cut to ``max_front_points``: how much is drawn."""
    if not _reduced(cell) or int(cell.front_size) <= cell.sizes["front_point"]:
        return ""
    return f" (the {cell.sizes['front_point']} lowest-interactivity of {int(cell.front_size)} front points stored)"


def _annotate(ax, table, x: str, y: str, color) -> None:
    """Label a frontier's points with their TP and concurrency, at most MAX_LABELS of them and
    at least 30 points apart on the page (call once the axes' scales are set)."""
    n = len(table)
    if not n:
        return
    ax.autoscale_view()
    anchors = ax.transData.transform(np.column_stack([table[x], table[y]]).astype(float))  # pixels
    gap = 30 * ax.figure.dpi / 72
    while True:
        keep = [0]
        for i in range(1, n):
            if np.hypot(*(anchors[i] - anchors[keep[-1]])) >= gap:
                keep.append(i)
        if len(keep) <= MAX_LABELS:
            break
        gap *= 1.25
    for k, i in enumerate(keep):
        row = table.iloc[i]
        last = i == n - 1  # the right-most point: label to its left, inside the axes
        ax.annotate(f"TP{int(row['tp'])} C{int(row['concurrency'])}", (row[x], row[y]),
                    xytext=(-6, -4) if last else (6, 6 if k % 2 == 0 else -12), textcoords="offset points",
                    ha="right" if last else "left", fontsize=7, color=color, zorder=20,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.75})


def _draw_frontier(ax, table, x, y, *, label, color, gid, width=1.8, marker="o", linestyle="-", zorder=2):
    (line,) = ax.plot(np.asarray(table[x], dtype=float), np.asarray(table[y], dtype=float), linestyle=linestyle,
                      marker=marker, markersize=1.6 * width + 1.5, linewidth=width, color=color, label=label,
                      zorder=zorder, alpha=0.9)
    line.set_gid(gid)
    return line


def _finish_frontier_axes(ax, tables, labelled=None) -> None:
    """Scales from every drawn frontier in ``tables``, axis labels, grid, and the TP/C labels
    of the ``labelled`` (table, color) curve."""
    _log_if_decades(ax, [v for t in tables for v in t[DEFAULT_X]], "x")
    _log_if_decades(ax, [v for t in tables for v in t[DEFAULT_Y]], "y")
    ax.set_xlabel(f"{_X_LABEL} [tokens/s]")
    ax.set_ylabel(f"{_Y_LABEL} [tokens/s/GPU]")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    if labelled is not None:
        _annotate(ax, labelled[0], DEFAULT_X, DEFAULT_Y, labelled[1])


def _select_names(ds: xr.Dataset, gpu, model) -> tuple[str, str]:
    return _pick(ds, "gpu", gpu), _pick(ds, "model", model)


# ----------------------------------------------------------------------------- the plots


def plot_frontier(
    ds: xr.Dataset,
    gpu: str | None = None,
    model: str | None = None,
    *,
    think_time_s: float | None = None,
    think_times: Sequence[float] | None = None,
    annotate: bool = True,
    ax=None,
    size: tuple[float, float] = DEFAULT_SIZE,
    dpi: float = DEFAULT_DPI,
    **cell,
):
    """The Pareto frontier of one GPU x model, one curve per think time Z.

    Reproduces the seed's central figure (seed 000 section 1.2, the AIConfigurator axes) and its
    Step 2 / section 4.1 claim that the think time Z shifts the frontier. Each curve joins the
    non-dominated (TP, concurrency) configurations of its Z, computed with `jaxpareto.pareto_front`
    (exact ties, e.g. concurrencies beyond what KV memory admits, are drawn once, at the lowest
    TP and concurrency), sorted by interactivity.

    Args:
        ds: a sweep (`jaxpareto.dataset.sweep`, a stored one, or `jaxpareto.session_sweep`) with
            ``output_tokens_per_s_per_user`` and ``output_tokens_per_s_per_gpu`` over ``tp``,
            ``concurrency`` and ``think_time_s``; or a reduced sweep (`jaxpareto.pareto_sweep`,
            ``jaxpareto sweep --reduce``) of those two outputs over tp x concurrency, whose
            stored fronts are drawn (a front cut by ``max_front_points`` says so in the legend).
        gpu, model: the figure's GPU and model (default: the dataset's headline, else the first).
        think_time_s: the highlighted curve, drawn thicker and labelled with the TP and
            concurrency of its points [s] (default: the headline's Z, else the first).
        think_times: the curves drawn [s] (default: every think time of the dataset).
        annotate: label the highlighted curve's points "TP<G> C<C>" (at most 10, evenly thinned).
        ax: draw into these matplotlib axes instead of a new figure.
        size: figure (width, height) [inches]; saved at ``dpi``, a PNG is width x dpi by
            height x dpi pixels, each rounded to the nearest whole pixel (halves up).
        dpi: figure resolution [pixels per inch].
        **cell: fixed values of the remaining axes, e.g. ``context_tokens=65536, hit_rate=0.9``
            (or ``turn=5`` for a session sweep); default the headline's, else the first.

    Returns:
        The matplotlib Figure. x: output tokens/s per user [tokens/s]; y: output tokens/s per
        GPU [tokens/s/GPU]; each axis logarithmic when its values span a decade. Every frontier
        curve is a ``Line2D`` with gid ``"frontier think_time_s=<Z>"``.

    Raises:
        JaxparetoError: the dataset lacks the variables or dimensions, or a selection is not on
            the grid.
    """
    _require(ds, "frontier")
    _check_cell(ds, cell, ("gpu", "model", "tp", "concurrency", "think_time_s"))
    g, m = _select_names(ds, gpu, model)
    fixed = _fixed(ds, _xvar(ds), ("gpu", "model", "tp", "concurrency", "think_time_s"), cell)
    zs = _grid_values(ds, "think_time_s") if think_times is None else \
        [_match(ds, "think_time_s", z, "think_times") for z in np.atleast_1d(think_times)]
    if not zs:
        raise JaxparetoError("think_times", "name at least one think time", _grid_values(ds, "think_time_s"))
    highlight = _pick(ds, "think_time_s", think_time_s, default=zs[0])
    if highlight not in zs:
        highlight = zs[0]
    cells = ds.sel(gpu=g, model=m, **fixed)

    import matplotlib

    own = ax is None
    fig, ax = _axes(ax, size, dpi)
    cmap = matplotlib.colormaps["plasma"]
    tables, labelled = [], None
    for k, z in enumerate(zs):
        table = _frontier(cells.sel(think_time_s=z))
        color = cmap(0.85 * k / max(len(zs) - 1, 1))
        label = f"Z = {_num(z)} s" + (" (standard serving)" if z == 0 else "") + _front_note(cells.sel(think_time_s=z))
        if table.empty:
            label += ": no feasible point"
        # Curves often overlap (Z mostly moves a point along one curve and cuts it where the KV
        # memory caps concurrency): the first is drawn widest and lowest, each next one on top.
        width = 1.2 + 1.8 * (len(zs) - 1 - k) / max(len(zs) - 1, 1)
        _draw_frontier(ax, table, DEFAULT_X, DEFAULT_Y, label=label, color=color, width=width,
                       marker="osD^vP*X"[k % 8], gid=f"frontier think_time_s={z:g}", zorder=2 + k)
        if annotate and z == highlight:
            labelled = (table, color)
        tables.append(table)
    _finish_frontier_axes(ax, tables, labelled)
    ax.legend(title="think time between turns" + (f" (labels: TP, C at Z = {_num(highlight)} s)"
                                                   if annotate else ""), fontsize=8, title_fontsize=8)
    _titles(fig, ax, own, f"Pareto frontier: {m} on {g}",
            f"best configurations over TP x concurrency C at {_describe(ds, fixed)}\n"
            "seed 000 Step 2 and section 4.1: the think time Z shifts the frontier")
    return fig


def plot_cache_comparison(
    ds: xr.Dataset | None = None,
    gpu: str | None = None,
    model: str | None = None,
    *,
    think_time_s: float | None = None,
    hit_rate: float | None = None,
    annotate: bool = True,
    ax=None,
    size: tuple[float, float] = DEFAULT_SIZE,
    dpi: float = DEFAULT_DPI,
    **cell,
):
    """Standard serving vs an agent with and without prefix caching: three frontiers in one plot.

    Reproduces seed 000 Step 5 and section 4.2 (prefix caching is the agent's lever): the
    frontier (as in `plot_frontier`) of standard serving (think time 0, no prefix cache), of
    an agent pausing Z > 0 between turns whose prefix cache hits a share h > 0 of the context,
    and of the same agent without a prefix cache (h = 0).

    Give a dataset holding those cells (``think_time_s`` 0 and > 0, ``hit_rate`` 0 and > 0:
    what ``jaxpareto plot`` draws from a stored sweep), or no dataset and a GPU and model: then
    a small `jaxpareto.dataset.sweep` over TP 1, 2, 4, 8 and 28 log-spaced concurrencies 1 to 1,024 is
    run first (about a second), with Z, h and ``context_tokens`` (default 2 s, 0.9 and 16,384:
    the seed's code agent) and any other `jaxpareto.dataset.sweep` keyword from ``cell`` (``osl``,
    ``delta_tokens``, ``tp``, ``concurrency``...).

    Args:
        ds: a sweep with those cells, or None to run one.
        gpu, model: the figure's GPU and model (default: the headline's, else the first; required
            without ``ds``).
        think_time_s: the agent's think time Z > 0 [s] (default: the headline's when > 0, else
            the first positive one).
        hit_rate: the agent's prefix-cache hit rate h > 0 (default: the dataset's highest).
        annotate: label the cached agent's frontier points "TP<G> C<C>".
        ax, size, dpi: as in `plot_frontier` (size in inches, dpi in pixels per inch).
        **cell: fixed values of the remaining axes (``context_tokens=...``, ``turn=...``), or
            sweep keywords when ``ds`` is None.

    Returns:
        The matplotlib Figure; x: output tokens/s per user [tokens/s], y: output tokens/s per
        GPU [tokens/s/GPU]. The curves are ``Line2D`` with gids ``"frontier standard"``,
        ``"frontier agent cache"`` and ``"frontier agent no-cache"``.

    Raises:
        JaxparetoError: missing cells, a Z or h that is not > 0 or not on the grid.
    """
    if ds is None:
        if gpu is None or model is None:
            raise JaxparetoError("gpu/model", "name a GPU and a model when no dataset is given")
        from jaxpareto.dataset.sweep import sweep

        z = 2.0 if think_time_s is None else float(think_time_s)
        h = 0.9 if hit_rate is None else float(hit_rate)
        for field, value in (("think_time_s", z), ("hit_rate", h)):
            if not value > 0:
                raise JaxparetoError(field, f"the agent's value must be > 0, got {value:g}")
        kwargs = {"context_tokens": 16384, "tp": DEFAULT_TP, "concurrency": DEFAULT_CONCURRENCY, **cell}
        ds = sweep(gpu, model, think_time_s=[0.0, z], hit_rate=[0.0, h], **kwargs)
        cell = {}
    _require(ds, "cache")
    _check_cell(ds, cell, ("gpu", "model", "tp", "concurrency", "think_time_s", "hit_rate"))
    g, m = _select_names(ds, gpu, model)
    zs = np.asarray(ds.think_time_s.values, dtype=float)
    z_default = _headline(ds).get("think_time_s")
    if think_time_s is None:
        think_time_s = z_default if z_default is not None and float(z_default) > 0 and \
            np.isclose(zs, float(z_default)).any() else zs[zs > 0][0]
    z = _match(ds, "think_time_s", think_time_s, "think_time_s")
    h = _match(ds, "hit_rate", hit_rate if hit_rate is not None else np.max(ds.hit_rate.values), "hit_rate")
    for field, value in (("think_time_s", z), ("hit_rate", h)):
        if not value > 0:
            raise JaxparetoError(field, f"the agent's value must be > 0, got {value:g}")
    z0 = _match(ds, "think_time_s", 0.0, "think_time_s")
    h0 = _match(ds, "hit_rate", 0.0, "hit_rate")
    fixed = _fixed(ds, _xvar(ds), ("gpu", "model", "tp", "concurrency", "think_time_s", "hit_rate"), cell)
    cells = ds.sel(gpu=g, model=m, **fixed)

    own = ax is None
    fig, ax = _axes(ax, size, dpi)
    curves = (
        ("standard", z0, h0, "standard serving (Z = 0, no prefix cache)", "0.35", "--"),
        ("agent cache", z, h, f"agent, Z = {_num(z)} s, prefix cache h = {_num(h)}", "tab:blue", "-"),
        ("agent no-cache", z, h0, f"agent, Z = {_num(z)} s, no prefix cache", "tab:red", "-"),
    )
    tables, labelled = [], None
    for gid, zz, hh, label, color, style in curves:
        table = _frontier(cells.sel(think_time_s=zz, hit_rate=hh))
        label += _front_note(cells.sel(think_time_s=zz, hit_rate=hh))
        _draw_frontier(ax, table, DEFAULT_X, DEFAULT_Y, label=label + (": no feasible point" if table.empty else ""),
                       color=color, gid=f"frontier {gid}", width=2.6 if gid == "agent cache" else 1.6,
                       linestyle=style, zorder=3 if gid == "agent cache" else 2)
        if annotate and gid == "agent cache":
            labelled = (table, color)
        tables.append(table)
    _finish_frontier_axes(ax, tables, labelled)
    ax.legend(fontsize=8, title="labels: TP, concurrency C" if annotate else None, title_fontsize=8)
    _titles(fig, ax, own, f"Standard vs agent serving, prefix cache on/off: {m} on {g}",
            f"Pareto frontiers over TP x concurrency C at {_describe(ds, fixed)}\n"
            "seed 000 Step 5 and section 4.2: the prefix cache is the agent's lever")
    return fig


def plot_memory_wall(
    ds: xr.Dataset,
    gpu: str | None = None,
    model: str | None = None,
    *,
    by: str = "tp",
    tp: int | None = None,
    annotate: bool = True,
    ax=None,
    size: tuple[float, float] = DEFAULT_SIZE,
    dpi: float = DEFAULT_DPI,
    **cell,
):
    """The KV memory wall: the sessions that fit in KV memory, against the turn or the context.

    Reproduces seed 000 Step 4 and section 4.3 (eq. 5: ``C_max = floor(M_avail / M_kv_session)``):
    as the context grows, fewer sessions fit. From a `jaxpareto.session_sweep` dataset the x axis
    is the turn j (its context L(j) on the top axis); with ``kv_demand="synchronised"`` this is the
    seed's wall (70B FP16 on 8 x H100: about 93, 42 and 26 sessions at turns 1, 10 and 20), with
    the default "staggered" demand every session holds the session-average context's KV, so the
    line is flat. From a core sweep the x axis is ``context_tokens``.

    Args:
        ds: a sweep or session sweep with ``concurrency_max`` over ``tp`` and ``context_tokens``
            (or ``turn``), two or more values of the latter.
        gpu, model: the GPU and model (default: the headline's, else the first). With
            ``by="gpu"`` the GPU is the highlighted line.
        by: "tp" for one line per TP degree at one GPU, "gpu" for one line per GPU at one TP.
        tp: with ``by="tp"`` the highlighted line, with ``by="gpu"`` the TP of every line
            (default: the largest TP).
        annotate: label the highlighted line's session counts (at the seed's turns 1, 10 and 20
            when present, else at its first, middle and last points).
        ax, size, dpi: as in `plot_frontier` (size in inches, dpi in pixels per inch).
        **cell: fixed values of the other axes; ``concurrency_max`` does not depend on
            concurrency, think time or hit rate. A ``context_tokens`` (or ``turn``) value marks
            that point with a dotted vertical line.

    Returns:
        The matplotlib Figure; y: sessions that fit (``concurrency_max``) [sessions], one
        ``Line2D`` per TP or GPU with gid ``"memory_wall tp=<G>"`` or ``"memory_wall gpu=<name>"``;
        zeros (no session fits, or the weights do not) are not drawn.

    Raises:
        JaxparetoError: missing variable or dimensions, unknown ``by``, selections off the grid.
    """
    _require(ds, "memory_wall")
    if by not in ("tp", "gpu"):
        raise JaxparetoError("by", f"unknown {by!r}", ("tp", "gpu"))
    var = ds.concurrency_max
    axis = "turn" if "turn" in var.dims else "context_tokens"
    _check_cell(ds, cell, ("gpu", "model", "tp"))
    marker = _match(ds, axis, cell.pop(axis), axis) if axis in cell else None
    m = _pick(ds, "model", model)
    tps = _grid_values(ds, "tp")
    if by == "tp":
        fixed_g = _pick(ds, "gpu", gpu)
        lines = tps
        highlight = _match(ds, "tp", tp, "tp") if tp is not None else max(tps)
        fixed_tp = None
    else:
        fixed_g = None
        lines = _grid_values(ds, "gpu")
        highlight = _pick(ds, "gpu", gpu)
        fixed_tp = _match(ds, "tp", tp, "tp") if tp is not None else max(tps)
    fixed = _fixed(ds, "concurrency_max", ("gpu", "model", "tp", axis), cell)
    wall = var.sel(model=m, **fixed)
    xvals = np.asarray(ds[axis].values, dtype=float)

    import matplotlib

    own = ax is None
    fig, ax = _axes(ax, size, dpi)
    cmap = matplotlib.colormaps["viridis"]
    ys = []
    for k, name in enumerate(lines):
        y = wall.sel(gpu=fixed_g, tp=name) if by == "tp" else wall.sel(gpu=name, tp=fixed_tp)
        y = np.asarray(y.transpose(axis).values, dtype=float)
        y = np.where(y >= 1, y, np.nan)
        label = f"TP {name}" if by == "tp" else str(name)
        if not np.isfinite(y).any():
            label += " (no session fits)"
        elif not np.isfinite(y).all():
            label += " (none fit beyond)" if np.isfinite(y[0]) else ""
        hl = name == highlight
        color = cmap(0.9 * k / max(len(lines) - 1, 1))
        (line,) = ax.plot(xvals, y, marker="o", markersize=4 if hl else 3, linewidth=2.4 if hl else 1.4,
                          color=color, label=label, zorder=3 if hl else 2)
        line.set_gid(f"memory_wall {by}={name}")
        ys.extend(y)
        if annotate and hl:
            if axis == "turn" and all(t in xvals for t in SEED_TURNS):
                at = [int(np.flatnonzero(xvals == t)[0]) for t in SEED_TURNS]
            else:
                at = sorted({0, (len(xvals) - 1) // 2, len(xvals) - 1})
            for i in at:
                if np.isfinite(y[i]):
                    ax.annotate(f"{int(y[i])}", (xvals[i], y[i]), xytext=(0, 7), textcoords="offset points",
                                ha="center", fontsize=8, color=color, fontweight="bold")
    if marker is not None:
        ax.axvline(float(marker), color="0.4", linestyle=":", linewidth=1.2,
                   label=f"selected {'turn' if axis == 'turn' else 'context'} {_num(marker)}")
    # C_max ~ 1 / L: against the context, log-log axes (from a 4x span) make the wall a straight line
    against_context = axis == "context_tokens" and xvals.min() > 0 and xvals.max() / xvals.min() >= 4
    _log_if_decades(ax, ys, "y", span=4.0 if against_context else 10.0)
    ax.margins(y=0.12)  # room for the labels above the points
    if axis == "turn":
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("turn of the session j")
        contexts = np.asarray(ds.context_tokens.values, dtype=float) if "context_tokens" in ds.coords else None
        if contexts is not None and contexts[-1] != contexts[0]:
            slope = (contexts[-1] - contexts[0]) / (xvals[-1] - xvals[0])
            top = ax.secondary_xaxis("top", functions=(lambda t: contexts[0] + (t - xvals[0]) * slope,
                                                       lambda c: xvals[0] + (c - contexts[0]) / slope))
            top.xaxis.set_major_formatter(FuncFormatter(_plain))
            top.set_xlabel("context L(j) [tokens]", fontsize=8)
            top.tick_params(labelsize=8)
    else:
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(_plain))  # replaced by log ticks, also plain, below
        _log_if_decades(ax, xvals, "x", span=4.0)
        ax.set_xlabel("context length L [tokens]")
    ax.set_ylabel("sessions that fit in KV memory [sessions]")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(fontsize=8, title="TP degree" if by == "tp" else f"GPU (TP {fixed_tp})", title_fontsize=8)
    where = f"{m} on {fixed_g}" if by == "tp" else f"{m} at TP {fixed_tp}"
    demand = ds.attrs.get("kv_demand")
    note = {"staggered": "staggered KV demand: each session holds the session-average context (flat by design)",
            "synchronised": "synchronised KV demand: all sessions at turn j",
            "synchronized": "synchronised KV demand: all sessions at turn j"}.get(demand, "")
    _titles(fig, ax, own, f"KV memory wall: sessions that fit vs {'turn' if axis == 'turn' else 'context'}: {where}",
            f"{note + chr(10) if note else ''}seed 000 Step 4 and section 4.3 (eq. 5): "
            "KV memory admits fewer sessions as the context grows")
    return fig


# ----------------------------------------------------------------------------- files and the CLI


def _safe(name) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("_") or "x"


def save_plots(
    ds: xr.Dataset,
    out: str | Path,
    *,
    size: tuple[float, float] = DEFAULT_SIZE,
    dpi: float = DEFAULT_DPI,
    sel: Mapping | None = None,
    echo=None,
) -> tuple[list[Path], list[str]]:
    """Write every plot ``ds`` supports into the folder ``out`` as PNG files.

    Per GPU x model: ``frontier_<gpu>_<model>.png`` (`plot_frontier`),
    ``cache_<gpu>_<model>.png`` (`plot_cache_comparison`, from the dataset's own cells) and
    ``memory_wall_<gpu>_<model>.png`` (`plot_memory_wall`, one line per TP); with several GPUs also
    ``memory_wall_<model>_by_gpu.png`` (one line per GPU at the largest TP).

    Args:
        ds: a sweep or session sweep, or a reduced sweep (``jaxpareto sweep --reduce``: the
            frontier and cache plots from its stored fronts; the memory wall is skipped).
        out: the folder, created if missing; existing PNGs of the same name are replaced.
        size: figure (width, height) [inches]; dpi: [pixels per inch]; each side of a PNG is
            size x dpi rounded to the nearest whole pixel.
        sel: axis values. ``gpu`` and ``model`` restrict the figures to that one; the others fix
            the cell (the frontier highlights the selected think time; the cache comparison takes
            a selected ``think_time_s`` / ``hit_rate`` > 0 as the agent's Z / h; the memory wall
            marks a selected context or turn). ``tp`` and ``concurrency`` cannot be selected:
            the frontiers span them. Everything is checked before anything is drawn.
        echo: called with each written path and each skip reason as they happen (e.g. ``print``).

    Returns:
        (paths written, reasons for the plots skipped).

    Raises:
        JaxparetoError: a selection off the grid or naming an unknown axis, a bad size or dpi,
            ``out`` not a folder.
    """
    sel = dict(sel or {})
    _check_figure(size, dpi)
    if "gpu" not in ds.dims or "model" not in ds.dims:
        raise JaxparetoError("store", "not a jaxpareto sweep: no 'gpu' and 'model' dimensions")
    for key in list(sel):
        sel[key] = _selection_value(ds, key, sel[key], f"sel {key}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise JaxparetoError("--out", f"{out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    gpus = [sel["gpu"]] if "gpu" in sel else _grid_values(ds, "gpu")
    models = [sel["model"]] if "model" in sel else _grid_values(ds, "model")
    cell = {k: v for k, v in sel.items() if k not in ("gpu", "model")}
    echo = echo or (lambda message: None)
    written, skipped = [], []

    def save(fig, name):
        path = out / f"{name}.png"
        fig.savefig(path, dpi=fig.dpi, format="png")
        written.append(path)
        echo(str(path))

    def skip(plot, reason):
        skipped.append(f"{plot}: {reason}")
        echo(f"skipped {plot}: {reason}")

    reasons = {plot: unsupported(ds, plot) for plot in PLOTS}
    for plot, reason in reasons.items():
        if reason:
            skip(plot, reason)
    memory_axis = "turn" if "turn" in ds.dims else "context_tokens"
    for g in gpus:
        for m in models:
            tag = f"{_safe(g)}_{_safe(m)}"
            if not reasons["frontier"]:
                frontier_cell = {k: v for k, v in cell.items() if k != "think_time_s" and k in ds[_xvar(ds)].dims}
                save(plot_frontier(ds, g, m, think_time_s=cell.get("think_time_s"), size=size, dpi=dpi,
                                   **frontier_cell), f"frontier_{tag}")
            if not reasons["cache"]:
                agent = {k: cell[k] for k in ("think_time_s", "hit_rate") if cell.get(k, 0) > 0}
                rest = {k: v for k, v in cell.items() if k not in ("think_time_s", "hit_rate")
                        and k in ds[_xvar(ds)].dims}
                save(plot_cache_comparison(ds, g, m, size=size, dpi=dpi, **agent, **rest), f"cache_{tag}")
            if not reasons["memory_wall"]:
                wall_cell = {k: v for k, v in cell.items() if k in ds.concurrency_max.dims or k == memory_axis}
                save(plot_memory_wall(ds, g, m, size=size, dpi=dpi, **wall_cell), f"memory_wall_{tag}")
    if not reasons["memory_wall"] and len(gpus) > 1:
        wall_cell = {k: v for k, v in cell.items() if k in ds.concurrency_max.dims or k == memory_axis}
        for m in models:
            save(plot_memory_wall(ds, None, m, by="gpu", size=size, dpi=dpi, **wall_cell),
                 f"memory_wall_{_safe(m)}_by_gpu")
    return written, skipped


def _selection_value(ds: xr.Dataset, key: str, value, field: str):
    """A selected axis value, checked: a known axis other than tp and concurrency, on the grid."""
    if key in ("tp", "concurrency", "front_point"):
        raise JaxparetoError(field, "the plots span every tp and concurrency; select another axis",
                             [str(d) for d in ds.dims if d not in ("tp", "concurrency", "front_point")])
    if key not in ds.dims:
        raise JaxparetoError(field, "unknown axis", [str(d) for d in ds.dims])
    return _match(ds, key, value, field)


def _parse_size(text: str) -> tuple[float, float]:
    w, sep, h = text.lower().partition("x")
    try:
        if not sep:
            raise ValueError
        return float(w), float(h)
    except ValueError:
        raise JaxparetoError("--size", f"expected WIDTHxHEIGHT in inches, e.g. 8x5, got {text!r}") from None


def _parse_sel(items: Sequence[str], ds: xr.Dataset) -> dict:
    selection = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise JaxparetoError("--sel", f"expected AXIS=VALUE, got {item!r}", [str(d) for d in ds.dims])
        if key in selection:
            raise JaxparetoError(f"--sel {key}", "selected twice")
        selection[key] = _selection_value(ds, key, raw.strip(), f"--sel {key}")
    return selection


def _open_store(path: Path) -> xr.Dataset:
    if not (path / "zarr.json").is_file():
        raise JaxparetoError("store", f"{path} is not a zarr store (written by `jaxpareto sweep --out`)")
    return xr.open_zarr(path)  # a reduced store too: save_plots draws or skips each plot, with the reason


def _cmd_plot(args: argparse.Namespace) -> int:
    size = _parse_size(args.size)
    ds = _open_store(Path(args.store))
    sel = _parse_sel(args.sel or [], ds)
    written, _ = save_plots(ds, args.out, size=size, dpi=args.dpi, sel=sel, echo=print)
    if not written:
        print("jaxpareto: no plot could be drawn from this dataset", flush=True)
        return 1
    return 0


def add_plot_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``jaxpareto plot PATH.zarr --out DIR [--sel AXIS=VALUE ...] [--dpi N] [--size WxH]``."""
    p = subparsers.add_parser(
        "plot", help="draw the frontier, cache-comparison and KV memory-wall plots of a stored sweep as PNGs",
        description="Write the plots a stored sweep supports into a folder, one file per plot and GPU x model, "
                    "printing each path (frontier_GPU_MODEL.png, cache_GPU_MODEL.png, memory_wall_GPU_MODEL.png, "
                    "memory_wall_MODEL_by_gpu.png); plots needing dimensions the sweep lacks are skipped with the "
                    "reason. A reduced store (`sweep --reduce`) gives the frontier and cache plots from its stored "
                    "per-cell fronts; the memory wall needs the full sweep. Exit status 0, 1 when no plot could be "
                    "drawn, 2 on bad arguments.")
    p.add_argument("store", help="zarr store written by `jaxpareto sweep --out` (with or without --reduce)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the PNG files (created if missing)")
    p.add_argument("--sel", action="append", metavar="AXIS=VALUE",
                   help="gpu/model: draw only that one; other axes: the cell (default: the sweep's headline, else "
                        "the first value); think_time_s/hit_rate > 0 also set the cache comparison's agent "
                        "(repeatable)")
    p.add_argument("--dpi", type=float, default=DEFAULT_DPI, help=f"pixels per inch (default {DEFAULT_DPI})")
    p.add_argument("--size", default=f"{DEFAULT_SIZE[0]:g}x{DEFAULT_SIZE[1]:g}", metavar="WxH",
                   help="figure WIDTHxHEIGHT in inches (default %(default)s)")
    p.set_defaults(func=_cmd_plot)
    return p
