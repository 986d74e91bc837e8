"""Shared base for the validated user-facing definitions (hardware, model)."""

from __future__ import annotations

import math

import pydantic


class Definition(pydantic.BaseModel):
    """A frozen, validated definition: unknown fields and wrong types are errors."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)

    def to_dict(self) -> dict:
        """Plain dict of the set fields (sources included), for provenance attributes."""
        return self.model_dump(exclude_none=True)


def finite_positive(value: float | None, field: str) -> float | None:
    """Check that an optional number is finite and > 0."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{field} must be a finite number > 0, got {value!r}")
    return value
