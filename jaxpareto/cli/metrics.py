"""``jaxpareto metrics`` (moved here from the measure package by the restructuring)."""

from jaxpareto.measure.metrics import add_metrics_parser as register  # noqa: F401
