"""The KV memory wall: the sessions the KV memory admits, turn by turn or against the context.

Seed 000 Step 4 and section 4.3 (eq. 5: ``C_max = floor(M_avail / M_kv_session)``).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.plot._figure import DEFAULT_DPI, DEFAULT_SIZE, axes, grids, log_if_decades, num, plain, titles
from jaxpareto.plot._select import check_cell, fixed, grid_values, match, pick
from jaxpareto.plot.support import require

SEED_TURNS = (1, 10, 20)  # the seed's memory-wall turns (Step 4)

_DEMAND_NOTES = {
    "staggered": "staggered KV demand: each session holds the session-average context (flat by design)",
    "synchronised": "synchronised KV demand: all sessions at turn j",
    "synchronized": "synchronised KV demand: all sessions at turn j",
}


def _label_points(ax, axis: str, xvals, y, color) -> None:
    """Session counts over the highlighted line: at the seed's turns 1, 10 and 20 when present,
    else at its first, middle and last points."""
    if axis == "turn" and all(t in xvals for t in SEED_TURNS):
        at = [int(np.flatnonzero(xvals == t)[0]) for t in SEED_TURNS]
    else:
        at = sorted({0, (len(xvals) - 1) // 2, len(xvals) - 1})
    for i in at:
        if np.isfinite(y[i]):
            ax.annotate(f"{int(y[i])}", (xvals[i], y[i]), xytext=(0, 7), textcoords="offset points",
                        ha="center", fontsize=8, color=color, fontweight="bold")


def _x_axis(ax, ds: xr.Dataset, axis: str, xvals) -> None:
    """The turn axis (its context L(j) on top when it grows) or the context axis (log from a 4x span)."""
    from matplotlib.ticker import FuncFormatter

    if axis == "turn":
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("turn of the session j")
        contexts = np.asarray(ds.context_tokens.values, dtype=float) if "context_tokens" in ds.coords else None
        if contexts is not None and contexts[-1] != contexts[0]:
            slope = (contexts[-1] - contexts[0]) / (xvals[-1] - xvals[0])
            top = ax.secondary_xaxis("top", functions=(lambda t: contexts[0] + (t - xvals[0]) * slope,
                                                       lambda c: xvals[0] + (c - contexts[0]) / slope))
            top.xaxis.set_major_formatter(FuncFormatter(plain))
            top.set_xlabel("context L(j) [tokens]", fontsize=8)
            top.tick_params(labelsize=8)
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(plain))  # replaced by log ticks, also plain, below
        log_if_decades(ax, xvals, "x", span=4.0)
        ax.set_xlabel("context length L [tokens]")


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
        gpu: the GPU (default: the headline's, else the first); with ``by="gpu"`` the
            highlighted line.
        model: the model (default: the headline's, else the first).
        by: "tp" for one line per TP degree at one GPU, "gpu" for one line per GPU at one TP.
        tp: with ``by="tp"`` the highlighted line, with ``by="gpu"`` the TP of every line
            [GPUs per replica] (default: the largest TP).
        annotate: label the highlighted line's session counts (at the seed's turns 1, 10 and 20
            when present, else at its first, middle and last points).
        ax: draw into these matplotlib axes instead of a new figure (``size`` and ``dpi`` are
            then unused).
        size: figure (width, height) [inches]; each PNG side is size x dpi, rounded.
        dpi: figure resolution [pixels per inch].
        **cell: fixed values of the other axes; ``concurrency_max`` does not depend on
            concurrency, think time or hit rate. A ``context_tokens`` [tokens] (or ``turn``)
            value marks that point with a dotted vertical line.

    Returns:
        The matplotlib Figure; y: sessions that fit (``concurrency_max``) [sessions], one
        ``Line2D`` per TP or GPU with gid ``"memory_wall tp=<G>"`` or ``"memory_wall gpu=<name>"``;
        zeros (no session fits, or the weights do not) are not drawn.

    Raises:
        JaxparetoError: ``ds`` is not a dataset or lacks the variable or dimensions; an unknown
            ``by``; a ``cell`` key that is not a dimension or is one the plot spans (gpu, model,
            tp); a selection off the grid; a bad ``size`` or ``dpi``.
    """
    require(ds, "memory_wall")
    if by not in ("tp", "gpu"):
        raise JaxparetoError("by", f"unknown {by!r}", ("tp", "gpu"))
    var = ds.concurrency_max
    axis = "turn" if "turn" in var.dims else "context_tokens"
    check_cell(ds, cell, ("gpu", "model", "tp"))
    marker = match(ds, axis, cell.pop(axis), axis) if axis in cell else None
    m = pick(ds, "model", model)
    tps = grid_values(ds, "tp")
    if by == "tp":
        fixed_g, fixed_tp = pick(ds, "gpu", gpu), None
        lines = tps
        highlight = match(ds, "tp", tp, "tp") if tp is not None else max(tps)
    else:
        fixed_g = None
        lines = grid_values(ds, "gpu")
        highlight = pick(ds, "gpu", gpu)
        fixed_tp = match(ds, "tp", tp, "tp") if tp is not None else max(tps)
    wall = var.sel(model=m, **fixed(ds, "concurrency_max", ("gpu", "model", "tp", axis), cell))
    wall = wall.sortby(axis)  # a grid given out of order is drawn as a line left to right
    xvals = np.asarray(wall[axis].values, dtype=float)

    import matplotlib

    own = ax is None
    fig, ax = axes(ax, size, dpi)
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
            _label_points(ax, axis, xvals, y, color)
    what = "turn" if axis == "turn" else "context"
    if marker is not None:
        ax.axvline(float(marker), color="0.4", linestyle=":", linewidth=1.2, label=f"selected {what} {num(marker)}")
    # C_max ~ 1 / L: against the context, log-log axes (from a 4x span) make the wall a straight line
    against_context = axis == "context_tokens" and xvals.min() > 0 and xvals.max() / xvals.min() >= 4
    log_if_decades(ax, ys, "y", span=4.0 if against_context else 10.0)
    ax.margins(y=0.12)  # room for the labels above the points
    _x_axis(ax, ds, axis, xvals)
    ax.set_ylabel("sessions that fit in KV memory [sessions]")
    grids(ax)
    ax.legend(fontsize=8, title="TP degree" if by == "tp" else f"GPU (TP {fixed_tp})", title_fontsize=8)
    where = f"{m} on {fixed_g}" if by == "tp" else f"{m} at TP {fixed_tp}"
    note = _DEMAND_NOTES.get(ds.attrs.get("kv_demand"), "")
    titles(fig, ax, own, f"KV memory wall: sessions that fit vs {what}: {where}",
           f"{note + chr(10) if note else ''}seed 000 Step 4 and section 4.3 (eq. 5): "
           "KV memory admits fewer sessions as the context grows")
    return fig
