"""Calibration files: fitted efficiency factors in TOML, as ``jaxpareto calibrate`` writes them.

```toml
[efficiency]
eta_prefill = 0.52
eta_decode = 0.61
decode_overhead_ms = 4.1

[model]
prefill_model = "shared"
```

``[efficiency]``: any subset of `jaxpareto.definitions.settings.Efficiency`'s fields. ``[model]`` (optional):
the model options the factors were fitted with, which a sweep using the file adopts (factors
fitted to one model do not transfer to another). Other tables (``[fit]``, provenance) are
ignored.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import PREFILL_MODELS
from jaxpareto.definitions.settings import Efficiency

EFFICIENCY_FIELDS = tuple(f.name for f in dataclasses.fields(Efficiency))
#: [model] keys a calibration file may set, and their allowed values.
MODEL_FIELDS = {"prefill_model": PREFILL_MODELS}


def load_calibration(source: str | Path | Mapping) -> dict[str, float]:
    """The ``[efficiency]`` values of a calibration file (or of a mapping holding that table).

    Raises:
        JaxparetoError: the file is missing, unreadable or not TOML, has no ``[efficiency]``
            table, or names a field `Efficiency` does not have (the allowed ones are listed).
    """
    data, where = _read(source)
    table = data.get("efficiency")
    if not isinstance(table, Mapping):
        raise JaxparetoError("calibration", f"{where} has no [efficiency] table")
    for key in table:
        if key not in EFFICIENCY_FIELDS:
            raise JaxparetoError(f"calibration.efficiency.{key}", "unknown field", EFFICIENCY_FIELDS)
    return dict(table)


def calibration_efficiency(source: str | Path | Mapping, base: Efficiency = Efficiency()) -> Efficiency:
    """The `Efficiency` of a calibration file: its ``[efficiency]`` values over ``base`` (default
    the seed's factors), checked.

    Raises:
        JaxparetoError: as `load_calibration`, or a value out of its field's bounds.
    """
    return dataclasses.replace(base, **load_calibration(source)).validate()


def calibration_options(source: str | Path | Mapping) -> dict[str, str]:
    """The ``[model]`` table of a calibration file: the options its factors were fitted with.

    Raises:
        JaxparetoError: the file is missing, unreadable or not TOML; ``[model]`` is not a table,
            or has an unknown key or value.
    """
    data, where = _read(source)
    table = data.get("model", {})
    if not isinstance(table, Mapping):
        raise JaxparetoError("calibration.model", f"{where}: [model] must be a table")
    for key, value in table.items():
        if key not in MODEL_FIELDS:
            raise JaxparetoError(f"calibration.model.{key}", "unknown field", tuple(MODEL_FIELDS))
        if value not in MODEL_FIELDS[key]:
            raise JaxparetoError(f"calibration.model.{key}", f"unknown value {value!r}", MODEL_FIELDS[key])
    return dict(table)


def _read(source) -> tuple[dict, str]:
    if isinstance(source, Mapping):
        return dict(source), "calibration"
    path = Path(source)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), str(path)
    except FileNotFoundError:
        raise JaxparetoError("calibration", f"no such file: {path}") from None
    except (IsADirectoryError, PermissionError) as error:
        raise JaxparetoError("calibration", f"cannot read {path}: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise JaxparetoError("calibration", f"{path} is not TOML: {error}") from None
