"""The shipped catalog of GPUs and models (``jaxpareto/data/catalog.toml``).

Every value in the file carries its source; `gpus()` and `models()` return validated
definitions keyed by name, and `resolve_gpu` / `resolve_model` turn a name or a definition into
a definition, with an error listing the known names for a typo.
"""

from __future__ import annotations

import functools
import importlib.resources
import tomllib
from collections.abc import Mapping

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.model import Model


@functools.cache
def _raw() -> dict:
    text = importlib.resources.files("jaxpareto").joinpath("data/catalog.toml").read_text()
    return tomllib.loads(text)


@functools.cache
def gpus() -> dict[str, Hardware]:
    """All catalog GPUs, by name (e.g. ``"h100-sxm"``)."""
    return {name: Hardware(name=name, **fields) for name, fields in _raw()["gpu"].items()}


@functools.cache
def models() -> dict[str, Model]:
    """All catalog models, by name (e.g. ``"llama-3.1-70b"``)."""
    return {name: Model(name=name, **fields) for name, fields in _raw()["model"].items()}


def _resolve(item, kind, known: Mapping, extra: Mapping, field: str):
    if isinstance(item, kind):
        return item
    if isinstance(item, str):
        if item in extra:
            return extra[item]
        if item in known:
            return known[item]
        raise JaxparetoError(field, f"unknown name {item!r}", sorted({*extra, *known}))
    raise JaxparetoError(field, f"expected a name or a jaxpareto.{kind.__name__}, got {type(item).__name__}")


def resolve_gpu(item: str | Hardware, custom: Mapping[str, Hardware] | None = None) -> Hardware:
    """A `Hardware` from a catalog name, a custom name, or a definition.

    Raises:
        JaxparetoError: unknown name (the message lists the known names) or wrong type.
    """
    return _resolve(item, Hardware, gpus(), custom or {}, "gpu")


def resolve_model(item: str | Model, custom: Mapping[str, Model] | None = None) -> Model:
    """A `Model` from a catalog name, a custom name, or a definition.

    Raises:
        JaxparetoError: unknown name (the message lists the known names) or wrong type.
    """
    return _resolve(item, Model, models(), custom or {}, "model")
