"""``jaxpareto validate`` (moved here from the measure package by the restructuring)."""

from jaxpareto.measure.validate import add_validate_parser as register  # noqa: F401
