"""Convert AIConfigurator's measured serving runs into a jaxpareto validation set.

Source: ``aiconfigurator_core/systems/silicon_sample.csv`` of the pip package ``aiconfigurator``
0.12.0 (Apache-2.0): one row per measured serving run (vLLM, SGLang or TensorRT-LLM) at a fixed
concurrency, with its mean TTFT and mean TPOT in ms. Each kept source row gives two rows of
``jaxpareto/data/aiconfigurator_silicon.csv`` in the schema of
``jaxpareto.measure.validation_set`` (``COLUMNS``): metric ``ttft_ms`` and ``tpot_ms``, statistic
``mean``, load ``concurrency``.

Rules, per source row:

- ``concurrency``: the benchmark's ``silicon_concurrency=N`` in ``silicon_data_source`` (all
  sessions of the run; fallback ``batch_size``). ``isl``, ``osl``: the row's.
- Layout, aggregated rows: ``tp``, ``pp``, ``attention_dp``, ``moe_tp``, ``moe_ep`` as given (0
  or blank: blank; dense models: ``moe_*`` blank), ``gpus`` = tp x pp x attention_dp. Rows whose
  concurrency is not ``batch_size`` (sessions per attention-DP rank) x attention_dp are dropped:
  the source does not say how the other sessions were served (replicas or engine queueing).
  Rows with ``tp_size`` = ``moe_tp_size`` x ``moe_ep_size`` and ``moe_tp_size`` =
  ``moe_ep_size`` > 1 are dropped: every such run whose name states its layout (``tp4_ep4``,
  ``tp8_0_ep8_0``) ran on ``tp_size`` / ``moe_ep_size`` GPUs, and no other run has that
  signature, so the source counted their GPUs twice.
- Disaggregated rows (``mode`` disagg): ``gpus`` = the prefill plus the decode workers' GPUs
  (workers x tp x attention_dp x pp each); ``tp`` and the layout columns are the decode
  workers'; the prefill layout is in ``notes``, and where its workers are plain TP groups (no
  attention DP or PP) in ``prefill_workers`` and ``prefill_tp``, with ``decode_workers``. Rows
  without worker counts are dropped.
- Models (`MODELS`) and GPUs (`GPUS`) map to catalog names; others are dropped.
- Weights: ``gemm_quant_mode`` via `QUANT` (blank: ``precision``; blank: bf16); routed experts
  (MoE models): ``moe_quant_mode`` (blank: as the weights). gpt-oss-120b and Kimi K2.5, whose
  checkpoints quantize only the routed experts, keep the catalog's bf16 elsewhere: the source's
  quant mode labels the whole run.
- KV dtype, not in the source (an ASSUMPTION, stated per row): fp8 for TensorRT-LLM with fp8 or
  fp4 weights and for NVIDIA ModelOpt checkpoints (``nvidia/...``), else bf16 (vLLM's and
  SGLang's default ``kv_cache_dtype`` "auto" is the activation dtype).
- Dropped: a TTFT or TPOT that is blank or not positive, and a row whose model does not build
  (``row_model``). Every drop is counted in the printed summary.

Usage: python scripts/import_aiconfigurator.py [--source silicon_sample.csv] [--out FILE] [--overwrite]
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import sys
from collections import Counter
from pathlib import Path

from _common import aiconfigurator_core
from jaxpareto.definitions import catalog
from jaxpareto.measure.validation_set import COLUMNS, load_validation_set, row_model

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "jaxpareto" / "data" / "aiconfigurator_silicon.csv"
SOURCE = "AIConfigurator silicon"
SOURCE_FILE = "aiconfigurator 0.12.0 aiconfigurator_core/systems/silicon_sample.csv (Apache-2.0)"

#: model_path -> (catalog model, what the mapping assumes).
MODELS: dict[str, tuple[str, str]] = {
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", ""),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("llama-3.1-8b", "NVIDIA FP8 checkpoint"),
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", ""),
    "Qwen/Qwen3-32B": ("qwen3-32b", ""),
    "nvidia/Qwen3-32B-NVFP4": ("qwen3-32b", "NVIDIA NVFP4 checkpoint"),
    "Qwen/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b", "FP8 checkpoint"),
    "deepseek-ai/DeepSeek-V3": ("deepseek-v3", ""),
    "deepseek-ai/DeepSeek-R1": ("deepseek-v3", "DeepSeek-V3's architecture"),
    "nvidia/DeepSeek-R1-NVFP4": ("deepseek-v3", "NVIDIA NVFP4 checkpoint; DeepSeek-V3's architecture"),
    "nvidia/DeepSeek-V3.1-NVFP4": ("deepseek-v3", "NVIDIA NVFP4 checkpoint; DeepSeek-V3's architecture"),
    "openai/gpt-oss-120b": ("gpt-oss-120b", "checkpoint: MXFP4 experts, bf16 elsewhere"),
    "moonshotai/Kimi-K2.5": ("kimi-k2.5", "checkpoint: INT4 experts, bf16 elsewhere"),
    "MiniMaxAI/MiniMax-M2.5": ("minimax-m2.5", ""),
    "Qwen/Qwen3.5-397B-A17B": ("qwen3.5-397b-a17b", "hybrid: 45 linear-attention + 15 full layers"),
}
#: AIConfigurator system -> catalog GPU (gb300 has no catalog entry).
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200"}
#: gemm_quant_mode / moe_quant_mode -> weight dtype (bytes per weight as the catalog counts them).
QUANT = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "int4_wo": "int4"}
PRECISION = {"bf16": "bf16", "fp8": "fp8", "fp4": "fp4", "int4": "int4"}
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}

DROP_MODEL = "model not in the catalog yet"
DROP_GPU = "GPU not in the catalog"
DROP_VALUE = "TTFT or TPOT blank or not positive"
DROP_NO_CONCURRENCY = "no concurrency (neither silicon_concurrency nor batch_size)"
DROP_CONCURRENCY = "concurrency is not batch_size x attention_dp (how the sessions were served is not given)"
DROP_WORKERS = "disaggregated run without worker counts"
DROP_SPLIT = "disaggregated GPUs do not split into decode TP groups (and the prefill pool is not given)"
DROP_BUILD = "model does not build with these dtypes"
DROP_DOUBLED = ("tp_size = moe_tp x moe_ep with moe_tp = moe_ep > 1: the GPUs counted twice (each of the 160 such "
                "runs whose name gives its layout, tp4_ep4 or tp8_ep8, ran on tp_size / moe_ep GPUs)")


def default_source() -> Path:
    """``silicon_sample.csv`` of the ``aiconfigurator`` package installed in this Python."""
    return aiconfigurator_core("PATH/TO/silicon_sample.csv", "--source") / "systems" / "silicon_sample.csv"


def _size(text: str) -> int | None:
    """A layout size of the source: None for blank or 0."""
    return int(float(text)) if text.strip() and float(text) > 0 else None


def _positive(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _layout(src: dict) -> tuple[dict, str] | str:
    """``gpus``, ``tp``, ``pp``, ``attention_dp``, ``moe_tp``, ``moe_ep``, ``mode``, ``concurrency``
    of a source row and a note, or the reason to drop it."""
    given = re.search(r"silicon_concurrency=(\d+)", src["silicon_data_source"])
    concurrency = int(given.group(1)) if given else _size(src["batch_size"])
    if concurrency is None:
        return DROP_NO_CONCURRENCY
    note = "" if given else "concurrency = batch_size (no silicon_concurrency in the source)"
    if src["mode"] != "disagg":
        tp, pp, adp = _size(src["tp_size"]), _size(src["pp_size"]), _size(src["attention_dp_size"])
        if given and concurrency != (_size(src["batch_size"]) or 0) * (adp or 1):
            return DROP_CONCURRENCY
        moe_tp, moe_ep = _size(src["moe_tp_size"]), _size(src["moe_ep_size"])
        if moe_tp is not None and moe_tp == moe_ep and moe_ep > 1 and tp == moe_tp * moe_ep:
            return DROP_DOUBLED
        layout = dict(gpus=tp * (pp or 1) * (adp or 1), tp=tp, pp=pp, attention_dp=adp, mode="agg",
                      moe_tp=_size(src["moe_tp_size"]), moe_ep=_size(src["moe_ep_size"]), concurrency=concurrency)
        return layout, note
    sides = {}
    for side in ("prefill", "decode"):
        sizes = [_size(src[f"{side}_{name}"]) for name in ("num_workers", "tp_size", "attention_dp_size", "pp_size")]
        if sizes[0] is None or sizes[1] is None:
            return DROP_WORKERS
        sides[side] = [size or 1 for size in sizes]
    gpus = sum(math.prod(sizes) for sizes in sides.values())
    workers, tp, adp, pp = sides["decode"]
    prefill_workers, prefill_tp, prefill_adp, prefill_pp = sides["prefill"]
    pools = prefill_adp == 1 and prefill_pp == 1  # a pool the model expresses: TP workers
    if gpus % tp and not pools:
        return DROP_SPLIT
    described = ", ".join(f"{side} {w}x(tp {t}, attention_dp {a}, pp {p})" for side, (w, t, a, p) in sides.items())
    layout = dict(gpus=gpus, tp=tp, pp=pp, attention_dp=adp, mode="disagg", moe_tp=_size(src["decode_moe_tp_size"]),
                  moe_ep=_size(src["decode_moe_ep_size"]), concurrency=concurrency)
    if pools:
        layout.update(prefill_workers=prefill_workers, prefill_tp=prefill_tp, decode_workers=workers)
    return layout, "; ".join(filter(None, [f"disagg: {described}; layout columns: decode's", note]))


def _dtypes(src: dict, model: str) -> tuple[str, str, str, list[str]]:
    """``weight_dtype``, ``expert_weight_dtype`` ("" for dense models), ``kv_dtype`` and notes."""
    entry = catalog.models()[model]
    gemm, moe = src["gemm_quant_mode"], src["moe_quant_mode"]
    weights = QUANT[gemm] if gemm else PRECISION[src["precision"]] if src["precision"] else "bf16"
    notes = [f"weights {weights} (gemm_quant_mode {gemm})" if gemm else
             f"weights {weights} (precision; no gemm_quant_mode)" if src["precision"] else
             "weights bf16 ASSUMED (no gemm_quant_mode or precision)"]
    experts = ""
    if entry.experts:
        experts = QUANT[moe] if moe else weights
        notes.append(f"experts {experts} (moe_quant_mode {moe})" if moe else "experts as the weights")
    if entry.expert_weight_dtype:  # gpt-oss, Kimi K2.5: the checkpoints quantize only the experts
        notes[0] = f"weights {entry.weight_dtype} ASSUMED (the source labels the whole run {gemm or weights})"
        weights = entry.weight_dtype
    low = {weights, experts} & {"fp8", "fp4"}
    if src["model_path"].startswith("nvidia/"):
        kv, why = "fp8", "NVIDIA ModelOpt checkpoint"
    elif src["backend"] == "trtllm":
        kv, why = ("fp8", f"TensorRT-LLM, {'/'.join(sorted(low))} weights") if low else ("bf16", "TensorRT-LLM, "
                                                                                                "bf16 weights")
    else:
        kv, why = "bf16", f"{ENGINE_NAMES[src['backend']]} kv_cache_dtype auto (activation dtype)"
    notes.append(f"KV {kv} ASSUMED: {why}")
    return weights, experts, kv, notes


def convert_row(src: dict) -> list[dict] | str:
    """The TTFT and TPOT validation rows of one source row, or the reason it is dropped."""
    if src["model_path"] not in MODELS:
        return DROP_MODEL
    if src["system"] not in GPUS:
        return DROP_GPU
    ttft, tpot = _positive(src["silicon_ttft_ms"]), _positive(src["silicon_tpot_ms"])
    if ttft is None or tpot is None:
        return DROP_VALUE
    layout = _layout(src)
    if isinstance(layout, str):
        return layout
    layout, layout_note = layout
    model, model_note = MODELS[src["model_path"]]
    if not catalog.models()[model].experts:
        layout.update(moe_tp=None, moe_ep=None)
    weights, experts, kv, dtype_notes = _dtypes(src, model)
    try:
        row_model({"model": model, "weight_dtype": weights, "expert_weight_dtype": experts, "kv_dtype": kv})
    except ValueError:
        return DROP_BUILD
    mapping = f"model {src['model_path']} -> {model}" + (f" ({model_note})" if model_note else "")
    notes = "; ".join(filter(None, [mapping, *dtype_notes, layout_note]))
    base = dict.fromkeys(COLUMNS, "") | {name: "" if value is None else str(value) for name, value in layout.items()}
    base |= dict(source=SOURCE, reference=f"{SOURCE_FILE}, row id {src['id']}; {src['silicon_data_source']}",
                 engine=src["backend"], engine_version=src["backend_version"], model=model, gpu=GPUS[src["system"]],
                 weight_dtype=weights, expert_weight_dtype=experts, kv_dtype=kv, isl=src["isl"], osl=src["osl"],
                 load="concurrency", statistic="mean", unit="ms", notes=notes)
    return [base | dict(id=f"aic-{src['id']}-{name}", metric=f"{name}_ms", value=src[f"silicon_{name}_ms"])
            for name in ("ttft", "tpot")]


def convert(source: Path) -> tuple[list[dict], int, Counter]:
    """Validation rows sorted by id, the number of source rows read, and the drops per reason."""
    with open(source, newline="") as f:
        records = list(csv.DictReader(f))
    rows, dropped = [], Counter()
    for src in records:
        result = convert_row(src)
        if isinstance(result, str):
            dropped[result] += 1
        else:
            rows += result
    return sorted(rows, key=lambda row: row["id"]), len(records), dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="silicon_sample.csv (default: the installed aiconfigurator's)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output CSV (default {DEFAULT_OUT})")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args = parser.parse_args(argv)
    source = args.source or default_source()
    if not source.is_file():
        sys.exit(f"no such file: {source}")
    if args.out.exists() and not args.overwrite:
        sys.exit(f"{args.out} exists: pass --overwrite to replace it")
    rows, read, dropped = convert(source)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    args.out.write_text(text.getvalue())

    table = load_validation_set(args.out)
    print(f"source rows read: {read}")
    print(f"written to {args.out}: {len(rows) // 2} source rows, {len(rows)} validation rows (TTFT and TPOT)")
    for reason, count in sorted(dropped.items(), key=lambda item: (-item[1], item[0])):
        print(f"dropped {count:5d}: {reason}")
    runs = table[table["metric"] == "ttft_ms"]
    counts = runs.groupby(["engine", "gpu", runs["unsupported"].eq("")]).size().unstack(fill_value=0)
    print("written source rows per engine x GPU: supported / unsupported layout")
    for (engine, gpu), row in counts.iterrows():
        print(f"  {engine:7s} {gpu:9s} {row.get(True, 0):5d} / {row.get(False, 0):5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
