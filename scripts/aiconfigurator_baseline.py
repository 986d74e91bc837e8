"""Score AIConfigurator's own estimator on a sample of its measured serving runs.

The README compares jaxpareto's TTFT and TPOT errors on ``jaxpareto/data/aiconfigurator_silicon.csv``
(measured runs, see ``scripts/import_aiconfigurator.py``) with the error of the tool that
published those measurements, on the same rows. This script computes the second half: for a
deterministic sample of source runs (each run is a pair of rows, ``aic-<source id>-ttft`` and
``-tpot``) it asks AIConfigurator for its single-point aggregated estimate, the programmatic
equivalent of::

    aiconfigurator cli estimate --estimate-mode agg --model-path M --system S --backend B \\
        --isl I --osl O --batch-size C --tp-size T [--moe-tp-size .. --moe-ep-size ..] \\
        --gemm-quant-mode Q [--moe-quant-mode QE] --kvcache-quant-mode K [--perf-db-version V]

and writes one CSV row per run with the measured and estimated TTFT and TPOT.

Attribution: AIConfigurator 0.12.0 (``pip install aiconfigurator``), NVIDIA ai-dynamo,
https://github.com/ai-dynamo/aiconfigurator, Apache-2.0. Its code is called, never copied: the
script runs a small runner in an interpreter where ``import aiconfigurator`` works (one process
for all runs, ``aiconfigurator.cli.api.cli_estimate``, the function ``cli estimate`` calls), so
the project's own environment does not need the package.

Sample: the runs of ``--gpus`` (default the held-out Blackwell GPUs b200, b300, gb200) whose TTFT
and TPOT rows are both supported by jaxpareto (``unsupported`` blank), stratified over engine x
GPU: ``--rows`` runs split as evenly as the strata allow (a small stratum gives all its runs,
the rest go to the others; which strata get the remainder, and which runs are drawn, follow
``--seed``).

Arguments of each estimate, from the source row of ``silicon_sample.csv`` (found in the
AIConfigurator install): ``system``, ``backend``, ``isl``, ``osl``, ``batch_size`` (equal to the
row's concurrency for the rows jaxpareto supports), ``tp_size``; MoE models also
``moe_tp_size``/``moe_ep_size`` and ``moe_quant_mode``; ``gemm_quant_mode`` (blank: left to
AIConfigurator); ``kvcache_quant_mode`` from the row's ``kv_dtype`` (bf16 -> bfloat16, fp8 ->
fp8; the source does not record it, see the importer's assumption). ``--perf-db-version`` is the
measured engine version only where AIConfigurator ships a database of that version, else its
default (``aic_perf_db_version`` records the one used). Model paths without a shipped config
(no network) map to the shipped config of the same architecture (`MODEL_MAP`; the row records
both). The database mode is AIConfigurator's default, SILICON; where that estimate fails the
run is retried in ``--fallback-database-mode`` (default HYBRID, AIConfigurator's mode for
configurations its silicon data does not cover; ``none``: no retry), and ``aic_database_mode``
says which mode answered. A failing estimate is recorded with NaN and its error's first line.

Output (``--out``, default ``benchmarks/results/aiconfigurator_baseline.csv``): id_ttft, id_tpot,
model, gpu, engine, tp, concurrency, isl, osl, measured_ttft_ms, measured_tpot_ms, aic_ttft_ms,
aic_tpot_ms, aic_status ("ok" or the error), aic_model_path, aic_version, then details
(engine_version, source_model_path, aic_system, aic_perf_db_version, aic_database_mode,
aic_primary_error, the quant modes and MoE layout passed; no timings, so a rerun writes the same
bytes). Printed: how many runs AIConfigurator answered and
its MAPE (mean |estimate / measured - 1| x 100) on TTFT and TPOT, over all answered runs, the
SILICON-mode ones, per engine and per GPU.

Run (about 2 s per run after a few seconds of start-up)::

    AIC_PYTHON=/path/to/venv-with-aiconfigurator/bin/python \\
        python scripts/aiconfigurator_baseline.py --rows 40 [--seed 0] [--overwrite]

Usage: python scripts/aiconfigurator_baseline.py [--data CSV] [--rows N] [--seed S]
[--gpus b200,b300,gb200] [--aic-python PYTHON] [--fallback-database-mode HYBRID|none]
[--out CSV] [--overwrite]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from jaxpareto.measure.validation_set import load_validation_set

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "jaxpareto" / "data" / "aiconfigurator_silicon.csv"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "aiconfigurator_baseline.csv"

#: Source model paths whose config AIConfigurator 0.12.0 does not ship -> the shipped config of
#: the same architecture (no network, so ``--model-path`` must name a shipped config).
MODEL_MAP: dict[str, str] = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
}
#: Our ``kv_dtype`` -> AIConfigurator ``kvcache_quant_mode``.
KV_QUANT = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}

COLUMNS = ["id_ttft", "id_tpot", "model", "gpu", "engine", "tp", "concurrency", "isl", "osl",
           "measured_ttft_ms", "measured_tpot_ms", "aic_ttft_ms", "aic_tpot_ms", "aic_status",
           "aic_model_path", "aic_version",
           # details
           "engine_version", "source_model_path", "aic_system", "aic_perf_db_version", "aic_database_mode",
           "aic_primary_error", "aic_gemm_quant_mode", "aic_moe_quant_mode", "aic_kvcache_quant_mode",
           "moe_tp", "moe_ep"]

# Runs inside the AIConfigurator interpreter: argv[1] = job file (JSON). One result line per job
# on the original stdout, prefixed "AICRESULT "; everything else (AIConfigurator's logging and
# prints) goes to stderr.
RUNNER = r'''
import importlib.metadata, importlib.util, json, logging, os, signal, sys, time
real_stdout = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
spec = json.load(open(sys.argv[1]))

def emit(obj):
    real_stdout.write("AICRESULT " + json.dumps(obj) + "\n")
    real_stdout.flush()

try:
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator_core.sdk import perf_database
    import csv
    version = importlib.metadata.version("aiconfigurator")
    core = os.path.dirname(importlib.util.find_spec("aiconfigurator_core").origin)
    with open(os.path.join(core, "systems", "silicon_sample.csv"), newline="") as f:
        source = {row["id"]: row for row in csv.DictReader(f)}
    supported = perf_database.get_supported_databases()
except Exception as exc:
    emit({"fatal": type(exc).__name__ + ": " + (str(exc).splitlines() or [""])[0]})
    raise SystemExit(2)

def shipped(path):
    return os.path.isfile(os.path.join(core, "model_configs", path.replace("/", "--") + "_config.json"))

def size(text):
    try:
        value = int(float(text))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None

class Timeout(Exception):
    pass

def on_alarm(signum, frame):
    raise Timeout("estimate took over %d s" % spec["timeout_s"])

signal.signal(signal.SIGALRM, on_alarm)

def first_line(exc):
    text = (str(exc).strip().splitlines() or [""])[0].strip()
    return (type(exc).__name__ + ": " + text) if text else type(exc).__name__

for job in spec["jobs"]:
    out = {"sid": job["sid"], "aic_version": version, "ttft": None, "tpot": None}
    src = source.get(job["sid"])
    if src is None:
        out["status"] = "source row not found in this aiconfigurator's silicon_sample.csv"
        emit(out)
        continue
    model_path = src["model_path"]
    if not shipped(model_path):
        mapped = spec["model_map"].get(model_path)
        if mapped is None or not shipped(mapped):
            out.update(source_model_path=model_path, aic_model_path="",
                       status="no shipped model config for %s (and no mapping)" % model_path)
            emit(out)
            continue
        model_path = mapped
    system, backend = src["system"], src["backend"]
    versions = supported.get(system, {}).get(backend, [])
    db_version = src["backend_version"] if src["backend_version"] in versions else None
    kwargs = dict(model_path=model_path, system_name=system, mode="agg", backend_name=backend,
                  backend_version=db_version, isl=int(src["isl"]), osl=int(src["osl"]),
                  batch_size=int(src["batch_size"]), tp_size=int(src["tp_size"]),
                  gemm_quant_mode=src["gemm_quant_mode"] or None,
                  kvcache_quant_mode=job["kvcache_quant_mode"])
    if size(src["pp_size"]):
        kwargs["pp_size"] = size(src["pp_size"])
    if job["moe"]:
        kwargs.update(moe_tp_size=size(src["moe_tp_size"]), moe_ep_size=size(src["moe_ep_size"]),
                      moe_quant_mode=src["moe_quant_mode"] or None)
    out.update(source_model_path=src["model_path"], aic_model_path=model_path, aic_system=system,
               aic_gemm_quant_mode=kwargs["gemm_quant_mode"] or "", aic_moe_quant_mode=kwargs.get("moe_quant_mode") or "",
               aic_kvcache_quant_mode=kwargs["kvcache_quant_mode"] or "", batch_size=kwargs["batch_size"],
               tp_size=kwargs["tp_size"], moe_tp=kwargs.get("moe_tp_size"), moe_ep=kwargs.get("moe_ep_size"),
               measured_version=src["backend_version"])
    modes = [spec["database_mode"]] + ([spec["fallback_mode"]] if spec["fallback_mode"] else [])
    start = time.time()
    errors = []
    for mode in modes:
        out["aic_database_mode"] = mode
        signal.alarm(spec["timeout_s"])
        try:
            result = cli_estimate(database_mode=mode, **kwargs)
            signal.alarm(0)
        except BaseException as exc:
            signal.alarm(0)
            if isinstance(exc, KeyboardInterrupt):
                raise
            errors.append(first_line(exc))
            continue
        out.update(ttft=float(result.ttft), tpot=float(result.tpot), status="ok",
                   aic_perf_db_version=str(result.backend_version))
        break
    else:
        out["status"] = errors[-1]
    out["aic_primary_error"] = errors[0] if errors and out["status"] == "ok" else ""
    out["seconds"] = round(time.time() - start, 2)
    emit(out)
'''


def aic_python_default() -> str:
    return os.environ.get("AIC_PYTHON") or sys.executable


def check_aic_python(python: str) -> None:
    """Exit with a clear message unless ``import aiconfigurator`` works in ``python``."""
    try:
        probe = subprocess.run([python, "-c", "import aiconfigurator.cli.api"], capture_output=True, text=True)
    except OSError as exc:
        sys.exit(f"cannot run the AIConfigurator interpreter {python!r}: {exc}\n"
                 "Pass --aic-python PYTHON (or set AIC_PYTHON) naming a Python where `pip install aiconfigurator` "
                 "has been run.")
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or [""])[-1]
        sys.exit(f"`import aiconfigurator` fails in {python} ({tail}).\n"
                 "Pass --aic-python PYTHON (or set AIC_PYTHON) naming a Python where it works, or run "
                 "`pip install aiconfigurator` (0.12.0) in this one.")


def source_runs(data: Path, gpus: list[str]) -> pd.DataFrame:
    """One row per source run of ``gpus`` whose TTFT and TPOT rows are both supported."""
    table = load_validation_set(data)
    table = table[table["gpu"].isin(gpus) & table["id"].str.startswith("aic-")].copy()
    table["sid"] = table["id"].str.replace(r"^aic-", "", regex=True).str.replace(r"-(ttft|tpot)$", "", regex=True)
    both_ok = table.groupby("sid")["unsupported"].agg(lambda s: bool((s == "").all()))
    table = table[table["sid"].map(both_ok)]
    ttft = table[table["metric"] == "ttft_ms"].set_index("sid")
    tpot = table[table["metric"] == "tpot_ms"].set_index("sid")
    sids = sorted(set(ttft.index) & set(tpot.index))
    runs = ttft.loc[sids, ["id", "model", "gpu", "engine", "engine_version", "tp", "moe_tp", "moe_ep", "concurrency",
                           "isl", "osl", "expert_weight_dtype", "kv_dtype", "value"]]
    runs = runs.rename(columns={"id": "id_ttft", "value": "measured_ttft_ms"})
    runs["id_tpot"] = tpot.loc[sids, "id"]
    runs["measured_tpot_ms"] = tpot.loc[sids, "value"]
    return runs.reset_index()


def allocate(sizes: dict[tuple, int], n: int, rng: np.random.Generator) -> dict[tuple, int]:
    """Split ``n`` draws over strata as evenly as their sizes allow (water-filling); the seeded
    ``rng`` orders the strata that get one more than the others."""
    quota = dict.fromkeys(sizes, 0)
    left = min(n, sum(sizes.values()))
    while left > 0:
        open_ = [key for key in sorted(sizes) if quota[key] < sizes[key]]
        share, extra = divmod(left, len(open_))
        if share == 0:
            for index in rng.permutation(len(open_))[:extra]:
                quota[open_[index]] += 1
            break
        for key in open_:
            take = min(share, sizes[key] - quota[key])
            quota[key] += take
            left -= take
    return quota


def sample(runs: pd.DataFrame, n: int, seed: int) -> tuple[pd.DataFrame, dict[tuple, int]]:
    rng = np.random.default_rng(seed)
    groups = {key: group.sort_values("sid") for key, group in runs.groupby(["engine", "gpu"])}
    quota = allocate({key: len(group) for key, group in groups.items()}, n, rng)
    picked = []
    for key in sorted(groups):
        group = groups[key]
        picked.append(group.iloc[np.sort(rng.choice(len(group), size=quota[key], replace=False))])
    return pd.concat(picked, ignore_index=True), quota


def estimate(aic_python: str, jobs: list[dict], args) -> dict[str, dict]:
    """Run the runner over ``jobs``; the result dict per source id. A crash of the runner fails the
    job in flight and restarts it on the rest."""
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="jaxpareto-aic-") as tmp:
        runner = Path(tmp) / "aic_runner.py"
        runner.write_text(RUNNER)
        log = Path(tmp) / "aic_runner.log"
        pending = list(jobs)
        while pending:
            spec = Path(tmp) / "jobs.json"
            spec.write_text(json.dumps({"jobs": pending, "model_map": MODEL_MAP, "database_mode": args.database_mode,
                                        "fallback_mode": args.fallback_mode, "timeout_s": args.timeout}))
            with open(log, "a") as err:
                proc = subprocess.Popen([aic_python, str(runner), str(spec)], stdout=subprocess.PIPE, stderr=err,
                                        text=True, cwd=tmp)
                for line in proc.stdout:
                    if not line.startswith("AICRESULT "):
                        continue
                    out = json.loads(line[len("AICRESULT "):])
                    if "fatal" in out:
                        proc.wait()
                        sys.exit(f"AIConfigurator failed to start: {out['fatal']}")
                    results[out["sid"]] = out
                    done = len(results)
                    value = (f"TTFT {out['ttft']:.1f} ms, TPOT {out['tpot']:.2f} ms ({out.get('aic_database_mode')})"
                             if out["status"] == "ok" else out["status"])
                    print(f"[{done}/{len(jobs)}] {out['sid']}: {value}", file=sys.stderr, flush=True)
                proc.wait()
            pending = [job for job in pending if job["sid"] not in results]
            if pending:
                tail = " | ".join(log.read_text().strip().splitlines()[-3:])
                crashed = pending.pop(0)
                results[crashed["sid"]] = {"sid": crashed["sid"], "ttft": None, "tpot": None,
                                           "status": f"aiconfigurator runner exited with status {proc.returncode}: {tail}"[:300]}
                print(f"runner crashed on {crashed['sid']}; restarting on {len(pending)} runs", file=sys.stderr)
    return results


def mape(measured: pd.Series, estimated: pd.Series) -> float:
    return float((estimated / measured - 1).abs().mean() * 100) if len(measured) else math.nan


def summary(table: pd.DataFrame) -> str:
    ok = table[table["aic_status"].eq("ok")]
    lines = [f"AIConfigurator ({table['aic_version'].dropna().iloc[0] if table['aic_version'].notna().any() else '?'}) "
             f"answered {len(ok)} of {len(table)} runs "
             f"({int(ok['aic_database_mode'].eq('SILICON').sum())} in SILICON mode, "
             f"{int(ok['aic_database_mode'].ne('SILICON').sum())} after falling back)."]

    def line(label: str, part: pd.DataFrame, of: int) -> str:
        return (f"  {label:<22} {len(part):>3}/{of:<3}  TTFT MAPE {mape(part['measured_ttft_ms'], part['aic_ttft_ms']):7.1f} %"
                f"   TPOT MAPE {mape(part['measured_tpot_ms'], part['aic_tpot_ms']):7.1f} %")

    lines.append(line("all answered", ok, len(table)))
    silicon = ok[ok["aic_database_mode"].eq("SILICON")]
    lines.append(line("SILICON mode only", silicon, len(table)))
    for column in ("engine", "gpu"):
        for key, part in table.groupby(column):
            lines.append(line(f"{column} {key}", part[part["aic_status"].eq("ok")], len(part)))
    failed = table[~table["aic_status"].eq("ok")]
    if len(failed):
        lines.append("Not answered:")
        for status, count in failed["aic_status"].value_counts().items():
            lines.append(f"  {count} x {status}")
    versions = (ok.groupby(["engine", "engine_version", "aic_perf_db_version"], dropna=False).size()
                .reset_index(name="runs"))
    lines.append("Perf-database versions used (measured engine version -> AIConfigurator database):")
    for row in versions.itertuples():
        lines.append(f"  {row.engine} {row.engine_version or '(not given)'} -> {row.aic_perf_db_version}: {row.runs} runs")
    mapped = table[table["source_model_path"].ne(table["aic_model_path"]) & table["aic_model_path"].ne("")]
    for (src, dst), part in mapped.groupby(["source_model_path", "aic_model_path"]):
        lines.append(f"Model path mapped: {src} -> {dst} ({len(part)} runs)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="validation-schema CSV (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=40, help="source runs to score (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    parser.add_argument("--gpus", default="b200,b300,gb200", help="comma-separated GPUs (default: %(default)s)")
    parser.add_argument("--aic-python", default=None,
                        help="Python where `import aiconfigurator` works (default: $AIC_PYTHON, else this Python)")
    parser.add_argument("--database-mode", default="SILICON", help="AIConfigurator database mode (default: %(default)s)")
    parser.add_argument("--fallback-database-mode", dest="fallback_mode", default="HYBRID",
                        help="mode to retry a failed estimate in; 'none' to not retry (default: %(default)s)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per estimate (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output CSV (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if args.fallback_mode.lower() in ("", "none"):
        args.fallback_mode = None
    if args.out.exists() and not args.overwrite:
        sys.exit(f"{args.out} exists; pass --overwrite to replace it")
    aic_python = args.aic_python or aic_python_default()
    check_aic_python(aic_python)

    gpus = [gpu.strip() for gpu in args.gpus.split(",") if gpu.strip()]
    runs = source_runs(args.data, gpus)
    if runs.empty:
        sys.exit(f"no supported runs of {gpus} in {args.data}")
    picked, quota = sample(runs, args.rows, args.seed)
    print(f"{len(runs)} supported runs of {', '.join(gpus)}; sampled {len(picked)} (seed {args.seed}): "
          + ", ".join(f"{engine}/{gpu} {count}" for (engine, gpu), count in sorted(quota.items())), file=sys.stderr)

    jobs = [{"sid": row.sid, "moe": bool(row.expert_weight_dtype), "kvcache_quant_mode": KV_QUANT.get(row.kv_dtype)}
            for row in picked.itertuples()]
    start = time.time()
    results = estimate(aic_python, jobs, args)
    print(f"estimates: {time.time() - start:.0f} s", file=sys.stderr)

    rows = []
    for run in picked.itertuples():
        out = results[run.sid]
        if out.get("batch_size") is not None and (out["batch_size"] != run.concurrency or out["tp_size"] != run.tp):
            print(f"warning: {run.sid}: AIConfigurator got batch {out['batch_size']}, tp {out['tp_size']}; "
                  f"the row says concurrency {run.concurrency}, tp {run.tp}", file=sys.stderr)
        rows.append({
            "id_ttft": run.id_ttft, "id_tpot": run.id_tpot, "model": run.model, "gpu": run.gpu, "engine": run.engine,
            "tp": run.tp, "concurrency": run.concurrency, "isl": run.isl, "osl": run.osl,
            "measured_ttft_ms": run.measured_ttft_ms, "measured_tpot_ms": run.measured_tpot_ms,
            "aic_ttft_ms": out["ttft"] if out["ttft"] is not None else math.nan,
            "aic_tpot_ms": out["tpot"] if out["tpot"] is not None else math.nan,
            "aic_status": out["status"], "aic_model_path": out.get("aic_model_path", ""),
            "aic_version": out.get("aic_version", ""), "engine_version": run.engine_version,
            "source_model_path": out.get("source_model_path", ""), "aic_system": out.get("aic_system", ""),
            "aic_perf_db_version": out.get("aic_perf_db_version", ""),
            "aic_database_mode": out.get("aic_database_mode", "") if out["status"] == "ok" else "",
            "aic_primary_error": out.get("aic_primary_error", ""),
            "aic_gemm_quant_mode": out.get("aic_gemm_quant_mode", ""),
            "aic_moe_quant_mode": out.get("aic_moe_quant_mode", ""),
            "aic_kvcache_quant_mode": out.get("aic_kvcache_quant_mode", ""),
            "moe_tp": out.get("moe_tp"), "moe_ep": out.get("moe_ep"),
        })
    table = pd.DataFrame(rows, columns=COLUMNS)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False, float_format="%.6g")
    print(f"wrote {args.out} ({len(table)} runs)", file=sys.stderr)
    print(summary(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
