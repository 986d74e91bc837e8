"""Plots of given datasets: the seed article's figures as PNG files (seed 000 sections 1.2, 3 and 4).

- `plot_frontier` (`jaxpareto.plot.frontier`): the throughput/interactivity Pareto frontier over
  (TP, concurrency), one curve per think time Z (seed 000 section 1.2's axes; Step 2 and
  section 4.1: "Z shifts the frontier").
- `plot_cache_comparison` (`jaxpareto.plot.cache`): standard serving (Z = 0, no prefix cache)
  against an agent pausing Z with and without prefix caching (seed 000 Step 5 and section 4.2).
- `plot_memory_wall` (`jaxpareto.plot.memory`): the sessions the KV memory admits, turn by turn
  or against the context (seed 000 Step 4 and section 4.3, eq. 5).
- `save_plots` (`jaxpareto.plot.save`): every plot a dataset supports, written into a folder
  (``jaxpareto plot``, whose arguments `jaxpareto.cli.plot` reads).
- `unsupported` (`jaxpareto.plot.support`): why a dataset cannot give a plot.

The package draws only: it computes no sweep (`jaxpareto.dataset.comparison` computes the small
sweep a cache comparison needs when there is no dataset). matplotlib is imported only when a plot
is drawn, so ``import jaxpareto`` does not pay for it. Figures are `matplotlib.figure.Figure`
objects on the Agg canvas (no display, no pyplot state); saved at its own dpi, a figure is
width x dpi by height x dpi pixels, each rounded to the nearest whole pixel (halves up):
8.3 x 5.1 inches at 72.5 dpi give 602 x 370 pixels.

The frontier and cache plots also draw from a reduced store (``jaxpareto sweep --reduce``, which
keeps only each cell's Pareto front over TP x concurrency): its stored fronts are the curves, the
same points `pareto_front` finds in the full sweep, unless ``--max-front-points`` cut a front (the
legend then says how many points are drawn). The memory wall needs the full sweep.
"""

from jaxpareto.plot._figure import DEFAULT_DPI, DEFAULT_SIZE
from jaxpareto.plot._select import selectable_axes, selection_value
from jaxpareto.plot.cache import plot_cache_comparison
from jaxpareto.plot.frontier import plot_frontier
from jaxpareto.plot.memory import plot_memory_wall
from jaxpareto.plot.save import save_plots
from jaxpareto.plot.support import PLOTS, unsupported

__all__ = [
    "DEFAULT_DPI", "DEFAULT_SIZE", "PLOTS",
    "plot_cache_comparison", "plot_frontier", "plot_memory_wall", "save_plots", "selectable_axes", "selection_value",
    "unsupported",
]
