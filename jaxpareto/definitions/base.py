"""Shared base for the validated user-facing definitions (hardware, model)."""

from __future__ import annotations

import math

import numpy as np
import pydantic

from jaxpareto.definitions.errors import JaxparetoError


def describe_validation_error(error: pydantic.ValidationError, prefix: str, allowed=()) -> list[str]:
    """One line per problem: ``prefix.field: message`` without pydantic's boilerplate; an unknown
    field also lists the ``allowed`` ones (a typo's correction)."""
    lines = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and allowed:
            message += f" (allowed keys: {', '.join(allowed)})"
        lines.append(f"{prefix}.{loc}: {message}" if loc else f"{prefix}: {message}")
    return list(dict.fromkeys(lines))


class Definition(pydantic.BaseModel):
    """A frozen, validated definition: unknown fields and wrong types are errors.

    NumPy scalars are accepted as numbers. Invalid input raises `JaxparetoError` (a
    ValueError) naming the class and the field.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)

    def __init__(self, **data):
        try:
            super().__init__(**data)
        except pydantic.ValidationError as error:
            lines = describe_validation_error(error, type(self).__name__, allowed=type(self).model_fields)
            # the first problem's field leads; every other problem keeps its own field's name
            field, first = lines[0].split(": ", 1)
            raise JaxparetoError(field, "; ".join([first, *lines[1:]])) from None

    @pydantic.model_validator(mode="before")
    @classmethod
    def _numpy_scalars(cls, data):
        if isinstance(data, dict):
            return {k: v.item() if isinstance(v, np.generic) else v for k, v in data.items()}
        return data

    def to_dict(self) -> dict:
        """Plain dict of the set fields (sources included), for provenance attributes."""
        return self.model_dump(exclude_none=True)


def finite_positive(value: float | None, field: str) -> float | None:
    """Check that an optional number is finite and > 0."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a finite number > 0, got {value!r}")
    return value
