"""Errors raised by jaxpareto before any computation starts."""

from __future__ import annotations

from collections.abc import Iterable


class JaxparetoError(ValueError):
    """Invalid input: names the offending field and, where known, the allowed values."""

    def __init__(self, field: str, problem: str, allowed: Iterable[object] | str | None = None):
        self.field = field
        self.problem = problem
        if allowed is None:
            self.allowed = None
        elif isinstance(allowed, str):
            self.allowed = allowed
        else:
            self.allowed = ", ".join(str(a) for a in allowed)
        message = f"{field}: {problem}"
        if self.allowed:
            message += f" (allowed: {self.allowed})"
        super().__init__(message)
