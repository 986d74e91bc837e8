"""``jaxpareto plot`` (moved here from the plot package by the restructuring)."""

from jaxpareto.plot.draw import add_plot_parser as register  # noqa: F401
