"""``jaxpareto plot PATH.zarr --out DIR [--sel AXIS=VALUE ...] [--dpi N] [--size WxH]``.

Reads the arguments, opens the stored sweep and prints what `jaxpareto.plot.save_plots` writes
or skips; the drawing is the plot package's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import xarray as xr

from jaxpareto.cli._common import open_sweep_store
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.plot import DEFAULT_DPI, DEFAULT_SIZE, save_plots, selectable_axes, selection_value

_DESCRIPTION = (
    "Write the plots a stored sweep supports into a folder, one file per plot and GPU x model, printing each path "
    "(frontier_GPU_MODEL.png, cache_GPU_MODEL.png, memory_wall_GPU_MODEL.png, memory_wall_MODEL_by_gpu.png); plots "
    "needing dimensions the sweep lacks are skipped with the reason. A reduced store (`sweep --reduce`) gives the "
    "frontier and cache plots from its stored per-cell fronts; the memory wall needs the full sweep. Exit status 0, "
    "1 when no plot could be drawn, 2 on bad arguments.")


def _parse_size(text: str) -> tuple[float, float]:
    """``WIDTHxHEIGHT`` [inches] as (width, height); JaxparetoError when it is not two numbers."""
    w, sep, h = text.lower().partition("x")
    try:
        if not sep:
            raise ValueError
        return float(w), float(h)
    except ValueError:
        raise JaxparetoError("--size", f"expected WIDTHxHEIGHT in inches, e.g. 8x5, got {text!r}") from None


def _parse_sel(items: Sequence[str], ds: xr.Dataset) -> dict:
    """``AXIS=VALUE`` items as {axis: grid value}, each checked against ``ds``'s grid."""
    selection = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise JaxparetoError("--sel", f"expected AXIS=VALUE, got {item!r}", selectable_axes(ds))
        if key in selection:
            raise JaxparetoError(f"--sel {key}", "selected twice")
        selection[key] = selection_value(ds, key, raw.strip(), f"--sel {key}")
    return selection


def _cmd_plot(args: argparse.Namespace) -> int:
    size = _parse_size(args.size)
    ds = open_sweep_store(args.store)  # a reduced store too (save_plots skips what it cannot draw); never an
    # interrupted one, nor an optimisation's
    sel = _parse_sel(args.sel or [], ds)
    written, _ = save_plots(ds, args.out, size=size, dpi=args.dpi, sel=sel, echo=print, overwrite=args.overwrite)
    if not written:
        print("jaxpareto: no plot could be drawn from this dataset", flush=True)
        return 1
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``plot`` sub-command to ``subparsers`` (an argparse sub-parsers action).

    Args:
        subparsers: what ``ArgumentParser.add_subparsers`` returned.

    Returns:
        The ``plot`` parser; its ``func`` runs the command and returns the exit status (0, 1 when
        no plot could be drawn; JaxparetoError on bad arguments, which ``jaxpareto`` turns into 2).
    """
    p = subparsers.add_parser(
        "plot", help="draw the frontier, cache-comparison and KV memory-wall plots of a stored sweep as PNGs",
        description=_DESCRIPTION)
    p.add_argument("store", help="zarr store written by `jaxpareto sweep --out` (with or without --reduce)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the PNG files (created if missing)")
    p.add_argument("--sel", action="append", metavar="AXIS=VALUE",
                   help="gpu/model: draw only that one; other axes: the cell (default: the sweep's headline, else "
                        "the first value); think_time_s/hit_rate > 0 also set the cache comparison's agent "
                        "(repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace plots of the same names already in --out")
    p.add_argument("--dpi", type=float, default=DEFAULT_DPI, help=f"pixels per inch (default {DEFAULT_DPI})")
    p.add_argument("--size", default=f"{DEFAULT_SIZE[0]:g}x{DEFAULT_SIZE[1]:g}", metavar="WxH",
                   help="figure WIDTHxHEIGHT in inches (default %(default)s)")
    p.set_defaults(func=_cmd_plot)
    return p
