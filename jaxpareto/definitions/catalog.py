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

import jax
import numpy as np

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


#: How far a definition's parameters may stray from the catalog entry whose name it carries (the
#: rounding of a catalog's published figures against the same model read from its config.json).
SAME_NUMBERS_RTOL = 1e-3


def check_own_name(field: str, item: Hardware | Model) -> None:
    """Refuse a custom definition that carries a catalog entry's name but other numbers than its
    (the parameters the model computes with, beyond `SAME_NUMBERS_RTOL`): a dataset would label
    its results with the catalog's GPU or model. The same model read from its ``config.json``
    (unrounded parameter counts, other sources) passes.

    Raises:
        JaxparetoError: naming ``field`` and suggesting a name of its own.
    """
    known = (gpus() if isinstance(item, Hardware) else models()).get(item.name)
    if known is None or known == item:
        return
    ours, theirs = jax.tree_util.tree_flatten(item.to_params()), jax.tree_util.tree_flatten(known.to_params())
    same = ours[1] == theirs[1] and all(
        np.shape(a) == np.shape(b) and np.allclose(np.asarray(a, float), np.asarray(b, float), rtol=SAME_NUMBERS_RTOL,
                                                   atol=0.0, equal_nan=True)
        for a, b in zip(ours[0], theirs[0]))
    if not same:
        raise JaxparetoError(field, f"{item.name!r} is the catalog's name for one, with other numbers; give the "
                                    f"definition a name of its own (e.g. {item.name + '-custom'!r})")


def _resolve(item, kind, known: Mapping, extra: Mapping, field: str):
    if isinstance(item, kind):
        check_own_name(field, item)
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
        JaxparetoError: unknown name (the message lists the known names), wrong type, or a
            definition named like a catalog GPU with other numbers (`check_own_name`).
    """
    return _resolve(item, Hardware, gpus(), custom or {}, "gpu")


def resolve_model(item: str | Model, custom: Mapping[str, Model] | None = None) -> Model:
    """A `Model` from a catalog name, a custom name, or a definition.

    Raises:
        JaxparetoError: unknown name (the message lists the known names), wrong type, or a
            definition named like a catalog model with other numbers (`check_own_name`).
    """
    return _resolve(item, Model, models(), custom or {}, "model")
