"""Figures, axes, titles and number formats shared by every plot.

matplotlib is imported inside the functions that draw, so importing this module does not pay for it.
Figures are `matplotlib.figure.Figure` objects on the Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import xarray as xr

from jaxpareto.definitions.errors import JaxparetoError

DEFAULT_SIZE = (8.0, 5.0)  # inches
DEFAULT_DPI = 120  # 960 x 600 pixels


def check_figure(size, dpi) -> tuple[tuple[float, float], float]:
    """Check a figure's size and resolution.

    Args:
        size: (width, height) [inches], each 0.5 to 100.
        dpi: resolution [pixels per inch], 10 to 1200.

    Returns:
        ((width, height) [inches], dpi [pixels per inch]) as floats.

    Raises:
        JaxparetoError: a size or dpi that is not a number or out of range, or a figure wider or
            taller than 32,768 pixels.
    """
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


def axes(ax, size, dpi):
    """The caller's axes with their figure, or a new Agg figure of ``size`` inches at ``dpi``."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    size, dpi = check_figure(size, dpi)
    # Agg truncates width x dpi to whole pixels (8.3 in at 72.5 dpi: 601.75 -> 601; a product
    # such as 4.1 * 30 = 122.99999999999999 in floating point could lose one): ask for the
    # nearest whole number of pixels plus a hair, far above float error and far below a pixel,
    # so that truncating lands on it.
    figsize = tuple((math.floor(v * dpi + 0.5) + 1e-6) / dpi for v in size)
    fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def titles(fig, ax, own: bool, main: str, sub: str) -> None:
    """A bold figure title over a grey axes title on a figure of our own, else one axes title
    (each line of the subtitle wrapped to the axes' width)."""
    import textwrap

    width = max(40, int(ax.get_position().width * fig.get_figwidth() * 72 / 5.4))  # ~5.4 pt per 9-pt char
    sub = "\n".join(wrapped for line in sub.split("\n") for wrapped in textwrap.wrap(line, width) or [""])
    if own:
        fig.suptitle(main, fontsize=13, fontweight="bold")
        ax.set_title(sub, fontsize=9, color="0.3")
    else:
        ax.set_title(f"{main}\n{sub}", fontsize=10)


def plain(value, _pos=None) -> str:
    """Tick label without powers of ten: 0.5, 20, 1,000, 100,000."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def log_if_decades(ax, values, axis: str, span: float = 10.0) -> None:
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
    target.set_major_formatter(FuncFormatter(plain))
    if v.max() / v.min() < 100:
        target.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 5.0)))
        target.set_minor_formatter(FuncFormatter(plain))
    else:
        target.set_minor_formatter(NullFormatter())


def grids(ax) -> None:
    """Major and fainter minor grid lines."""
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def num(value) -> str:
    """A number for a label: whole thousands with commas (65,536), else the shortest form (0.9)."""
    value = float(value)
    if value == int(value) and abs(value) >= 1000:
        return f"{int(value):,}"
    return f"{value:g}"


def describe(ds: xr.Dataset, cell: Mapping) -> str:
    """The fixed cell and workload in words, e.g. 'context 16,384 tokens, hit rate 0.9, OSL 128'."""
    parts = []
    for key, value in cell.items():
        if key == "context_tokens":
            parts.append(f"context {num(value)} tokens")
        elif key == "hit_rate":
            parts.append(f"prefix-cache hit rate {num(value)}")
        elif key == "think_time_s":
            parts.append(f"think time Z = {num(value)} s")
        elif key == "turn":
            context = float(ds.context_tokens.sel(turn=value).values) if "context_tokens" in ds.coords else None
            parts.append(f"turn {value}" + (f" (context {num(context)} tokens)" if context is not None else ""))
        elif key not in ("gpu", "model"):
            parts.append(f"{key} {value}")
    if "osl" in ds.attrs:
        parts.append(f"OSL {num(ds.attrs['osl'])}")
    return ", ".join(parts)
