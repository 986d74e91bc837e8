"""Calibration files: fitted efficiency factors in TOML, as ``jaxpareto calibrate`` writes them.

```toml
[efficiency]
eta_prefill = 0.52
eta_decode = 0.61
decode_overhead_ms = 4.1
```

Any subset of `jaxpareto.settings.Efficiency`'s fields; other tables (``[fit]``, provenance) are
ignored.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path

from jaxpareto.errors import JaxparetoError
from jaxpareto.settings import Efficiency

EFFICIENCY_FIELDS = tuple(f.name for f in dataclasses.fields(Efficiency))


def load_calibration(source: str | Path | Mapping) -> dict[str, float]:
    """The ``[efficiency]`` values of a calibration file (or of a mapping holding that table).

    Raises:
        JaxparetoError: the file is missing or not TOML, has no ``[efficiency]`` table, or names
            a field `Efficiency` does not have (the allowed ones are listed).
    """
    if isinstance(source, Mapping):
        data, where = dict(source), "calibration"
    else:
        path = Path(source)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise JaxparetoError("calibration", f"no such file: {path}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise JaxparetoError("calibration", f"{path} is not TOML: {error}") from None
        where = str(path)
    table = data.get("efficiency")
    if not isinstance(table, Mapping):
        raise JaxparetoError("calibration", f"{where} has no [efficiency] table")
    for key in table:
        if key not in EFFICIENCY_FIELDS:
            raise JaxparetoError(f"calibration.efficiency.{key}", "unknown field", EFFICIENCY_FIELDS)
    return dict(table)
