"""The validation set: published serving measurements the model is checked against.

``jaxpareto/data/validation.csv`` holds one row per published measurement (106 rows), each with
its source: a short name (``source``, what the MAPE summary groups by) and the exact repository,
file or page (``reference``). Values are as published; the project measured none of them. The
rows come from the project's fact sheets:

- MLPerf Inference v5.1 (36 rows): offline tokens/s, and the server scenario's mean TTFT and TPOT
  with the tokens/s they were logged at, for llama2-70b-99 (8x B200, 8x H200 Nebius, 16x H100
  Cisco, 4x GB200, 8x MI300X, 8x MI325X; 8x MI355X offline, open division; 8x B200
  interactive), llama3.1-405b (8x B200, 8x H200 Nebius, 16x H100 Cisco) and deepseek-r1 (8x
  B200, GB200 NVL72).
- MLPerf Inference v4.1 (3 rows): llama2-70b-99 offline on DGX H100, 8x H200 and 1x B200.
- TensorRT-LLM perf-overview (48 rows): max-load output tokens/s of the whole TP group at four
  ISL/OSL pairs for Llama-3.1-8B, Llama-3.3-70B, Llama-3.1-405B and Qwen3-235B-A22B.
- vLLM blog "FP8 KV cache" (14 rows): Llama-3.1-8B on one H100; ITL at concurrency 1 (points on
  the blog's linear fit over context) and median TTFT, median ITL and output tokens/s at
  concurrency 8 (~20K in / ~2K out), each with BF16 and FP8 KV.
- InferenceX via inference-sim (4 rows): DeepSeek-V3 FP8 on 8x H200 (SGLang, TP 8, 1K/1K), TPOT
  and TTFT at concurrency 4 and 64.
- vLLM KV capacity via inference-sim (1 row): KV tokens of Llama-3.1-70B at TP 4 on H100.

Rows left out, and why:

- MLPerf v5.1 llama2-70b-99 on 8x H200 (Google), offline and interactive: weight dtype not given.
- MLPerf v5.1 llama3.1-405b on GB200 NVL72 (dtype not given) and GB300 NVL72, deepseek-r1 on
  GB300 NVL72: the GB300 is not in the catalog (the catalog's b300 is the HGX part), and the
  GB200 405B row gives no dtype.
- MLPerf v5.1 llama3.1-8b (8x B200, 8x H200 HPE) and mixtral-8x7b (8x H200 HPE, 8x MI300X):
  weight dtype not given.
- MLPerf v4.1 mixtral-8x7b (DGX H100): per-system precision and TP not checked.
- MLPerf v4.1 server throughputs (DGX H100 21,605.8 and 8x H200 29,228.2 tokens/s): no TTFT or
  TPOT was logged with them in the fact sheet, and a server throughput alone is the operating
  point, not a quantity the model predicts.
- vLLM blog "performance update" (2024): "one token every 13 ms under light load" gives neither
  the context nor the concurrency.
- vLLM KV capacity of Qwen2.5-7B: not in the catalog.

The MLPerf rows' request lengths are the benchmark datasets' own: the mean and coefficient of
variation (``isl``, ``isl_cv``, ``osl_cv``) of the prompts of MLCommons' preprocessed sets
(OpenOrca's 24,576 for llama2-70b: 222.3 tokens, CV 0.77; 8,313 for llama3.1-405b: 9,428.6, CV
0.43; 4,388 for deepseek-r1: 803.8, CV 0.50), from the per-prompt lengths extracted in
openshift-psap/performance-dashboard (each row's notes name the file and commit). OSL is the mean
the logs or the reference README give; its spread is the reference outputs' (CV 0.79, 0.38 and
1.25), assumed for the generated ones. The two means those extractions share with the
references (405B's 684.68 and DeepSeek-R1's 4,043.45 output tokens) agree to the last digit.

Assumptions stated per row in ``notes`` (search the file for "ASSUMED"): TP and KV dtype of most
MLPerf submissions (DeepSeek-R1's layout and KV dtype are those of NVIDIA's GB300 launch script of
the same round), FP8 KV for TensorRT-LLM engines, bf16 weights in the vLLM blog, and the
InferenceX statistic.

Llama-2-70B is not in the catalog (a catalog test pins its model list), so `LLAMA_2_70B` is
defined here from its ``config.json``.

Optional columns (blank in the rows above) describe the serving run: ``engine`` (one of
`ENGINES`) and ``engine_version``; ``mode`` (`MODES`: blank = ``agg``, ``disagg`` = separate
prefill and decode workers); the parallel layout ``pp``, ``attention_dp``, ``moe_tp``, ``moe_ep``
(blank: 1, 1, ``tp``, 1); a disaggregated run's pools ``prefill_workers``, ``prefill_tp`` and
``decode_workers`` (`DISAGGREGATION_COLUMNS`, which a file may leave out); the request lengths'
spread ``isl_cv`` and ``osl_cv`` (`SPREAD_COLUMNS`, blank: fixed lengths; a file may leave them
out); ``arrival_cv``, the coefficient of variation of the gaps between a server row's requests
at one replica where its harness deals them more evenly than a Poisson stream would
(`ARRIVAL_COLUMNS`, ``Workload.arrival_cv``; blank: 1, Poisson; a file may leave it out);
``expert_imbalance``, the routed tokens the busiest expert-parallel GPU receives over the
mean, for a MoE run with ``moe_ep`` > 1 whose routing is not balanced (`IMBALANCE_COLUMNS`,
``Workload.expert_imbalance``; blank: 1; a file may leave it out); the run's own engine settings
where its configuration is published (`SETTING_COLUMNS`,
blank: its engine's; a file may leave them out): ``scheduler_delay_steps``, the steps a request's
first token waits for the scheduler, ``gemm_kernels``, whose GEMM kernels the run computed
with (one of `jaxpareto.definitions.hardware.GEMM_KERNELS`: the GPU's measurements of them apply
under ``gemm_rate="measured"``), ``prefill_chunk_tokens``, the tokens one engine step
carries at most (the runtime TensorRT-LLM ``max_num_tokens``, not the engine build's; vLLM
``max_num_batched_tokens``; per step, which each of a pipeline's stages carries), and
``cuda_graph_batch_step``, the step between the batch sizes of the CUDA graphs the run pads its
decode steps to (TensorRT-LLM's ``cuda_graph_batch_sizes`` with ``cuda_graph_padding_enabled``),
``max_running_requests``, the requests one engine instance runs at once at most (TensorRT-LLM's
runtime ``max_batch_size``, vLLM's ``max_num_seqs``), and ``decode_tokens_in_budget``, 1 where
the run's decode tokens count against ``prefill_chunk_tokens`` (vLLM, TensorRT-LLM), 0 where not
(`jaxpareto.definitions.engine.Engine`). Rows whose layout
the model cannot express yet load like any other, and
`unsupported_reason` (the loaded ``unsupported`` column) says why; they are kept, never
approximated.

``jaxpareto/data/aiconfigurator_silicon.csv`` is a second set in this schema: AIConfigurator's
measured serving runs (mean TTFT and TPOT at a fixed concurrency, vLLM, SGLang and TensorRT-LLM
on H100, H200, B200, B300 and GB200), converted by ``scripts/import_aiconfigurator.py``, which
states its rules and per-row assumptions.
"""

from __future__ import annotations

import importlib.resources
import math
from pathlib import Path

import pandas as pd

from jaxpareto.definitions import catalog
from jaxpareto.definitions.checks import check_number
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import GEMM_KERNELS, Hardware
from jaxpareto.definitions.model import Model
from jaxpareto.definitions.settings import Workload, numeric_fields
from jaxpareto.definitions.units import KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES

#: config.json of meta-llama/Llama-2-70b-hf, as copied at huggingface.co/TheBloke/Llama-2-70B-fp16
#: (``_name_or_path`` meta-llama/Llama-2-70b-hf): the Llama-3.1-70B layout (80 layers, 64 heads,
#: 8 KV heads, hidden 8192, intermediate 28672) with a 32,000-token vocabulary.
LLAMA_2_70B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 32000,
}

#: Llama-2-70B(-Chat), the MLPerf llama2-70b model, built from `LLAMA_2_70B_CONFIG` by
#: `jaxpareto.definitions.hf_config` (68.98 B parameters).
LLAMA_2_70B = Model.from_hf_config(LLAMA_2_70B_CONFIG, name="llama-2-70b", weight_dtype="fp16").model_copy(
    update={"sources": {
        "config": "config.json of meta-llama/Llama-2-70b-hf (copy at huggingface.co/TheBloke/Llama-2-70B-fp16)",
        "params_total_b": "counted from that config.json by jaxpareto.definitions.hf_config: 68.98 B",
    }})

#: Models the validation set may name besides the catalog's.
EXTRA_MODELS: dict[str, Model] = {LLAMA_2_70B.name: LLAMA_2_70B}

#: What each metric measures and its unit.
METRICS: dict[str, tuple[str, str]] = {
    "output_tokens_per_s_total": ("tokens/s", "output tokens per second of the whole system (all `gpus`)"),
    "tpot_ms": ("ms", "time per output token after the first"),
    "itl_ms": ("ms", "inter-token latency (the model's TPOT)"),
    "ttft_ms": ("ms", "time to first token"),
    "kv_capacity_tokens": ("tokens", "KV-cache capacity of one TP group"),
}
#: What the measurement was taken at: ``offline`` (maximum throughput: as many sessions as KV
#: memory admits, or the row's concurrency), ``server`` (a served throughput,
#: ``load_tokens_per_s``), ``concurrency`` (the row's concurrency), ``static`` (no load).
LOADS = ("offline", "server", "concurrency", "static")
STATISTICS = ("mean", "median", "fit", "exact")
#: Serving engines a row may name (``engine``; blank: not given).
ENGINES = ("vllm", "sglang", "trtllm")
#: ``agg``: prefill and decode share the GPUs; ``disagg``: separate prefill and decode workers.
MODES = ("agg", "disagg")

# column -> kind: "str" (non-empty), "opt_str" (may be blank), "int", "opt_int" (blank: a
# default, see `_LAYOUT_DEFAULTS`), "num", "opt_num" (> 0), "opt_workload" (the bounds of the
# `Workload` field of that name), "opt_steps" (>= 0), "opt_kernels" (blank or one of `GEMM_KERNELS`),
# "opt_flag" (blank, 0 or 1)
COLUMNS: dict[str, str] = {
    "id": "str",
    "source": "str",
    "reference": "str",
    "engine": "opt_str",
    "engine_version": "opt_str",
    "model": "str",
    "gpu": "str",
    "gpus": "int",
    "tp": "int",
    "pp": "opt_int",
    "attention_dp": "opt_int",
    "moe_tp": "opt_int",
    "moe_ep": "opt_int",
    "expert_imbalance": "opt_workload",
    "mode": "opt_str",
    "prefill_workers": "opt_int",
    "prefill_tp": "opt_int",
    "decode_workers": "opt_int",
    "weight_dtype": "str",
    "expert_weight_dtype": "opt_str",
    "kv_dtype": "str",
    "isl": "num",
    "osl": "num",
    "context_tokens": "opt_num",
    "isl_cv": "opt_workload",
    "osl_cv": "opt_workload",
    "arrival_cv": "opt_workload",
    "concurrency": "opt_num",
    "load": "str",
    "load_tokens_per_s": "opt_num",
    "capacity_tokens_per_s": "opt_num",
    "scheduler_delay_steps": "opt_steps",
    "gemm_kernels": "opt_kernels",
    "prefill_chunk_tokens": "opt_int",
    "cuda_graph_batch_step": "opt_int",
    "max_running_requests": "opt_int",
    "decode_tokens_in_budget": "opt_flag",
    "metric": "str",
    "statistic": "str",
    "value": "num",
    "unit": "str",
    "notes": "opt_str",
}

#: A disaggregated run's pools (``mode`` disagg): P prefill workers of ``prefill_tp`` GPUs and D
#: decode workers of ``tp`` GPUs (x ``attention_dp`` x ``pp``). Optional in a file: a CSV written
#: before they existed loads with them blank.
DISAGGREGATION_COLUMNS = ("prefill_workers", "prefill_tp", "decode_workers")

#: The spread of a row's request lengths: coefficients of variation (standard deviation / mean) of
#: the prompt and output tokens, blank for fixed lengths (``Workload.isl_cv``, ``osl_cv``). Optional
#: in a file: a CSV written before they existed loads with them blank.
SPREAD_COLUMNS = ("isl_cv", "osl_cv")
#: How regularly a server row's requests reach one replica: the coefficient of variation of their
#: gaps (``Workload.arrival_cv``; blank: 1, Poisson), where the run's front end is known to deal a
#: Poisson stream over its replicas more evenly. Optional in a file.
ARRIVAL_COLUMNS = ("arrival_cv",)
#: The run's own engine settings where its configuration is published, over its engine's
#: (`jaxpareto.definitions.engine.Engine`; blank: the engine's). Optional in a file.
SETTING_COLUMNS = ("scheduler_delay_steps", "gemm_kernels", "prefill_chunk_tokens", "cuda_graph_batch_step",
                   "max_running_requests", "decode_tokens_in_budget")
#: The tokens the busiest expert-parallel GPU receives over the mean where the run's routing is
#: known to be unbalanced (``Workload.expert_imbalance``; blank: 1, balanced). Optional in a file.
IMBALANCE_COLUMNS = ("expert_imbalance",)
#: The bounds of the columns that are `Workload` fields (`check_number`'s keywords).
WORKLOAD_BOUNDS = {f.name: f.metadata["bounds"] for f in numeric_fields(Workload)
                   if f.name in SPREAD_COLUMNS + ARRIVAL_COLUMNS + IMBALANCE_COLUMNS}

#: Values of blank layout columns: pipeline stages, attention data-parallel ranks, MoE tensor- and
#: expert-parallel ways (``moe_tp`` blank: the row's ``tp``).
_LAYOUT_DEFAULTS = {"pp": 1, "attention_dp": 1, "moe_tp": None, "moe_ep": 1}


def default_path() -> Path:
    """The shipped ``jaxpareto/data/validation.csv``."""
    return Path(str(importlib.resources.files("jaxpareto").joinpath("data/validation.csv")))


def _where(row_id: str, line: int, field: str) -> str:
    return f"validation row {row_id!r} (line {line}).{field}"


def _parse(kind: str, text: str, where: str, column: str = ""):
    text = text.strip()
    if kind in ("str", "opt_str"):
        if kind == "str" and not text:
            raise JaxparetoError(where, "is empty")
        return text
    if kind == "opt_kernels":
        if text and text not in GEMM_KERNELS:
            raise JaxparetoError(where, f"unknown GEMM kernels {text!r}", list(GEMM_KERNELS))
        return text
    if not text:
        if kind.startswith("opt_"):
            return math.nan
        raise JaxparetoError(where, "is empty")
    try:
        number = float(text)
    except ValueError:
        raise JaxparetoError(where, f"not a number: {text!r}") from None
    if kind == "opt_workload":  # a spread, the arrivals' CV or the expert imbalance: the Workload field's bounds
        return check_number(where, number, **WORKLOAD_BOUNDS[column])
    if kind == "opt_flag":
        if number not in (0.0, 1.0):
            raise JaxparetoError(where, f"must be 0 or 1 (or blank), got {text!r}")
        return number
    if kind == "opt_steps":  # engine steps (the engine's scheduler_delay_steps bounds)
        if not math.isfinite(number) or not 0 <= number <= 1000:
            raise JaxparetoError(where, f"must be a number of engine steps in [0, 1000], got {text!r}")
        return number
    if not math.isfinite(number) or number <= 0:
        raise JaxparetoError(where, f"must be a finite number > 0, got {text!r}")
    if kind in ("int", "opt_int"):
        if not number.is_integer():
            raise JaxparetoError(where, f"must be a whole number, got {text!r}")
        return int(number)
    return number


def _check_row(row: dict, where) -> None:
    models = {**catalog.models(), **EXTRA_MODELS}
    if row["model"] not in models:
        raise JaxparetoError(where("model"), f"unknown model {row['model']!r}", sorted(models))
    if row["gpu"] not in catalog.gpus():
        raise JaxparetoError(where("gpu"), f"unknown GPU {row['gpu']!r}", sorted(catalog.gpus()))
    pools = [row[name] for name in DISAGGREGATION_COLUMNS]
    given = [not math.isnan(v) for v in pools]
    if any(given) and (row["mode"] != "disagg" or not all(given)):
        raise JaxparetoError(where("prefill_workers"), "prefill_workers, prefill_tp and decode_workers describe a "
                                                       "disaggregated run (mode disagg), all three together")
    if all(given):
        workers, prefill_tp, decoders = (int(v) for v in pools)
        decode_gpus = decoders * row["tp"] * int(_or(row["attention_dp"], 1)) * int(_or(row["pp"], 1))
        if workers * prefill_tp + decode_gpus != row["gpus"]:
            raise JaxparetoError(where("gpus"), f"{row['gpus']} GPUs, but the pools have {workers} x {prefill_tp} "
                                                f"prefill and {decode_gpus} decode GPUs")
    elif row["gpus"] % row["tp"]:
        raise JaxparetoError(where("tp"), f"the {row['gpus']} GPUs do not split into TP groups of {row['tp']}")
    elif row["mode"] != "disagg":  # (a disaggregated run's GPUs are its two pools')
        replica = row["tp"] * int(_or(row["attention_dp"], 1)) * int(_or(row["pp"], 1))
        if row["gpus"] % replica:
            raise JaxparetoError(where("gpus"), f"the {row['gpus']} GPUs do not split into replicas of {replica} "
                                                "(tp x attention_dp x pp)")
    for field in ("isl", "osl"):
        if row[field] < 1:
            raise JaxparetoError(where(field), f"must be at least one token, got {row[field]}")
    if not math.isnan(row["context_tokens"]) and row["context_tokens"] < row["isl"]:
        raise JaxparetoError(where("context_tokens"), f"the context ({row['context_tokens']:g}) holds the prompt "
                                                      f"(isl {row['isl']:g}) at least")
    for field, allowed in (("weight_dtype", WEIGHT_DTYPE_BYTES), ("kv_dtype", KV_DTYPE_BYTES), ("load", LOADS),
                           ("metric", METRICS), ("statistic", STATISTICS), ("mode", MODES)):
        if row[field] not in allowed:
            raise JaxparetoError(where(field), f"unknown value {row[field]!r}", list(allowed))
    for field, allowed in (("expert_weight_dtype", WEIGHT_DTYPE_BYTES), ("engine", ENGINES)):
        if row[field] and row[field] not in allowed:
            raise JaxparetoError(where(field), f"unknown value {row[field]!r}", ["", *allowed])
    unit = METRICS[row["metric"]][0]
    if row["unit"] != unit:
        raise JaxparetoError(where("unit"), f"{row['metric']} is measured in {unit}, got {row['unit']!r}", [unit])
    server = row["load"] == "server"
    if server == math.isnan(row["load_tokens_per_s"]):
        raise JaxparetoError(where("load_tokens_per_s"), "is required for (only for) load 'server' rows")
    capacity = row["capacity_tokens_per_s"]
    if not math.isnan(capacity) and not (server and capacity >= row["load_tokens_per_s"]):
        raise JaxparetoError(where("capacity_tokens_per_s"), "only server rows give it, and it is at least their "
                                                              "load_tokens_per_s")
    if not math.isnan(row["arrival_cv"]) and not server:
        raise JaxparetoError(where("arrival_cv"), "is how a server row's requests arrive at a replica: only load "
                                                  "'server' rows give it")
    if row["load"] == "concurrency" and math.isnan(row["concurrency"]):
        raise JaxparetoError(where("concurrency"), "is required for load 'concurrency' rows")
    if not math.isnan(row["concurrency"]) and (row["concurrency"] < 1 or not float(row["concurrency"]).is_integer()):
        raise JaxparetoError(where("concurrency"), f"must be a whole number >= 1 (requests in flight), got "
                                                   f"{row['concurrency']}")
    if server and row["metric"] not in ("ttft_ms", "tpot_ms", "itl_ms"):
        raise JaxparetoError(where("metric"), "a server row measures a latency at its load", ["ttft_ms", "tpot_ms",
                                                                                               "itl_ms"])
    if not math.isnan(row["cuda_graph_batch_step"]) and row["mode"] == "disagg":
        raise JaxparetoError(where("cuda_graph_batch_step"), "a disaggregated run's CUDA-graph padding is not "
                                                             "modelled: leave it blank")
    imbalance, model = row["expert_imbalance"], models[row["model"]]
    if not math.isnan(imbalance) and imbalance != 1 and not (model.experts and _or(row["moe_ep"], 1) > 1):
        raise JaxparetoError(where("expert_imbalance"), "is the busiest expert-parallel GPU's share of the routed "
                                                        "tokens: it needs a MoE model with moe_ep > 1 (blank or 1 "
                                                        "otherwise)")
    if (row["metric"] == "kv_capacity_tokens") != (row["load"] == "static"):
        raise JaxparetoError(where("load"), "kv_capacity_tokens rows, and only they, have load 'static'")
    try:
        row_model(row)
    except ValueError as error:  # pydantic's ValidationError: e.g. expert_weight_dtype on a dense model
        raise JaxparetoError(where("model"), f"{row['model']} with these dtypes is not a valid model: "
                                             f"{str(error).splitlines()[-1].strip()}") from None


def load_validation_set(path: str | Path | None = None) -> pd.DataFrame:
    """Read and check the validation set.

    Args:
        path: a CSV with the columns of `COLUMNS`; default the shipped
            ``jaxpareto/data/validation.csv``.

    Returns:
        One row per measurement, columns as in `COLUMNS` and ``unsupported`` (`unsupported_reason`,
        "" for a layout the model expresses): strings (blank optional strings as "", blank
        ``mode`` as "agg"), ``gpus``, ``tp``, ``pp``, ``attention_dp``, ``moe_tp``, ``moe_ep``
        as int (blank: 1, 1, ``tp``, 1), numbers as float (blank optional numbers NaN). Units:
        ``isl``, ``osl``, ``context_tokens`` in tokens, ``concurrency`` in sessions,
        ``load_tokens_per_s`` in output tokens/s of the whole system (``capacity_tokens_per_s``: the
        same system's measured offline throughput, given for server rows), ``value`` in ``unit``.

    Raises:
        JaxparetoError: a missing or unknown column, or a row with a bad field (empty
            ``source``/``reference``, unknown model, GPU, dtype, load, metric, statistic,
            engine or mode, a non-positive number, a layout size that is not a whole number, a
            unit that does not match the metric, GPUs that do not split into TP groups, a server
            row without its load...), naming the row's id, its line and the field; a duplicate
            id; an unreadable file.
    """
    path = default_path() if path is None else Path(path)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise JaxparetoError("validation set", f"{path}: not a readable CSV ({str(error).strip()})"
                                               f"{_separator_hint(path)}") from None
    except OSError as error:  # missing file, a folder, no permission
        raise JaxparetoError("validation set", f"cannot read {path}: {error.strerror or error}") from None
    return _checked(raw, path)


def check_validation_set(rows: pd.DataFrame) -> pd.DataFrame:
    """A DataFrame of validation rows (one from `load_validation_set`, edited or not, or built by
    hand with the columns of `COLUMNS`) checked as `load_validation_set` checks a file: the same
    table back, or the same errors (rows are named by id and by their position, line 2 being the
    first).

    Raises:
        JaxparetoError: as `load_validation_set`.
    """
    raw = rows.drop(columns=["unsupported"], errors="ignore").reset_index(drop=True)
    raw = raw.apply(lambda column: column.map(_as_text))
    return _checked(raw, "rows")


def _separator_hint(source, header: bool = False) -> str:
    """" (its header holds ';': ...)" where the header line (``source``: a path, or the header
    itself) holds ';', a tab or '|' (a file separated by them reads as one column), else ""."""
    if header:
        line = source
    else:
        try:
            with Path(source).open(encoding="utf-8", errors="replace") as file:
                line = file.readline()
        except OSError:
            return ""
    other = next((sep for sep in (";", "\t", "|") if sep in line), None)
    return f" (its header holds {other!r}: the file must be comma-separated)" if other else ""


def _as_text(value) -> str:
    """A cell as the CSV would hold it: blank for a missing value, integral floats without a point."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _checked(raw: pd.DataFrame, path) -> pd.DataFrame:
    """`load_validation_set`'s checks of ``raw`` (every cell a string), read from ``path``."""
    for name in DISAGGREGATION_COLUMNS + SPREAD_COLUMNS + ARRIVAL_COLUMNS + SETTING_COLUMNS + IMBALANCE_COLUMNS:
        if name not in raw.columns:
            raw[name] = ""
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        # a file separated by other than commas reads as one column holding every name
        hint = _separator_hint(",".join(map(str, raw.columns)), header=True)
        spaced = [c for c in raw.columns if str(c) != str(c).strip() and str(c).strip() in COLUMNS]
        hint += f" (names with spaces around them: {spaced[:3]})" if spaced else ""
        raise JaxparetoError("validation set columns", f"{path}: missing {missing}{hint}", list(COLUMNS))
    unknown = [c for c in raw.columns if c not in COLUMNS]
    if unknown:
        raise JaxparetoError("validation set columns", f"{path}: unknown {unknown}", list(COLUMNS))
    rows, seen = [], set()
    for index, record in enumerate(raw.to_dict("records")):
        line = index + 2  # the header is line 1
        row_id = record["id"].strip() or f"#{index}"

        def where(field, row_id=row_id, line=line):
            return _where(row_id, line, field)

        row = {name: _parse(kind, record[name], where(name), name) for name, kind in COLUMNS.items()}
        _fill_defaults(row)
        if row["id"] in seen:
            raise JaxparetoError(where("id"), "duplicate id")
        seen.add(row["id"])
        _check_row(row, where)
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["unsupported"] = [unsupported_reason(row) for row in rows]
    return table.astype({name: "int64" for name in ("gpus", "tp", *_LAYOUT_DEFAULTS)})


def _fill_defaults(row: dict) -> None:
    """Blank ``mode`` and layout columns of a parsed row to their defaults (`_LAYOUT_DEFAULTS`)."""
    row["mode"] = row["mode"] or "agg"
    for name, default in _LAYOUT_DEFAULTS.items():
        if math.isnan(row[name]):
            row[name] = row["tp"] if default is None else default


def _or(value, default):
    """``value``, or ``default`` where it is blank (NaN)."""
    return default if value is None or (isinstance(value, float) and math.isnan(value)) else value


def unsupported_reason(row) -> str:
    """Why the model cannot express a row's serving layout yet, "" when it can.

    The model serves a replica of ``attention_dp`` TP groups of ``tp`` GPUs each, the experts
    spread over all of them (by ``moe_ep`` and ``moe_tp``; `jaxpareto.physics.layout`), with
    prefill and decode on the same GPUs or in the pools of a disaggregated run. Reasons, joined
    with "; ": attention DP or PP in a disaggregated run's pool, a disaggregated run whose prefill pool is not given (the importer leaves it
    blank where the prefill workers use attention DP or PP), for MoE models an expert split ``moe_tp`` x ``moe_ep`` other than ``tp`` x ``attention_dp``
    GPUs, and a ``tp`` that does not divide the model's attention heads (vLLM, SGLang and
    TensorRT-LLM shard whole heads: such a run used a layout the row does not give).

    Args:
        row: a row of `load_validation_set` (a mapping; blank layout fields take their defaults).
    """
    tp = int(row["tp"])
    sizes = []
    for name, default in _LAYOUT_DEFAULTS.items():
        value = row.get(name)
        blank = value is None or value == "" or pd.isna(value)
        sizes.append((tp if default is None else default) if blank else int(value))
    pp, attention_dp, moe_tp, moe_ep = sizes
    reasons = []
    pools = [row.get(name) for name in DISAGGREGATION_COLUMNS]
    if (row.get("mode") or "agg") == "disagg" and any(v is None or v == "" or pd.isna(v) for v in pools):
        reasons.append("disaggregated prefill/decode without its prefill pool (prefill_workers, prefill_tp, "
                       "decode_workers)")
    if (attention_dp > 1 or pp > 1) and (row.get("mode") or "agg") == "disagg":  # pools of TP groups
        reasons.append(f"attention data parallelism (attention_dp {attention_dp}) or pipeline parallelism (pp {pp}) "
                       "in a disaggregated pool")
    model = {**catalog.models(), **EXTRA_MODELS}.get(row["model"])
    if model is not None and model.experts and moe_tp * moe_ep != tp * attention_dp:
        reasons.append(f"MoE split moe_tp {moe_tp} x moe_ep {moe_ep} over tp {tp} x attention_dp {attention_dp} "
                       f"GPUs")
    if model is not None and model.attention_heads and model.attention_heads % tp:
        reasons.append(f"tp {tp} does not divide the {model.attention_heads} attention heads")
    return "; ".join(reasons)


#: Bits of scales per weight of NVFP4, the 4-bit float format of every measured FP4 run.
NVFP4_SCALE_BITS = 8 / 16


def row_model(row) -> Model:
    """The `Model` a row describes: its catalog (or `EXTRA_MODELS`) entry with the row's
    ``weight_dtype``, ``expert_weight_dtype`` (MoE only; blank keeps the entry's) and ``kv_dtype``."""
    base = {**catalog.models(), **EXTRA_MODELS}[row["model"]]
    fields = base.model_dump()
    fields.update(weight_dtype=row["weight_dtype"], kv_dtype=row["kv_dtype"])
    if row["expert_weight_dtype"]:
        fields["expert_weight_dtype"] = row["expert_weight_dtype"]
    elif base.expert_weight_dtype is None:
        fields["expert_weight_dtype"] = None
    dtypes = {fields["weight_dtype"], fields["expert_weight_dtype"] or fields["weight_dtype"]}
    if dtypes != {base.weight_dtype, base.expert_dtype}:
        # another checkpoint than the entry's: its scales are those of the measured runs' format
        # (NVFP4: an FP8 scale per 16 weights; FP8 per tensor or per 128 x 128 block: ~0)
        fields["weight_scale_bits"] = NVFP4_SCALE_BITS if "fp4" in dtypes else 0.0
    return Model(**fields)


def row_gpu(row) -> Hardware:
    """The catalog `Hardware` of a row."""
    return catalog.gpus()[row["gpu"]]
