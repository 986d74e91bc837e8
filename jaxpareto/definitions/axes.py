"""The grid's axes: one table that the validation, the spec reader, the dataset schema and the
mapper all read (README, "The dataset"), and `GridPoint`, one configuration of it.

A new axis is one `Axis` row here plus the physics that reads ``point.<name>``: the mapper
builds every `GridPoint` from the table, so nothing between the two needs to change.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import jax
import numpy as np

from jaxpareto.definitions.catalog import resolve_gpu, resolve_model
from jaxpareto.definitions.engine import SEED_ENGINE, Engine, resolve_engine
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.model import Model

# Integer axes are carried as floats in the float32 path: exact below 2**24.
MAX_INTEGER = 2**24


@dataclasses.dataclass(frozen=True)
class Axis:
    """One axis of the grid.

    Attributes:
        name: dimension name in the dataset and keyword of `jaxpareto.sweep`.
        units: the ``units`` attribute of the coordinate.
        long_name: the ``long_name`` attribute of the coordinate.
        integer: values must be whole numbers (stored as int64 coordinates).
        low, high: bounds of a numeric axis (inclusive, but ``low`` excluded when
            ``low_inclusive`` is False).
        default: the value `jaxpareto.sweep` uses when the axis is not given; None: required.
        resolve: for an axis of named definitions (GPU, model): ``resolve(item, custom)`` turns a
            name or definition into the definition; None for a numeric axis.
    """

    name: str
    units: str
    long_name: str
    integer: bool = False
    low: float = -math.inf
    high: float = math.inf
    default: object = None
    resolve: Callable | None = None
    low_inclusive: bool = True

    @property
    def categorical(self) -> bool:
        """Values are named definitions (carried into the model as their parameter pytrees)."""
        return self.resolve is not None

    @property
    def dtype(self) -> str:
        """The coordinate's dtype in the dataset."""
        return "str" if self.categorical else "int64" if self.integer else "float64"

    def numbers(self, value) -> np.ndarray:
        """Validate numeric axis values into a 1-D array (int64 or float64).

        Raises:
            JaxparetoError: non-numeric, NaN/inf, non-integer where an integer is needed, out of
                range, empty, or duplicated values; the message names the axis.
        """
        out = [check_number(self.name, v, low=self.low, high=self.high, integer=self.integer,
                            low_inclusive=self.low_inclusive)
               for v in as_list(self.name, value)]
        unique(self.name, out)
        return np.asarray(out, dtype=np.int64 if self.integer else np.float64)

    def definitions(self, value, custom: Mapping | None = None) -> list:
        """Resolve a categorical axis' names or definitions.

        Raises:
            JaxparetoError: unknown names (listing the known ones) or duplicates.
        """
        items = [self.resolve(item, custom) for item in as_list(self.name, value)]
        unique(self.name, [item.name for item in items])
        return items


AXIS_TABLE: tuple[Axis, ...] = (
    Axis("gpu", "1", "GPU type", resolve=resolve_gpu),
    Axis("model", "1", "model", resolve=resolve_model),
    Axis("engine", "1", "serving engine", default=SEED_ENGINE, resolve=resolve_engine),
    Axis("tp", "GPUs", "tensor-parallel degree G", integer=True, low=1, high=MAX_INTEGER),
    Axis("concurrency", "sessions", "concurrent agent sessions offered C", integer=True, low=1, high=MAX_INTEGER),
    Axis("think_time_s", "s", "pause between turns Z (tool calls, user)", low=0, default=0.0),
    Axis("context_tokens", "tokens", "context length of the turn L", integer=True, low=1, high=MAX_INTEGER,
         default=16384),
    Axis("hit_rate", "1", "prefix-cache hit rate h", low=0, high=1, default=0.0),
)
# The open loop's load (arrivals="poisson") takes the place of concurrency in the table.
REQUEST_RATE = Axis("request_rate", "requests/s", "Poisson arrival rate of requests (turns) per server lambda",
                    low=0, low_inclusive=False)
LOAD_AXES = {"closed": "concurrency", "open": "request_rate"}
# A replica's parallel layout beyond one TP group (`jaxpareto.physics.layout`), after tp: in a
# grid whenever one of them is given. A replica runs on tp x pp x dp_attention GPUs.
LAYOUT_AXES: tuple[Axis, ...] = (
    Axis("pp", "stages", "pipeline-parallel stages per replica, each holding a share of the layers", integer=True,
         low=1, high=MAX_INTEGER, default=1),
    Axis("ep", "GPUs", "expert-parallel degree: GPU groups the routed experts are spread over whole "
         "(1: every expert split over the replica's GPUs)", integer=True, low=1, high=MAX_INTEGER, default=1),
    Axis("dp_attention", "ranks", "attention data-parallel ranks per replica, each a TP group of tp GPUs "
         "holding its own sessions' KV", integer=True, low=1, high=MAX_INTEGER, default=1),
    Axis("gpu_budget", "GPUs", "GPUs the replicas fill, budget / (tp x pp x dp_attention) of them (0: no budget)",
         integer=True, low=0, high=MAX_INTEGER, default=0),
)
# Disaggregated serving's pools (serving="disaggregated" or "conditional"), after tp, which is
# then the decode workers' TP (`jaxpareto.physics.disaggregation`).
DISAGGREGATION_AXES: tuple[Axis, ...] = (
    Axis("prefill_tp", "GPUs", "prefill workers' tensor-parallel degree (0: the decode workers' tp)", integer=True,
         low=0, high=MAX_INTEGER, default=0),
    Axis("prefill_workers", "workers", "prefill workers per replica", integer=True, low=1, high=MAX_INTEGER,
         default=1),
    Axis("decode_workers", "workers", "decode workers per replica", integer=True, low=1, high=MAX_INTEGER,
         default=1),
)


def axis_table(open_loop: bool = False, disaggregated: bool = False, layout: bool = False) -> tuple[Axis, ...]:
    """The grid's axes for a load model: the closed loop's `AXIS_TABLE`, or, for the open loop
    (``arrivals="poisson"``), the same with ``request_rate`` in place of ``concurrency``; with
    ``layout``, `LAYOUT_AXES` follow ``tp``; under disaggregated serving, `DISAGGREGATION_AXES`
    follow ``tp``."""
    table = AXIS_TABLE if not open_loop else \
        tuple(REQUEST_RATE if axis.name == "concurrency" else axis for axis in AXIS_TABLE)
    at = [a.name for a in table].index("tp") + 1
    inserted = (*(LAYOUT_AXES if layout else ()), *(DISAGGREGATION_AXES if disaggregated else ()))
    return (*table[:at], *inserted, *table[at:])


def load_axis(dims) -> str:
    """The load dimension among ``dims`` (a dataset's): ``concurrency`` or ``request_rate``."""
    return LOAD_AXES["open"] if LOAD_AXES["open"] in dims else LOAD_AXES["closed"]


def dataset_table(dims) -> tuple[Axis, ...]:
    """The axis table whose dimensions ``dims`` (a dataset's) are."""
    return axis_table(load_axis(dims) == LOAD_AXES["open"], DISAGGREGATION_AXES[0].name in dims,
                      LAYOUT_AXES[0].name in dims)


# Every row of every table by name (the closed loop's first).
AXIS_BY_NAME: dict[str, Axis] = {axis.name: axis for axis in (*AXIS_TABLE, REQUEST_RATE, *LAYOUT_AXES,
                                                               *DISAGGREGATION_AXES)}
# What the searches (optimiser, sizing) decide for a scenario, and their default choices.
DECIDED_AXES: tuple[str, ...] = ("tp", "concurrency")
TP_CHOICES: tuple[int, ...] = (1, 2, 4, 8)
CONCURRENCY_RANGE: tuple[int, int] = (1, 1024)
# The grid's dimensions, in the dataset's order (docs/model.md).
AXES: tuple[str, ...] = tuple(axis.name for axis in AXIS_TABLE)
NUMERIC_AXES: tuple[str, ...] = tuple(axis.name for axis in AXIS_TABLE if not axis.categorical)
INTEGER_AXES: tuple[str, ...] = tuple(axis.name for axis in AXIS_TABLE if axis.integer)
SCENARIO_AXES: tuple[str, ...] = tuple(a for a in AXES if a not in DECIDED_AXES)


def coordinate_attrs(name: str, table: Sequence[Axis] | None = None) -> dict[str, str]:
    """The ``units`` and ``long_name`` attributes of an axis' coordinate (any table's row)."""
    axis = AXIS_BY_NAME[name] if table is None else {a.name: a for a in table}[name]
    return {"units": axis.units, "long_name": axis.long_name}


def as_list(field: str, value) -> list:
    """A scalar as a one-element list, a sequence as a list.

    Raises:
        JaxparetoError: an empty sequence.
    """
    if isinstance(value, (str, bytes, Hardware, Model, Engine)) or np.ndim(value) == 0:
        return [value]
    values = list(value)
    if not values:
        raise JaxparetoError(field, "must not be empty")
    return values


def unique(field: str, keys: Sequence) -> None:
    """Raises JaxparetoError naming ``field`` when a key repeats."""
    seen = set()
    for key in keys:
        if key in seen:
            raise JaxparetoError(field, f"duplicate value {key!r}; axis values must be unique")
        seen.add(key)


def grid_axes(values: Mapping[str, object], custom: Mapping[str, Mapping] | None = None,
              table: Sequence[Axis] = AXIS_TABLE) -> tuple[dict[str, list], dict[str, np.ndarray]]:
    """Resolve names and validate every axis of the table.

    Args:
        values: axis name -> a scalar or a sequence; a missing axis takes its ``default``.
        custom: categorical axis name -> {name: definition} that the names may refer to.
        table: the axis table.

    Returns:
        ({categorical axis: definitions}, {numeric axis: 1-D values}).

    Raises:
        JaxparetoError: naming the axis; unknown names list the known ones; a required axis missing.
    """
    custom = custom or {}
    definitions, numbers = {}, {}
    for axis in table:
        value = values.get(axis.name, axis.default)
        if value is None:
            raise JaxparetoError(axis.name, "is required")
        if axis.categorical:
            definitions[axis.name] = axis.definitions(value, custom.get(axis.name))
        else:
            numbers[axis.name] = axis.numbers(value)
    return definitions, numbers


class GridPoint(Mapping):
    """One configuration: a value per axis, in the table's order (a pytree).

    Categorical axes hold their definition's parameters (``point.gpu`` a `HardwareParams`,
    ``point.model`` a `ModelParams`); numeric axes a scalar (``point.tp``, ``point.hit_rate``,
    ...). Stacked along a leading axis it is a batch of points, which is how the mapper
    carries them.
    """

    __slots__ = ("_values",)

    def __init__(self, **values):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "_values":  # copy and pickle probe before __init__
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"GridPoint has no axis {name!r} (axes: {', '.join(self._values)})") from None

    def __reduce__(self):
        return GridPoint._from_values, (self._values,)

    @staticmethod
    def _from_values(values: dict) -> "GridPoint":
        return GridPoint(**values)

    def __setattr__(self, name, value):
        raise AttributeError("GridPoint is immutable; use replace()")

    def __getitem__(self, name: str):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"GridPoint({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    def replace(self, **values) -> "GridPoint":
        """A copy with the given axes replaced."""
        return GridPoint(**{**self._values, **values})


jax.tree_util.register_pytree_with_keys(
    GridPoint,
    lambda p: (tuple((jax.tree_util.GetAttrKey(k), v) for k, v in p._values.items()), tuple(p._values)),
    lambda keys, leaves: GridPoint(**dict(zip(keys, leaves))),
    lambda p: (tuple(p._values.values()), tuple(p._values)),
)
