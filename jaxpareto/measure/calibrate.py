"""Calibration: fit the efficiency factors to the validation set by gradient descent (optax).

The seed's single η_d cannot fit real servers (TPOT about 2x too slow for a small model at low
load, too fast for a large one at TP 8), and its TTFT has no fixed costs. `calibrate` fits, by
default, η_p, η_d and the opt-in terms of `jaxpareto.definitions.settings.Efficiency` (per-step decode
overhead, per-request TTFT overhead, tensor-parallel all-reduce bandwidth scale and latency) to
a training split of `jaxpareto.measure.validation_set`, and reports the error on the held-out rows before
and after.

- **Split.** Rows are grouped by (source, metric); in each group a seeded permutation sends
  ``test_fraction`` of them (at least one of any group of two or more) to the held-out set.
- **Loss.** The absolute relative error |predicted / measured - 1| (smoothed below 1 %), the
  reported MAPE itself, averaged per metric and then over metrics, so the 65 throughput rows do
  not drown the 10-16 latency rows. A squared (log) error lets the few rows the model misses
  by 10x (DeepSeek-R1's TTFT under MLPerf's server load) pull every factor towards them; it
  fitted the training rows better in log terms but raised the held-out MAPE. Rows the model cannot
  score (infeasible, or a server load it cannot reach at the current factors) are left out.
  The KV-capacity row does not depend on the factors and is not fitted.
- **Parameters.** Each fitted field is low + (high - low) sigmoid(u) of an unconstrained u, with
  the physically plausible bounds of `BOUNDS`, so every step stays valid and a factor cannot
  absorb a missing piece of physics by taking an absurd value.
  The gradient comes from `jaxpareto.measure.predict.Predictor` (implicit differentiation through the
  closed loop and the Little's-law matching of server rows).
- **Optimiser.** Adam with a cosine-decayed step size (Kingma and Ba 2015; optax).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd

from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency
from jaxpareto.definitions.version import __version__
from jaxpareto.measure.predict import Predictor, validation_rows
from jaxpareto.measure.row_inputs import engine_names
from jaxpareto.measure.validate import comparison_table, mape_summary

#: Fitted by default: the seed's two efficiencies and the opt-in terms.
DEFAULT_FIELDS = ("eta_prefill", "eta_decode", "decode_overhead_ms", "ttft_overhead_ms", "allreduce_scale",
                  "allreduce_latency_us")
#: Fitted by default under the measured profile: the above and the per-layer step time.
MEASURED_FIELDS = DEFAULT_FIELDS + ("layer_overhead_us",)
#: field -> (low, high): the fitted value is low + (high - low) sigmoid(u), so it stays within
#: what is physically plausible: efficiencies in (0.05, 1]; a decode step's fixed overhead up to
#: 20 ms (vLLM 0.5 spent about 8 of its 13 ms per token on the CPU at light load, by its 2024
#: performance-update blog); a layer's small kernels up to 200 µs per step;
#: a request's up to 500 ms; the all-reduce at 0 to 2x the link's peak time and 0 to 50 µs
#: latency (NCCL's small-message all-reduce on NVLink takes about 10-30 µs).
BOUNDS = {
    "eta_prefill": (0.05, 1.0),
    "eta_decode": (0.05, 1.0),
    "elementwise_overhead": (1.0, 2.0),
    "decode_overhead_ms": (0.0, 20.0),
    "ttft_overhead_ms": (0.0, 500.0),
    "allreduce_scale": (0.0, 2.0),
    "allreduce_latency_us": (0.0, 50.0),
    "layer_overhead_us": (0.0, 200.0),
}
#: Where a term the seed leaves at 0 starts (a share of its range), so its gradient is not flat.
_OFF_START = 0.05
#: Smoothing of |log error| near 0 (a relative error of about 1 %).
_SMOOTH = 0.01
#: Metrics the factors change (the KV capacity does not).
FITTED_METRICS = ("output_tokens_per_s_total", "tpot_ms", "itl_ms", "ttft_ms")


def _forward(field: str, u):
    low, high = BOUNDS[field]
    return low + (high - low) * jax.nn.sigmoid(u)


def _inverse(field: str, value: float) -> float:
    low, high = BOUNDS[field]
    share = (value - low) / (high - low)
    share = min(max(share, _OFF_START), 1.0 - 1e-6)  # a term at 0 starts just inside its range
    return float(np.log(share / (1.0 - share)))


def split_rows(rows: pd.DataFrame, test_fraction: float = 0.3, seed: int = 0) -> np.ndarray:
    """Held-out mask (rows,): a seeded ``test_fraction`` of each (source, metric) group, rounded,
    but at least one row of any group of two or more (when ``test_fraction`` > 0) and never a
    group's last training row; 0 holds out nothing."""
    test = np.zeros(len(rows), bool)
    rng = np.random.default_rng(seed)
    for _, group in rows.reset_index(drop=True).groupby(["source", "metric"], sort=True):
        index = group.sort_values("id").index.to_numpy()
        n_test = int(round(test_fraction * len(index)))
        if test_fraction > 0 and len(index) >= 2:
            n_test = max(n_test, 1)
        n_test = min(n_test, len(index) - 1)
        test[rng.permutation(index)[:n_test]] = True
    return test


def train_mask(rows: pd.DataFrame, train: str | Mapping[str, Sequence[str]]) -> np.ndarray:
    """Rows the fit may read: those whose columns match every ``train`` filter (rows,).

    Args:
        rows: the validation rows.
        train: column -> allowed values, or the CLI form ``"gpu=h100-sxm,h200-sxm"`` (several
            filters separated by ``;``).

    Raises:
        JaxparetoError: an unknown column, a filter with no value, a value no row of its column
        has, a malformed filter (`_parsed_filter`), or filters no row matches together.
    """
    if isinstance(train, str):
        train = _parsed_filter(train)
    mask = np.ones(len(rows), bool)
    for column, values in train.items():
        if column not in rows.columns:
            raise JaxparetoError("train", f"unknown column {column!r}", sorted(rows.columns))
        if isinstance(values, str):
            values = [values]
        if not values:
            raise JaxparetoError("train", f"{column}= names no value")
        column_values = rows[column]
        if pd.api.types.is_numeric_dtype(column_values):  # "1" matches 1.0: compared as numbers
            try:
                wanted = [float(v) for v in values]
            except ValueError:
                raise JaxparetoError("train", f"{column} holds numbers, got {list(values)}") from None
        else:
            column_values, wanted = column_values.astype(str), [str(v) for v in values]
        # a value no row has is a typo, which would drop the rows meant silently
        missing = [given for given, value in zip(values, wanted) if not column_values.eq(value).any()]
        if missing:
            present = pd.unique(column_values)
            allowed = sorted(map(str, present)) if len(present) <= 40 else None
            raise JaxparetoError("train", f"no row has {column} = {missing[0]!r}", allowed)
        mask &= column_values.isin(wanted).to_numpy()
    if not mask.any():
        raise JaxparetoError("train", f"no row matches {dict(train)}")
    return mask


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
    """What `calibrate` found.

    Attributes:
        efficiency: the fitted factors (unfitted fields keep the starting values): one
            `Efficiency`, or engine name -> `Efficiency` when fitted per engine.
        start: the starting factors.
        fields: the fitted fields.
        test: held-out mask over the rows (rows,): rows the fit never read.
        before, after: `jaxpareto.measure.validate.validate` tables at ``start`` / ``efficiency``, with a
            ``split`` column ("train" / "test").
        loss: training loss before each step and after the last (steps + 1,).
        options: the model options the fit used (the same must be used with the factors).
        train: the training filter (column -> values), or None for a random split.
        uninformed: fitted fields no training row moves (their loss gradient exactly 0 where the
            fit started and where it ended, e.g. the all-reduce terms of an engine whose
            training rows all run on one GPU), as "<field>" or "<engine>: <field>": they keep
            their starting values, not the nudge a term at 0 starts the fit from.
    """

    efficiency: object
    start: Efficiency
    fields: tuple[str, ...]
    test: np.ndarray
    before: pd.DataFrame
    after: pd.DataFrame
    loss: np.ndarray
    options: ModelOptions
    train: dict | None = None
    uninformed: tuple[str, ...] = ()

    def summary(self) -> pd.DataFrame:
        """MAPE [%] per split and metric, before and after (rows scored in each)."""
        records = []
        for split in ("train", "test"):
            if not self.before["split"].eq(split).any():  # every row trains (test_fraction 0)
                continue
            for label, table in (("before", self.before), ("after", self.after)):
                part = mape_summary(table[table["split"].eq(split)])
                part = part[part["group"].isin(("metric", "all"))]
                for _, row in part.iterrows():
                    records.append({"split": split, "metric": row["name"], "when": label, "rows": row["rows"],
                                    "mape_pct": row["mape_pct"]})
        frame = pd.DataFrame(records)
        return frame.pivot_table(index=["split", "metric"], columns="when", values="mape_pct", sort=False)[
            ["before", "after"]].reset_index()

    def to_toml(self) -> str:
        """The calibration file: ``[efficiency]`` (read by ``--calibration`` / ``calibration=``),
        ``[engine.NAME]`` per engine when fitted per engine, ``[model]`` (the options the
        factors need) and ``[fit]`` (provenance and held-out errors; a sweep ignores it, and
        ``jaxpareto validate`` evaluates the rows with its ``arrivals``)."""
        def factor_lines(efficiency):
            return [f"{f.name} = {float(getattr(efficiency, f.name)):.6g}" for f in dataclasses.fields(Efficiency)]

        per_engine = not isinstance(self.efficiency, Efficiency)
        lines = [f"# jaxpareto calibrate ({__version__}), "
                 f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
                 "", "[efficiency]"]
        lines += factor_lines(self.start if per_engine else self.efficiency)
        if per_engine:
            for name, efficiency in self.efficiency.items():
                lines += ["", f"[engine.{name}]"] + factor_lines(efficiency)
        lines += ["", "[model]  # the model the factors were fitted with (a sweep using this file adopts it)",
                  f"prefill_model = \"{self.options.prefill_model}\"", f"profile = \"{self.options.profile}\"",
                  f"gemm_rate = \"{self.options.gemm_rate}\"", f"attention = \"{self.options.attention}\"",
                  f"roofline = \"{self.options.roofline}\"",
                  "", "[fit]",
                  f"fitted = [{', '.join(repr(f).replace(chr(39), chr(34)) for f in self.fields)}]",
                  f"train_rows = {int((~self.test).sum())}", f"test_rows = {int(self.test.sum())}",
                  f"final_train_loss = {float(self.loss[-1]):.6g}",
                  f"arrivals = \"{self.options.arrivals}\"  # how the fit evaluated the measured runs: "
                  "validate does so too; a sweep does not adopt it"]
        if self.train:
            lines.append("train = { " + ", ".join(f'{k} = [{", ".join(chr(34) + str(v) + chr(34) for v in vs)}]'
                                                  for k, vs in self.train.items()) + " }")
        for _, row in self.summary().iterrows():
            key = f"{row['split']}_{row['metric']}_mape_pct".replace("-", "_")
            lines.append(f"{key} = [{row['before']:.4g}, {row['after']:.4g}]  # before, after")
        return "\n".join(lines) + "\n"


def calibrate(rows=None, *, fields=None, start: Efficiency = Efficiency(), test_fraction: float = 0.3,
              seed: int = 0, steps: int = 400, learning_rate: float = 0.05,
              options: ModelOptions = ModelOptions(prefill_model="shared"), train=None,
              per_engine: bool | None = None) -> CalibrationResult:
    """Fit efficiency factors to the validation set (module docstring).

    Args:
        rows: `load_validation_set` DataFrame, a CSV path, or None for the shipped set.
        fields: `Efficiency` fields to fit (default `DEFAULT_FIELDS`; `MEASURED_FIELDS` under
            the measured profile).
        start: starting factors (default the seed's); fitted terms at 0 start slightly above it.
        test_fraction: share of each (source, metric) group held out, in [0, 0.9] (without
            ``train``).
        seed: the split's random seed.
        steps, learning_rate: Adam steps and initial step size.
        options: model options of the predictions (default the shared chunked-prefill engine,
            whose TTFT includes the wait for prefill capacity at a server load).
        train: the rows the fit may read, as a filter (`train_mask`, e.g. ``{"gpu":
            ["h100-sxm", "h200-sxm"]}``); every other row is held out and never evaluated by
            the fit. None: a random ``test_fraction`` split.
        per_engine: fit one set of factors per engine of the training rows (default: when the
            rows of fitted metrics name more than one; a KV-capacity row does not count).

    Returns:
        `CalibrationResult`.

    Raises:
        JaxparetoError: a field not in `BOUNDS`, one named twice, or none;
            ``test_fraction``, ``steps`` or ``learning_rate`` out of range; a bad
            ``start``, ``options`` or ``train``; a held-out row whose engine has no training
            rows (per engine); ``rows`` refused as by `jaxpareto.measure.predict.prediction_fn`.
    """
    if fields is None:
        fields = MEASURED_FIELDS if getattr(options, "profile", "seed") == "measured" else DEFAULT_FIELDS
    fields = tuple(fields)
    if len(set(fields)) != len(fields):
        raise JaxparetoError("fields", f"each factor once, got {list(fields)}", tuple(BOUNDS))
    for field in fields:
        if field not in BOUNDS:
            raise JaxparetoError("fields", f"cannot fit {field!r}", tuple(BOUNDS))
    if not fields:
        raise JaxparetoError("fields", "name at least one factor to fit", tuple(BOUNDS))
    test_fraction = check_number("test_fraction", test_fraction, low=0, high=0.9)
    steps = check_number("steps", steps, low=1, high=100_000, integer=True)
    learning_rate = check_number("learning_rate", learning_rate, low=0, low_inclusive=False)
    start = start.validate()
    rows = validation_rows(rows).reset_index(drop=True)
    if train is not None:
        test = ~train_mask(rows, train)
        train = _parsed_filter(train) if isinstance(train, str) else {k: list(v) for k, v in train.items()}
    else:
        test = split_rows(rows, test_fraction, seed)

    # the fit sees the training rows only: a held-out row cannot change it, whatever it holds
    fit_rows = rows[~test].reset_index(drop=True)
    predictor = Predictor(fit_rows, options=options)  # rows checked once, above
    engines = predictor.engines
    measured = fit_rows["value"].to_numpy(np.float64)
    supported = fit_rows["unsupported"].eq("") if "unsupported" in fit_rows else True
    fitted = (fit_rows["metric"].isin(FITTED_METRICS) & supported).to_numpy()  # rows that inform the factors
    informed = set(engine_names(fit_rows[fitted]))  # their engines (a KV-capacity row informs none)
    if per_engine is None:
        per_engine = len(informed) > 1
    # what cannot be fitted is refused before the fit, not found after it or written as factors
    if not fitted.any():
        raise JaxparetoError("train", "no training row of a fitted metric the model expresses: nothing to fit "
                                      "(a KV-capacity row informs no factor)", FITTED_METRICS)
    groups = engines if per_engine else ("all",)
    if per_engine:  # an engine's factors need a training row the model expresses, of a fitted metric
        held_out = rows[test & (rows["unsupported"].eq("") if "unsupported" in rows else True)]
        missing = sorted(set(engine_names(held_out)) - informed)
        if missing:
            raise JaxparetoError("train", f"held-out rows of engines {missing} have no training rows to fit "
                                          "their factors (none of a fitted metric that the model expresses)")
    metric_codes = pd.Categorical(fit_rows["metric"]).codes
    # each metric weighs the same: 1 / (its training rows) / (metrics present)
    counts = np.bincount(metric_codes, weights=fitted.astype(float), minlength=metric_codes.max() + 1)
    weights = np.where(fitted, 1.0 / np.maximum(counts[metric_codes], 1.0), 0.0)
    weights /= max(np.count_nonzero(counts), 1)
    server = jnp.asarray(fit_rows["load"].eq("server").to_numpy())

    def efficiency_of(u):
        def one(k):
            return dataclasses.replace(start, **{f: _forward(f, u[k, j]) for j, f in enumerate(fields)})
        return {name: one(k) for k, name in enumerate(groups)} if per_engine else one(0)

    def loss(u):
        prediction, details = predictor.evaluate(efficiency_of(u))
        scored = details["feasible"] & (details["reachable"] | ~server)
        scored = scored & jnp.isfinite(prediction) & (weights > 0)
        safe = jnp.where(scored, prediction, measured)  # double where: no NaN in gradients
        error = safe / measured - 1.0
        terms = jnp.where(scored, jnp.sqrt(error**2 + _SMOOTH**2) - _SMOOTH, 0.0)
        return jnp.sum(weights * terms) / jnp.maximum(jnp.sum(jnp.where(scored, weights, 0.0)), 1e-12)

    u0 = np.tile([_inverse(f, float(getattr(start, f))) for f in fields], (len(groups), 1))
    optimizer = optax.adam(optax.cosine_decay_schedule(learning_rate, steps, alpha=0.05))

    # a server row beyond the open loop's capacity at some factors of the fit is left unscored,
    # but its queueing terms' partial derivatives can be infinite there, which reverse mode
    # multiplies by the zero cotangent into NaN for every factor; forward mode drops them. The
    # factors are few (6 per engine group), so the open loop's gradient is formed forward (on
    # the shipped rows reverse mode gives the same fit, to the sixth digit).
    open_loop = getattr(options, "arrivals", "staggered") == "poisson"

    @jax.jit
    def step(u, state):
        if open_loop:  # the loss is the auxiliary output of its own forward-mode derivative
            grad, value = jax.jacfwd(lambda x: (loss(x),) * 2, has_aux=True)(u)
        else:
            value, grad = jax.value_and_grad(loss)(u)
        updates, state = optimizer.update(grad, state, u)
        return optax.apply_updates(u, updates), state, value, grad

    history = []
    with jax.enable_x64(True):
        u = jnp.asarray(u0)
        state = optimizer.init(u)
        still = None  # factors no training row moves: their gradient 0 where the fit starts and ends
        for _ in range(steps):
            u, state, value, grad = step(u, state)
            still = np.asarray(grad) == 0.0 if still is None else still
            history.append(float(value))
        _, _, value, grad = step(u, state)  # after the last update (its value: no second compile)
        history.append(float(value))
        still &= np.asarray(grad) == 0.0
        fitted_efficiency = jax.tree_util.tree_map(float, efficiency_of(u))
    uninformed = []  # they keep their starting values, not the nudge a term at 0 starts from
    for k, group in enumerate(groups):
        if per_engine and group not in informed:  # dropped below: its factors are not written
            continue
        kept = {field: float(getattr(start, field)) for j, field in enumerate(fields) if still[k, j]}
        if kept and per_engine:
            fitted_efficiency[group] = dataclasses.replace(fitted_efficiency[group], **kept)
        elif kept:
            fitted_efficiency = dataclasses.replace(fitted_efficiency, **kept)
        uninformed += [f"{group}: {field}" if per_engine else field for field in kept]
    if per_engine:  # an engine no fitted row informs keeps no factors of its own (they would be the start's)
        fitted_efficiency = {name: eff.validate() for name, eff in fitted_efficiency.items() if name in informed}
        # rows the model cannot express are never predicted: their engines need no fitted factors
        start_factors = {name: start for name in engine_names(rows)}
        table_factors = {**start_factors, **fitted_efficiency}
    else:
        fitted_efficiency = fitted_efficiency.validate()
        start_factors, table_factors = start, fitted_efficiency
    every = Predictor(rows, options=options)

    def table(efficiency):
        out = comparison_table(every, efficiency)
        out["split"] = np.where(test, "test", "train")
        return out

    return CalibrationResult(fitted_efficiency, start, fields, test, table(start_factors), table(table_factors),
                             np.asarray(history), options, train, tuple(uninformed))


def _parsed_filter(text: str) -> dict:
    """``"gpu=a,b; engine=c"`` -> {"gpu": ["a", "b"], "engine": ["c"]}.

    Raises:
        JaxparetoError: no filter at all, a filter without ``=``, a column given twice, or a
        value holding ``=`` (two filters joined by a comma where ``;`` separates them).
    """
    parsed = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        column, equals, values = part.partition("=")
        column = column.strip()
        if not equals:
            raise JaxparetoError("train", f"{part!r} is not COLUMN=V1,V2 (filters are separated by ';')")
        if column in parsed:
            raise JaxparetoError("train", f"{column} is given twice; list its values in one filter: "
                                          f"{column}=V1,V2")
        parsed[column] = [v.strip() for v in values.split(",") if v.strip()]
        joined = [v for v in parsed[column] if "=" in v]
        if joined:
            raise JaxparetoError("train", f"{column}= holds {joined[0]!r}: separate filters with ';' "
                                          f"(e.g. {column}={parsed[column][0]};{joined[0]})")
    if not parsed:
        raise JaxparetoError("train", "names no filter: give COLUMN=V1,V2[;COLUMN=...]")
    return parsed


def at_bounds(result: CalibrationResult, tolerance: float = 0.05) -> list[str]:
    """Fitted fields the fit pushed against a bound of `BOUNDS` (per engine when fitted per
    engine): within ``tolerance`` (a share of the range) of the bound, and either at most half as
    far from it as where the fit started (a term at 0 starts at `_OFF_START` of its range) or
    started within ``tolerance`` of it too (kept there). At the upper bound a factor is standing
    in for missing physics; at the lower one the data do not use it. A value that merely lies
    near a bound it started near (a 19 ms TTFT overhead in a range of 0-500 ms that started at
    25 ms) is a fitted value, not a bound hit.

    Fields no training row informs (``result.uninformed``) are not hits.

    Returns:
        One sentence per hit, "<engine>: <field> = <value> is at its upper/lower bound <bound>".
    """
    fitted = result.efficiency if isinstance(result.efficiency, dict) else {"": result.efficiency}
    hits = []
    for engine, efficiency in fitted.items():
        where = f"{engine}: " if engine else ""
        for field in result.fields:
            if f"{where}{field}" in result.uninformed:  # kept at its start: no row moved it
                continue
            low, high = BOUNDS[field]
            value = float(getattr(efficiency, field))
            share = (value - low) / (high - low)
            started = min(max((float(getattr(result.start, field)) - low) / (high - low), _OFF_START), 1.0)
            if 1 - share < tolerance and (1 - share <= (1 - started) / 2 or 1 - started < tolerance):
                hits.append(f"{where}{field} = {value:.4g} is at its upper bound {high:g}")
            elif share < tolerance and (share <= started / 2 or started < tolerance):
                hits.append(f"{where}{field} = {value:.4g} is at its lower bound {low:g}")
    return hits
