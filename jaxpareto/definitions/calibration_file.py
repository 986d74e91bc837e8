"""Calibration files: fitted efficiency factors in TOML, as ``jaxpareto calibrate`` writes them.

```toml
[efficiency]
eta_prefill = 0.52
eta_decode = 0.61
decode_overhead_ms = 4.1

[model]
prefill_model = "shared"
profile = "measured"
gemm_rate = "measured"   # absent: "peak" (files from before the key)
attention = "flops"      # absent: "profile" (files from before the key)
roofline = "operator"    # absent: "step" (files from before the key)

[engine.vllm]          # factors fitted per engine (optional); over [efficiency]
eta_decode = 0.55
```

``[efficiency]``: any subset of `jaxpareto.definitions.settings.Efficiency`'s fields. ``[model]`` (optional):
the model options the factors were fitted with, which a sweep using the file adopts (factors
fitted to one model do not transfer to another). ``[engine.NAME]`` (optional): the factors of
one serving engine (`jaxpareto.definitions.engine`), which a sweep's ``engine`` axis uses for
that engine. ``[fit]`` records how the factors were fitted; a sweep ignores it, and ``jaxpareto
validate`` reads its ``arrivals`` (`calibration_arrivals`: how the fit evaluated the measured
runs) to evaluate them the same way.

A calibration is named by its path, or by the name of one that ships with jaxpareto
(`shipped_calibrations`: ``hopper-measured``, fitted on H100 and H200 runs only).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import tomllib
from collections.abc import Mapping
from pathlib import Path

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ARRIVALS, ATTENTION, GEMM_RATES, PREFILL_MODELS, PROFILES, ROOFLINES
from jaxpareto.definitions.settings import Efficiency

EFFICIENCY_FIELDS = tuple(f.name for f in dataclasses.fields(Efficiency))
#: [model] keys a calibration file may set, and their allowed values.
MODEL_FIELDS = {"prefill_model": PREFILL_MODELS, "profile": PROFILES, "gemm_rate": GEMM_RATES, "attention": ATTENTION,
                "roofline": ROOFLINES}


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
    A file without ``gemm_rate`` was fitted at the datasheet peak (the key came later): "peak";
    one without ``attention``, with attention as its profile counts it: "profile"; one without
    ``roofline``, with the seed's one roofline per step: "step".

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
    return {"gemm_rate": "peak", "attention": "profile", "roofline": "step", **table}


def calibration_arrivals(source: str | Path | Mapping) -> str:
    """How a calibration's fit evaluated the measured runs: ``[fit] arrivals`` of the file, one of
    `jaxpareto.definitions.options.ARRIVALS` ("staggered" for a file without the key): the
    closed loop's staggered or synchronised turns, or "poisson" (the server rows in the open
    loop, as MLPerf's server scenario runs). ``jaxpareto validate`` evaluates the rows so; a sweep
    does not adopt it (it describes the measured runs, not the model the factors need).

    Raises:
        JaxparetoError: the file is missing, unreadable or not TOML; ``[fit]`` is not a table,
            or its ``arrivals`` is not one of `jaxpareto.definitions.options.ARRIVALS`.
    """
    data, where = _read(source)
    table = data.get("fit", {})
    if not isinstance(table, Mapping):
        raise JaxparetoError("calibration.fit", f"{where}: [fit] must be a table")
    value = table.get("arrivals", "staggered")
    if value not in ARRIVALS:
        raise JaxparetoError("calibration.fit.arrivals", f"unknown value {value!r}", ARRIVALS)
    return value


def calibration_engines(source: str | Path | Mapping) -> dict[str, dict[str, float]]:
    """The ``[engine.NAME]`` tables of a calibration file: engine name -> its factors, each over
    the file's ``[efficiency]`` (so a table holds every factor of that engine).

    Raises:
        JaxparetoError: as `load_calibration`; an engine table that is not a table, or names a
            field `Efficiency` does not have, or a value out of bounds.
    """
    data, where = _read(source)
    tables = data.get("engine", {})
    if not isinstance(tables, Mapping):
        raise JaxparetoError("calibration.engine", f"{where}: [engine] must hold [engine.NAME] tables")
    base = load_calibration(source) if "efficiency" in data else {}
    out = {}
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise JaxparetoError(f"calibration.engine.{name}", "must be a table of efficiency factors")
        for key in table:
            if key not in EFFICIENCY_FIELDS:
                raise JaxparetoError(f"calibration.engine.{name}.{key}", "unknown field", EFFICIENCY_FIELDS)
        factors = {**base, **table}
        Efficiency(**factors).validate()
        out[name] = factors
    return out


def calibration_factors(source: str | Path | Mapping, engines, base: Efficiency = Efficiency()) -> dict:
    """engine name -> its `Efficiency` under a calibration file: the engine's own table where the
    file has one, else the file's ``[efficiency]`` (over ``base``), for each of ``engines``.

    Raises:
        JaxparetoError: as `calibration_engines` and `calibration_efficiency`.
    """
    shared = calibration_efficiency(source, base)
    own = calibration_engines(source)
    return {name: dataclasses.replace(base, **own[name]).validate() if name in own else shared for name in engines}


def shipped_calibrations() -> dict[str, Path]:
    """The calibration files that ship with jaxpareto, by name (``jaxpareto/data/calibrations``)."""
    folder = Path(str(importlib.resources.files("jaxpareto").joinpath("data/calibrations")))
    return {p.stem: p for p in sorted(folder.glob("*.toml"))}


def _read(source) -> tuple[dict, str]:
    if isinstance(source, Mapping):
        return dict(source), "calibration"
    path = Path(source)
    if not path.exists() and str(source) in shipped_calibrations():  # a shipped calibration by name
        path = shipped_calibrations()[str(source)]
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), str(path)
    except FileNotFoundError:
        raise JaxparetoError("calibration", f"no such file, nor a shipped calibration: {path}",
                             tuple(shipped_calibrations())) from None
    except (IsADirectoryError, PermissionError) as error:
        raise JaxparetoError("calibration", f"cannot read {path}: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise JaxparetoError("calibration", f"{path} is not TOML: {error}") from None
