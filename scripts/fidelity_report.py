"""How far the model's TTFT, TPOT and throughput are from measured serving runs, on rows the fit
never saw (the README's fidelity tables).

By default it reads the measured runs converted from AIConfigurator's silicon sample
(``jaxpareto/data/aiconfigurator_silicon.csv``, `scripts/import_aiconfigurator.py`), fits the
measured profile's factors per engine on the Hopper rows only (H100, H200), and prints the MAPE
of three models on the same supported rows:

- the seed profile with the seed's factors (what the first version shipped);
- the measured profile with the seed's factors (the physics alone);
- the measured profile with the Hopper-fitted factors (``--calibration``, or fitted here).

It then scores the runs of the engines that prefill first (``Engine.prefill_first``: SGLang) as
their benchmark ran them, each burst of requests one wave a turn (``arrivals="synchronised"``,
`jaxpareto.physics.engine.wave_turn`), their factors refitted so on the same training rows, next
to the staggered steady state of the calibration above.

Errors are split by partition (train = Hopper runs of the models measured when the shipped fit was made;
test = Blackwell, every run of MiniMax-M2.5 and Qwen3.5-397B, every disaggregated run and every
attention-DP run, each apart), layout (tensor or expert parallel, attention DP, or disaggregated), engine, GPU, model family and concurrency band. Throughput is each run's output tokens/s, C x OSL / (TTFT + (OSL - 1) TPOT)
(Little's law at Z = 0), from the measured and from the predicted latencies. Rows whose layout the
model cannot express (PP, a disaggregated run without its prefill pool or with attention DP in a pool,
an expert split other than the replica's GPUs, TP not dividing the heads) are counted apart, never scored.

With ``--aiconfigurator FILE`` (`scripts/aiconfigurator_baseline.py`'s output) it adds
AIConfigurator's own estimate on its sample of test rows, next to ours on the same rows.

    python scripts/fidelity_report.py [--calibration hopper-measured] [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxpareto.definitions.calibration_file import calibration_factors, calibration_options  # noqa: E402
from jaxpareto.definitions.engine import resolve_engine  # noqa: E402
from jaxpareto.definitions.options import GEMM_RATES, ModelOptions  # noqa: E402
from jaxpareto.definitions.settings import Efficiency  # noqa: E402
from jaxpareto.measure.calibrate import calibrate, train_mask  # noqa: E402
from jaxpareto.measure.row_inputs import engine_names  # noqa: E402
from jaxpareto.measure.predict import prediction_fn  # noqa: E402
from jaxpareto.measure.validate import comparison_table, validate  # noqa: E402
from jaxpareto.measure.validation_set import load_validation_set  # noqa: E402

DATA = ROOT / "jaxpareto" / "data" / "aiconfigurator_silicon.csv"
# the rows the shipped hopper-measured fit read: Hopper runs of the models measured then (rows of
# models added later, MiniMax-M2.5 and Qwen3.5-397B-A17B, are all held out)
# (aggregated runs without attention DP: the disaggregated and the attention-DP runs joined the
# supported rows after that fit, and no fit read them)
TRAIN = ("gpu=h100-sxm,h200-sxm;model=llama-3.1-8b,llama-3.1-70b,qwen3-32b,qwen3-235b-a22b,deepseek-v3,kimi-k2.5,"
         "gpt-oss-120b;mode=agg;attention_dp=1")
# The runs are benchmarks at fixed concurrency and lengths: an attention-DP replica's ranks run the
# same steps in lockstep, so their waves of prefills stay aligned ("aligned"; the product's default,
# "independent", is for staggered turns and is reported apart on those runs).
MEASURED = ModelOptions(profile="measured", prefill_model="shared", dp_prefill="aligned")
BANDS = (0, 4, 32, 256, np.inf)
FAMILIES = {"llama": "Llama-3.1 (dense)", "qwen3-32b": "Qwen3-32B (dense)", "qwen3-235b": "Qwen3-235B (MoE)",
            "deepseek": "DeepSeek-V3/R1 (MoE, MLA)", "kimi": "Kimi-K2.5 (MoE, MLA)", "gpt-oss": "gpt-oss-120b (MoE)",
            "minimax": "MiniMax-M2.5 (MoE; never in a fit)",
            "qwen3.5": "Qwen3.5-397B (hybrid linear attention, MoE; never in a fit)"}


def family(model: str) -> str:
    return next((label for prefix, label in FAMILIES.items() if model.startswith(prefix)), model)


def runs(rows: pd.DataFrame, table: pd.DataFrame, split: np.ndarray) -> pd.DataFrame:
    """One line per measured run (its TTFT and TPOT rows side by side), with throughput."""
    frame = rows.assign(predicted=table["predicted"].to_numpy(), flag=table["flag"].to_numpy(),
                        split=np.where(split, "test", "train"))
    frame["run"] = frame["id"].str.replace(r"-(ttft|tpot)$", "", regex=True)
    keys = ["run", "split", "model", "gpu", "engine", "tp", "concurrency", "isl", "osl"]
    wide = frame.pivot_table(index=keys, columns="metric", values=["value", "predicted"], aggfunc="first")
    wide.columns = [f"{'measured' if a == 'value' else 'predicted'}_{m}" for a, m in wide.columns]
    wide = wide.reset_index()
    for kind in ("measured", "predicted"):
        latency = wide[f"{kind}_ttft_ms"] + (wide["osl"] - 1.0) * wide[f"{kind}_tpot_ms"]
        wide[f"{kind}_throughput"] = wide["concurrency"] * wide["osl"] / latency * 1000.0
    wide["family"] = wide["model"].map(family)
    per_run = rows.assign(run=frame["run"]).drop_duplicates("run").set_index("run")
    disaggregated = wide["run"].map(per_run["mode"]).eq("disagg")
    attention_dp = wide["run"].map(per_run["attention_dp"]).fillna(1) > 1
    wide["layout"] = np.where(disaggregated, "disaggregated",
                              np.where(attention_dp, "attention DP",
                                       np.where(wide["run"].map(per_run["moe_ep"]).fillna(1) > 1, "expert parallel",
                                                "tensor parallel")))
    # the README's partitions: the fit's rows, the held-out Blackwell runs of the same models, each
    # model no fit read, and the disaggregated and attention-DP runs (Hopper and Blackwell; no fit
    # read them)
    never = wide["family"].str.contains("never in a fit")
    wide["partition"] = np.where(wide["split"].eq("train"), "Hopper (train)",
                                 np.where(never, wide["family"],
                                          np.where(disaggregated, "Disaggregated (test)",
                                                   np.where(attention_dp, "Attention DP (test)", "Blackwell (test)"))))
    wide["band"] = pd.cut(wide["concurrency"], BANDS, labels=["C <= 4", "5-32", "33-256", "> 256"])
    return wide


METRICS = {"TTFT": "ttft_ms", "TPOT": "tpot_ms", "throughput": "throughput"}
GROWTH_CONCURRENCY = (4, 256)  # the concurrencies a configuration's TTFT line is fitted over
GROWTH_KEYS = ["engine", "model", "gpu", "tp", "isl", "osl"]


def ttft_growth(wide: pd.DataFrame, within_memory: pd.Series) -> pd.DataFrame:
    """How TTFT grows with concurrency, measured and predicted: per configuration (engine, model,
    GPU, TP, ISL, OSL) with runs at four or more concurrencies in `GROWTH_CONCURRENCY` that the
    model holds in KV memory, the slope of a line fitted to TTFT over C (repeated runs: their
    median), over TTFT at the lowest of those concurrencies [% per concurrent request]. A slope
    beyond +-50 % of it a request (the servers' own queueing past KV memory) is left out."""
    low, high = GROWTH_CONCURRENCY
    kept = wide[within_memory & wide["concurrency"].between(low, high) & wide["measured_ttft_ms"].notna()
                & wide["predicted_ttft_ms"].notna()]
    records = []
    for key, group in kept.groupby(GROWTH_KEYS):
        group = group.groupby("concurrency")[["measured_ttft_ms", "predicted_ttft_ms"]].median().reset_index()
        if len(group) < 4:
            continue
        record = dict(zip(GROWTH_KEYS, key))
        for kind in ("measured", "predicted"):
            slope = np.polyfit(group["concurrency"], group[f"{kind}_ttft_ms"], 1)[0]
            record[kind] = slope / group[f"{kind}_ttft_ms"].iloc[0] * 100
        records.append(record)
    per_config = pd.DataFrame(records)
    per_config = per_config[per_config["measured"].abs() <= 50.0]
    summary = []
    for by in ("all", "engine", "osl"):
        groups = [("all", per_config)] if by == "all" else per_config.groupby(by)
        for value, group in groups:
            summary.append({"group": by, "value": value, "configurations": len(group),
                            "measured % per request (median)": f"{group['measured'].median():.2f}",
                            "measured (quartiles)": f"{group['measured'].quantile(0.25):.2f}-"
                                                    f"{group['measured'].quantile(0.75):.2f}",
                            "predicted % per request (median)": f"{group['predicted'].median():.2f}"})
    return pd.DataFrame(summary)


def mape_table(wide: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """MAPE [%] of each metric per group, and the runs scored."""
    records = []
    for key, group in wide.groupby(by, observed=True, sort=True):
        record = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        for label, metric in METRICS.items():
            error = (group[f"predicted_{metric}"] / group[f"measured_{metric}"] - 1.0).abs()
            record[f"{label} %"] = float(error.mean() * 100) if error.notna().any() else np.nan
        record["runs"] = int(group[f"predicted_{METRICS['TPOT']}"].notna().sum())
        records.append(record)
    return pd.DataFrame(records)


def waves(rows: pd.DataFrame, test: np.ndarray, staggered: pd.DataFrame, within_memory: pd.Series,
          measured: ModelOptions, args) -> list:
    """The aggregated runs of the engines that prefill first, scored as one wave a turn (their
    benchmark's requests start together; such an engine prefills the whole burst before it
    decodes again, `jaxpareto.physics.engine.wave_turn`) with their factors refitted so on the
    training rows, beside the staggered scores of the same runs (``staggered``: `runs` of the
    calibration, ``within_memory`` its runs that KV memory holds), and TTFT's growth with C so."""
    first = [name for name in engine_names(rows) if resolve_engine(name).prefill_first]
    keep = (rows["engine"].isin(first) & rows["mode"].ne("disagg")).to_numpy()
    if not keep.any():
        return []
    chosen = rows[keep].reset_index(drop=True)
    options = measured._replace(arrivals="synchronised")
    fit = calibrate(chosen, options=options, train=args.train, steps=args.steps, learning_rate=0.1)
    wide = runs(chosen, fit.after, test[keep])  # the fit's own table of its factors (no second predictor)
    same = staggered["run"].isin(wide["run"])
    before = mape_table(staggered[same], ["partition"]).set_index("partition")
    after = mape_table(wide, ["partition"]).set_index("partition")
    table = pd.concat({"staggered": before.drop(columns="runs"), "one wave": after}, axis=1)
    table.columns = [f"{metric}, {kind}" for kind, metric in table.columns]
    factors = fit.efficiency if isinstance(fit.efficiency, dict) else {first[0]: fit.efficiency}
    overheads = ", ".join(f"{name} {float(factors[name].ttft_overhead_ms):.0f} ms" for name in first if name in factors)
    title = (f"aggregated runs of the engines that prefill first ({', '.join(first)}), as one wave a turn, "
             f"refitted on the same training rows (fitted TTFT overhead: {overheads})")
    held = wide["run"].map(dict(zip(staggered["run"], within_memory))).fillna(False).astype(bool)
    growth = ttft_growth(wide, held)
    growth = growth[growth["group"].isin(["all", "osl"])]
    return [(title, table.reset_index()),
            ("TTFT's growth with concurrency of those runs as one wave a turn (as the table above)", growth)]


def markdown(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(f"{v:.0f}" if isinstance(v, float) and np.isfinite(v) else
                                       "-" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA), help="validation CSV (default the AIConfigurator runs)")
    parser.add_argument("--calibration", help="a calibration file or shipped name (default: fit here on --train)")
    parser.add_argument("--train", default=TRAIN, help=f"rows the fit may read (default {TRAIN!r})")
    parser.add_argument("--steps", type=int, default=300, help="Adam steps when fitting here (default 300)")
    parser.add_argument("--aiconfigurator", help="CSV of scripts/aiconfigurator_baseline.py for the side-by-side")
    parser.add_argument("--markdown", help="also write the tables to this Markdown file")
    parser.add_argument("--gemm-rate", choices=GEMM_RATES,
                        help="the measured profile's matmul rate: the datasheet peak or the rate GEMMs measurably "
                             "reach (default: the --calibration file's, else peak; the seed profile keeps the peak)")
    args = parser.parse_args(argv)
    fitted_rate = calibration_options(args.calibration)["gemm_rate"] if args.calibration else None
    if args.gemm_rate and fitted_rate not in (None, args.gemm_rate):
        parser.error(f"--gemm-rate {args.gemm_rate}: {args.calibration} was fitted at {fitted_rate!r}")
    measured = MEASURED._replace(gemm_rate=args.gemm_rate or fitted_rate or "peak")

    rows = load_validation_set(args.data)
    supported = rows["unsupported"].eq("")
    test = ~train_mask(rows, args.train)
    print(f"{args.data}: {len(rows)} rows, {int(supported.sum())} of a layout the model expresses; "
          f"{int((supported & ~test).sum())} train rows ({args.train}), {int((supported & test).sum())} test rows")
    rows, test = rows[supported].reset_index(drop=True), test[supported.to_numpy()]

    started = time.perf_counter()
    if args.calibration:
        fitted = calibration_factors(args.calibration, engine_names(rows))
    else:
        fitted = calibrate(rows, options=measured, train=args.train, steps=args.steps, learning_rate=0.1).efficiency
    models = {"seed profile, seed factors": (ModelOptions(), Efficiency()),
              "measured profile, seed factors": (measured, Efficiency()),
              "measured profile, fitted on Hopper": (measured, fitted)}
    sections = []
    for label, (options, efficiency) in models.items():
        predictor = prediction_fn(rows, options=options)
        table = comparison_table(predictor, efficiency)
        wide = runs(rows, table, test)
        predicted = wide["predicted_tpot_ms"].notna().mean() * 100
        sections.append((f"{label}: {predicted:.1f} % of supported runs predicted",
                         mape_table(wide, ["split"])))
        sections.append((f"{label}, by partition", mape_table(wide, ["partition"])))
        if label.endswith("Hopper"):
            final = wide
            # the runs whose concurrency the model's KV memory holds (beyond it, the model's
            # sessions wait for memory, as the servers' do or not: docs/model.md)
            with jax.enable_x64(True):
                held = rows["concurrency"].to_numpy() <= predictor.details(efficiency)["concurrency_max"]
            held_runs = rows.assign(held=held, run=rows["id"].str.replace(r"-(ttft|tpot)$", "", regex=True))
            within_memory = final["run"].map(held_runs.groupby("run")["held"].all())
    for by in (["partition", "layout"], ["partition", "engine"], ["split", "gpu"], ["split", "family"],
               ["partition", "band"]):
        sections.append((f"measured profile, fitted on Hopper, by {by[-1]}", mape_table(final, by)))
    sections.append(("TTFT's growth with concurrency, measured and predicted (measured profile, fitted on Hopper; "
                     f"C = {GROWTH_CONCURRENCY[0]}-{GROWTH_CONCURRENCY[1]} within KV memory)",
                     ttft_growth(final, within_memory)))
    sections += waves(rows, test, final, within_memory, measured, args)
    dp = rows["attention_dp"].gt(1).to_numpy()
    if dp.any():  # the lockstep the product assumes for staggered turns, on the same runs
        dp_rows = rows[dp].reset_index(drop=True)
        table = validate(dp_rows, efficiency=fitted, options=measured._replace(dp_prefill="independent"))
        sections.append(("attention-DP runs, fitted on Hopper, with the ranks' prefills independent (as for "
                         "staggered turns)", mape_table(runs(dp_rows, table, test[dp]), ["partition", "engine"])))
    if args.aiconfigurator:
        aic = pd.read_csv(args.aiconfigurator)
        aic = aic[aic["aic_status"].eq("ok")]
        mine = final.set_index("run")
        records = []
        for _, row in aic.iterrows():
            run = row["id_ttft"].removesuffix("-ttft")
            if run in mine.index:
                records.append({"engine": row["engine"],
                                "AIConfigurator TTFT %": abs(row["aic_ttft_ms"] / row["measured_ttft_ms"] - 1) * 100,
                                "AIConfigurator TPOT %": abs(row["aic_tpot_ms"] / row["measured_tpot_ms"] - 1) * 100,
                                "jaxpareto TTFT %": abs(mine.loc[run, "predicted_ttft_ms"] /
                                                        mine.loc[run, "measured_ttft_ms"] - 1) * 100,
                                "jaxpareto TPOT %": abs(mine.loc[run, "predicted_tpot_ms"] /
                                                        mine.loc[run, "measured_tpot_ms"] - 1) * 100})
        side = pd.DataFrame(records)
        if len(side):
            table = side.groupby("engine").mean().reset_index()
            table.loc[len(table)] = ["all", *side.drop(columns="engine").mean().tolist()]
            table["runs"] = [int((side["engine"] == e).sum()) for e in table["engine"][:-1]] + [len(side)]
            sections.append(("AIConfigurator's estimate and jaxpareto on the same held-out runs", table))
    text = []
    for title, table in sections:
        print(f"\n{title}:\n{table.round(1).to_string(index=False)}")
        text.append(f"**{title}**\n\n{markdown(table)}\n")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(text))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
