"""Standard serving against an agent with and without prefix caching (seed 000 Step 5, section 4.2).

Draws the cells of a given dataset; `jaxpareto.dataset.comparison.cache_comparison_sweep` computes
a small dataset holding them when there is none.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.plot._figure import DEFAULT_DPI, DEFAULT_SIZE, axes, describe, num, titles
from jaxpareto.plot._select import check_cell, fixed, headline, match, select_names
from jaxpareto.plot.frontier import draw_front, finish_front_axes, front_note, front_table
from jaxpareto.plot.support import load_dim, require, xvar

_SPANNED = ("gpu", "model", "tp", "think_time_s", "hit_rate")  # and the load (`load_dim`)


def _agent(ds: xr.Dataset, think_time_s, hit_rate) -> tuple[float, float]:
    """The agent's (Z [s], h) on the grid: as asked, else the headline's Z when > 0 or the first
    positive Z, and the highest hit rate."""
    zs = np.asarray(ds.think_time_s.values, dtype=float)
    z_default = headline(ds).get("think_time_s")
    if think_time_s is None:
        think_time_s = z_default if z_default is not None and float(z_default) > 0 and \
            np.isclose(zs, float(z_default)).any() else zs[zs > 0][0]
    z = match(ds, "think_time_s", think_time_s, "think_time_s")
    h = match(ds, "hit_rate", hit_rate if hit_rate is not None else np.max(ds.hit_rate.values), "hit_rate")
    for field, value in (("think_time_s", z), ("hit_rate", h)):
        if not value > 0:
            raise JaxparetoError(field, f"the agent's value must be > 0, got {value:g}")
    return z, h


def plot_cache_comparison(
    ds: xr.Dataset,
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
    frontier (as in `jaxpareto.plot.plot_frontier`) of standard serving (think time 0, no prefix
    cache), of an agent pausing Z > 0 between turns whose prefix cache hits a share h > 0 of the
    context, and of the same agent without a prefix cache (h = 0). The dataset must hold those
    cells (``think_time_s`` 0 and > 0, ``hit_rate`` 0 and > 0): a stored sweep that has them (what
    ``jaxpareto plot`` draws), or `jaxpareto.dataset.comparison.cache_comparison_sweep` (a small
    sweep for one GPU and model). This function draws only; it never runs a sweep.

    Args:
        ds: a sweep, or a reduced sweep (`jaxpareto.pareto_sweep`), with those cells.
        gpu: the figure's GPU (default: the headline's, else the first).
        model: the figure's model (default: the headline's, else the first).
        think_time_s: the agent's think time Z > 0 [s] (default: the headline's when > 0, else
            the first positive one).
        hit_rate: the agent's prefix-cache hit rate h > 0 [fraction of the context] (default:
            the dataset's highest).
        annotate: label the cached agent's frontier points "TP<G> C<C>".
        ax: draw into these matplotlib axes instead of a new figure (``size`` and ``dpi`` are
            then unused).
        size: figure (width, height) [inches]; each PNG side is size x dpi, rounded.
        dpi: figure resolution [pixels per inch].
        **cell: fixed values of the remaining axes, e.g. ``context_tokens=16384`` [tokens] or
            ``turn=5``; default the headline's, else the first.

    Returns:
        The matplotlib Figure; x: output tokens/s per user [tokens/s], y: output tokens/s per
        GPU [tokens/s/GPU]. The curves are ``Line2D`` with gids ``"frontier standard"``,
        ``"frontier agent cache"`` and ``"frontier agent no-cache"``.

    Raises:
        JaxparetoError: ``ds`` is not a dataset or lacks the cells, variables or dimensions; a
            Z or h that is not > 0 or not on the grid; a ``cell`` key that is not a dimension or
            is one the plot spans; a selection off the grid; a bad ``size`` or ``dpi``.
    """
    require(ds, "cache")
    load = load_dim(ds)
    spanned = (*_SPANNED, load)
    check_cell(ds, cell, spanned)
    g, m = select_names(ds, gpu, model)
    z, h = _agent(ds, think_time_s, hit_rate)
    z0 = match(ds, "think_time_s", 0.0, "think_time_s")
    h0 = match(ds, "hit_rate", 0.0, "hit_rate")
    cell_values = fixed(ds, xvar(ds), spanned, cell)
    cells = ds.sel(gpu=g, model=m, **cell_values)

    own = ax is None
    fig, ax = axes(ax, size, dpi)
    curves = (
        ("standard", z0, h0, "standard serving (Z = 0, no prefix cache)", "0.35", "--"),
        ("agent cache", z, h, f"agent, Z = {num(z)} s, prefix cache h = {num(h)}", "tab:blue", "-"),
        ("agent no-cache", z, h0, f"agent, Z = {num(z)} s, no prefix cache", "tab:red", "-"),
    )
    tables, labelled = [], None
    for gid, zz, hh, label, color, style in curves:
        table = front_table(cells.sel(think_time_s=zz, hit_rate=hh))
        label += front_note(cells.sel(think_time_s=zz, hit_rate=hh))
        draw_front(ax, table, label=label + (": no feasible point" if table.empty else ""), color=color,
                   gid=f"frontier {gid}", width=2.6 if gid == "agent cache" else 1.6, linestyle=style,
                   zorder=3 if gid == "agent cache" else 2)
        if annotate and gid == "agent cache":
            labelled = (table, color)
        tables.append(table)
    finish_front_axes(ax, tables, labelled)
    load_name = "request rate λ" if load == "request_rate" else "concurrency C"
    ax.legend(fontsize=8, title=f"labels: TP, {load_name}" if annotate else None, title_fontsize=8)
    titles(fig, ax, own, f"Standard vs agent serving, prefix cache on/off: {m} on {g}",
           f"Pareto frontiers over TP x {load_name} at {describe(ds, cell_values)}\n"
           "seed 000 Step 5 and section 4.2: the prefix cache is the agent's lever")
    return fig
