"""The throughput/interactivity Pareto frontier over (TP, concurrency), one curve per think time Z
(over TP and the request rate in the open loop).

The seed's central figure (seed 000 section 1.2, the AIConfigurator axes) and its Step 2 /
section 4.1 claim that the think time Z shifts the frontier; also the frontier drawing that
`jaxpareto.plot.cache` shares.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from jaxpareto.dataset.pareto import DEFAULT_X, DEFAULT_Y, default_dims, frontier_table, pareto_front
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.plot._figure import DEFAULT_DPI, DEFAULT_SIZE, axes, describe, grids, log_if_decades, num, titles
from jaxpareto.plot._select import check_cell, fixed, grid_values, match, pick, select_names
from jaxpareto.plot.support import load_dim, reduced, require, xvar

MAX_LABELS = 10  # TP/C annotations per curve before thinning

_X_LABEL = "interactivity: output tokens/s per user"
_Y_LABEL = "throughput: output tokens/s per GPU"


def layout_dims(ds: xr.Dataset) -> tuple[str, ...]:
    """The dimensions a frontier spans besides TP and the load: a layout sweep's ``pp``,
    ``ep`` and ``dp_attention``, a disaggregated sweep's pools (`default_dims`)."""
    return tuple(d for d in default_dims(ds.dims) if d not in ("tp", "concurrency", "request_rate"))


def _layout_label(row) -> str:
    """A front point's configuration in a few characters: "TP4 C32", "TP1 DP8 EP8 C96", "TP2 PP4 C64",
    "TP4 P2xTP2 D1 C64" (disaggregated), "TP4 λ2.5/s" (open loop)."""
    parts = [f"TP{int(row['tp'])}"]
    for name, tag in (("pp", "PP"), ("dp_attention", "DP"), ("ep", "EP")):
        if name in row and int(row[name]) > 1:
            parts.append(f"{tag}{int(row[name])}")
    if "prefill_workers" in row:
        prefill_tp = int(row["prefill_tp"]) or int(row["tp"])
        parts.append(f"P{int(row['prefill_workers'])}xTP{prefill_tp} D{int(row['decode_workers'])}")
    rate = float(row["request_rate"]) if "request_rate" in row else None
    load = f"C{int(row['concurrency'])}" if rate is None else f"λ{rate:.3g}/s" if rate < 1000 else f"λ{rate:,.0f}/s"
    return " ".join(parts + [load])


def front_table(cell: xr.Dataset, x: str = DEFAULT_X, y: str = DEFAULT_Y) -> pd.DataFrame:
    """Frontier points of one cell over (tp, the load) and any layout or pool axes: exact ties
    dropped, sorted by x.

    From a reduced sweep, the stored front (the same points, ordered by x, ties in grid order).
    """
    if reduced(cell):
        kept = min(int(cell.front_size), cell.sizes["front_point"])
        table = pd.DataFrame({name: np.asarray(cell[f"front_{name}"].values)[:kept]
                              for name in ("tp", load_dim(cell), x, y)})
        return table[~table.duplicated(subset=[x, y], keep="first")].reset_index(drop=True)
    dims = ("tp", load_dim(cell), *layout_dims(cell))
    front = pareto_front(cell, x=x, y=y, dims=dims)
    return frontier_table(cell, front, x=x, y=y, dims=dims, metrics=(), drop_ties=True)


def front_note(cell: xr.Dataset) -> str:
    """For a reduced sweep's cell whose front was cut to ``max_front_points``: how much is drawn."""
    if not reduced(cell) or int(cell.front_size) <= cell.sizes["front_point"]:
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
        ax.annotate(_layout_label(row), (row[x], row[y]),
                    xytext=(-6, -4) if last else (6, 6 if k % 2 == 0 else -12), textcoords="offset points",
                    ha="right" if last else "left", fontsize=7, color=color, zorder=20,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.75})


def draw_front(ax, table, *, label, color, gid, width=1.8, marker="o", linestyle="-", zorder=2):
    """One frontier curve (x: interactivity, y: throughput) as a ``Line2D`` with the given gid."""
    (line,) = ax.plot(np.asarray(table[DEFAULT_X], dtype=float), np.asarray(table[DEFAULT_Y], dtype=float),
                      linestyle=linestyle, marker=marker, markersize=1.6 * width + 1.5, linewidth=width,
                      color=color, label=label, zorder=zorder, alpha=0.9)
    line.set_gid(gid)
    return line


def finish_front_axes(ax, tables, labelled=None) -> None:
    """Scales from every drawn frontier in ``tables``, axis labels, grid, and the TP/C labels
    of the ``labelled`` (table, color) curve."""
    log_if_decades(ax, [v for t in tables for v in t[DEFAULT_X]], "x")
    log_if_decades(ax, [v for t in tables for v in t[DEFAULT_Y]], "y")
    ax.set_xlabel(f"{_X_LABEL} [tokens/s]")
    ax.set_ylabel(f"{_Y_LABEL} [tokens/s/GPU]")
    grids(ax)
    if labelled is not None:
        _annotate(ax, labelled[0], DEFAULT_X, DEFAULT_Y, labelled[1])


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
    non-dominated (TP, concurrency) configurations of its Z (TP and request rate in the open loop),
    computed with `jaxpareto.pareto_front`
    (exact ties, e.g. concurrencies beyond what KV memory admits, are drawn once, at the lowest
    TP and concurrency), sorted by interactivity.

    Args:
        ds: a sweep (`jaxpareto.sweep`, a stored one, or `jaxpareto.session_sweep`) with
            ``output_tokens_per_s_per_user`` and ``output_tokens_per_s_per_gpu`` over ``tp``,
            ``concurrency`` (or ``request_rate``: an open-loop sweep) and ``think_time_s``; or a
            reduced sweep (`jaxpareto.pareto_sweep`, ``jaxpareto sweep --reduce``) of those two
            outputs over tp x that load, whose
            stored fronts are drawn (a front cut by ``max_front_points`` says so in the legend).
        gpu: the figure's GPU (default: the dataset's headline, else the first).
        model: the figure's model (default: the dataset's headline, else the first).
        think_time_s: the highlighted curve, drawn thicker and labelled with the TP and
            concurrency of its points [s] (default: the headline's Z, else the first drawn).
        think_times: the curves drawn [s] (default: every think time of the dataset).
        annotate: label the highlighted curve's points "TP<G> C<C>" ("TP<G> λ<rate>/s" in the open
            loop; at most 10, evenly thinned).
        ax: draw into these matplotlib axes instead of a new figure (``size`` and ``dpi`` are
            then unused).
        size: figure (width, height) [inches]; saved at ``dpi``, a PNG is width x dpi by
            height x dpi pixels, each rounded to the nearest whole pixel (halves up).
        dpi: figure resolution [pixels per inch].
        **cell: fixed values of the remaining axes, e.g. ``context_tokens=65536`` [tokens],
            ``hit_rate=0.9`` (or ``turn=5`` for a session sweep); default the headline's, else
            the first.

    Returns:
        The matplotlib Figure. x: output tokens/s per user [tokens/s]; y: output tokens/s per
        GPU [tokens/s/GPU]; each axis logarithmic when its values span a decade. Every frontier
        curve is a ``Line2D`` with gid ``"frontier think_time_s=<Z>"``.

    Raises:
        JaxparetoError: ``ds`` is not a dataset or lacks the variables or dimensions; a ``cell``
            key is not a dimension or is one the plot spans (gpu, model, tp, concurrency or
            request_rate, think_time_s); a selection is not on the grid; ``think_times`` is empty; a bad
            ``size`` or ``dpi`` for a new figure.
    """
    require(ds, "frontier")
    load = load_dim(ds)
    spanned = ("gpu", "model", "tp", load, "think_time_s", *layout_dims(ds))
    check_cell(ds, cell, spanned)
    g, m = select_names(ds, gpu, model)
    cell_values = fixed(ds, xvar(ds), spanned, cell)
    zs = grid_values(ds, "think_time_s") if think_times is None else \
        [match(ds, "think_time_s", z, "think_times") for z in np.atleast_1d(think_times)]
    if not zs:
        raise JaxparetoError("think_times", "name at least one think time", grid_values(ds, "think_time_s"))
    highlight = pick(ds, "think_time_s", think_time_s, default=zs[0])
    if highlight not in zs:
        highlight = zs[0]
    cells = ds.sel(gpu=g, model=m, **cell_values)

    import matplotlib

    own = ax is None
    fig, ax = axes(ax, size, dpi)
    cmap = matplotlib.colormaps["plasma"]
    tables, labelled = [], None
    for k, z in enumerate(zs):
        table = front_table(cells.sel(think_time_s=z))
        color = cmap(0.85 * k / max(len(zs) - 1, 1))
        label = f"Z = {num(z)} s" + (" (standard serving)" if z == 0 else "") + front_note(cells.sel(think_time_s=z))
        if table.empty:
            label += ": no feasible point"
        # Curves often overlap (Z mostly moves a point along one curve and cuts it where the KV
        # memory caps concurrency): the first is drawn widest and lowest, each next one on top.
        width = 1.2 + 1.8 * (len(zs) - 1 - k) / max(len(zs) - 1, 1)
        draw_front(ax, table, label=label, color=color, width=width, marker="osD^vP*X"[k % 8],
                   gid=f"frontier think_time_s={z:g}", zorder=2 + k)
        if annotate and z == highlight:
            labelled = (table, color)
        tables.append(table)
    finish_front_axes(ax, tables, labelled)
    load_name, load_tag = ("request rate λ", "λ") if load == "request_rate" else ("concurrency C", "C")
    ax.legend(title="think time between turns" + (f" (labels: TP, {load_tag} at Z = {num(highlight)} s)"
                                                   if annotate else ""), fontsize=8, title_fontsize=8)
    titles(fig, ax, own, f"Pareto frontier: {m} on {g}",
           f"best configurations over {' x '.join(['TP', load_name, *layout_dims(ds)])} at "
           f"{describe(ds, cell_values)}\n"
           "seed 000 Step 2 and section 4.1: the think time Z shifts the frontier")
    return fig
