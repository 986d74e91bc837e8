"""``jaxpareto calibrate`` (moved here from the measure package by the restructuring)."""

from jaxpareto.measure.calibrate import add_calibrate_parser as register  # noqa: F401
