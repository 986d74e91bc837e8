"""One MoE layer's time as the model computes it against AIConfigurator's measured MoE layers:
whether a routed expert's GEMM pays an offset m_0 of its own, and at which rate the experts run.

The model (``gemm_rate="measured"``, docs/model.md, "Measured matmul rate") runs a GEMM of m
tokens as long as m + m_0 at a measured rate. A MoE layer is a grouped GEMM: the tokens routed
to each expert form a problem of their own, so a GPU pays m_0 once for every local expert its
tokens touch, not once for the layer. This script prints, per token count, the measured layer
and three readings of it:

- **grouped** (the model): max(weights / bandwidth, (pairs + touched x m_0) x per-pair time) at
  the grouped GEMMs' own measured rate and offset (the catalog's ``gemm_moe_fraction_*`` and
  ``gemm_moe_offset_tokens_*`` of TensorRT-LLM's kernels, `expert_tflops`,
  `expert_offset_tokens`; ``scripts/moe_fractions.py`` derives them from the same tables, over
  many layers);
- **dense, per expert**: the same at the dense GEMMs' rate and offset, what the model did
  before the grouped GEMMs' measurements;
- **dense, per layer**: max(weights / bandwidth, (pairs + K x m_0) x per-pair time) at the dense
  rate, what the model did before that, on one GPU per attention rank (the DeepSeek-R1 rows'
  layout; under TP G it charged 1/G of K x m_0 per GPU);

where, on one GPU of an ``ep``-way expert-parallel group, pairs = tokens x K / ep token-expert
pairs, touched = the local experts they reach (E / ep at most; the seed's routing, min(pairs,
E / ep)), a pair costs 3 x hidden x intermediate x 2 FLOPs (gate, up and down projections), and
the weights are the touched experts'. The measured layer also routes, permutes and reduces, which
the dense readings do not count and the grouped one holds in its offset.

Source: ``aiconfigurator_core/systems/data/<gpu>/moe/trtllm/<version>/moe_perf.parquet`` of the
pip package ``aiconfigurator-core`` 0.12.0 (Apache-2.0): the latency [ms] of one MoE layer by
token count, shape, format, expert parallelism and kernel, measured by NVIDIA with
TensorRT-LLM's kernels; tokens balanced over the experts (``distribution="balanced"``), the
fastest gated kernel at each count.

Reading parquet needs ``pandas`` and ``pyarrow``, which jaxpareto itself does not; run this in an
environment that has them (``pip install aiconfigurator-core==0.12.0 pandas pyarrow``).

Usage: python scripts/moe_offsets.py [--data PATH/TO/aiconfigurator_core/systems/data]
"""

from __future__ import annotations

import statistics
from pathlib import Path

from _common import aiconfigurator_data, markdown_table
from jaxpareto.definitions import catalog
from jaxpareto.definitions.hardware import GEMM_KERNELS, effective_tflops, engine_hardware, expert_offset_tokens, \
    expert_tflops, gemm_offset_tokens
from jaxpareto.definitions.units import COMPUTE_BITS

# (AIConfigurator system, catalog GPU, source format, catalog precision, weight bytes per
# parameter with its scales, model, hidden, intermediate, experts, K, ep): the MoE layers of the
# validation set's MoE rows (DeepSeek-R1 on B200 and GB200 under NVIDIA's launch script,
# Qwen3-235B-A22B in TensorRT-LLM's tables)
CASES = (
    ("b200_sxm", "b200", "nvfp4", "fp4", 0.5625, "DeepSeek-R1", 7168, 2048, 256, 8, 8),
    ("gb200", "gb200", "nvfp4", "fp4", 0.5625, "DeepSeek-R1", 7168, 2048, 256, 8, 8),
    ("h200_sxm", "h200-sxm", "fp8", "fp8", 1.0, "Qwen3-235B-A22B", 4096, 1536, 128, 8, 8),
    ("h100_sxm", "h100-sxm", "fp8", "fp8", 1.0, "Qwen3-235B-A22B", 4096, 1536, 128, 8, 8),
)
TOKENS = (64, 256, 1024, 2048, 4096, 8192, 16384)
KERNELS = "trtllm"



def measured_ms(data: Path, system: str, source_dtype: str, hidden: int, inter: int, experts: int, k: int,
                ep: int):
    """Token count -> the fastest balanced layer's latency [ms] over the TensorRT-LLM tables."""
    import pandas as pd

    paths = sorted(data.glob(f"{system}/moe/{KERNELS}/*/moe_perf.parquet"))
    table = pd.concat([pd.read_parquet(path) for path in paths])
    rows = table[(table.moe_dtype == source_dtype) & (table.hidden_size == hidden) & (table.inter_size == inter)
                 & (table.num_experts == experts) & (table.topk == k) & (table.moe_ep_size == ep)
                 & (table.moe_tp_size == 1) & (table.distribution == "balanced")
                 & ~table.kernel_source.str.contains("nongated")]
    return rows.groupby("num_tokens").latency.min().to_dict()


def model_ms(tokens: float, gpu, precision: str, weight_bytes: float, hidden: int, inter: int, experts: int, k: int,
             ep: int, reading: str) -> float:
    """One MoE layer on one GPU as the model computes it [ms] (module docstring), at the rate and
    offset the model takes for TensorRT-LLM's kernels (`engine_hardware`): ``reading`` "grouped"
    (`expert_tflops`, `expert_offset_tokens`), "per expert" or "per layer" (`effective_tflops`,
    `gemm_offset_tokens`)."""
    hw = engine_hardware(gpu.to_params(), 1 + GEMM_KERNELS.index(KERNELS))
    bits = COMPUTE_BITS[precision]
    if reading == "grouped":
        tflops, offset = float(expert_tflops(hw, bits, "measured")), float(expert_offset_tokens(hw, bits, "measured"))
    else:
        tflops, offset = float(effective_tflops(hw, bits, "measured")), float(gemm_offset_tokens(hw, bits, "measured"))
    pair_ms = 2.0 * 3.0 * hidden * inter / (tflops * 1e12) * 1e3
    pairs = tokens * k / ep
    touched = min(pairs, experts / ep)
    weights_ms = touched * 3.0 * hidden * inter * weight_bytes / (float(hw.bandwidth_gbs) * 1e9) * 1e3
    offsets = k if reading == "per layer" else touched
    return max(weights_ms, (pairs + offsets * offset) * pair_ms)


READINGS = ("grouped", "per expert", "per layer")


def main() -> None:
    data = aiconfigurator_data(__doc__.splitlines()[0])
    gpus = catalog.gpus()
    for system, name, source_dtype, precision, weight_bytes, model, hidden, inter, experts, k, ep in CASES:
        measured = measured_ms(data, system, source_dtype, hidden, inter, experts, k, ep)
        if not measured:
            print(f"{name}: no {source_dtype} rows for {model}'s layer in {data / system}")
            continue
        rows, ratios = [], {reading: [] for reading in READINGS}
        for tokens in TOKENS:
            if tokens not in measured:
                continue
            readings = {reading: model_ms(tokens, gpus[name], precision, weight_bytes, hidden, inter, experts, k,
                                          ep, reading) for reading in READINGS}
            for reading, value in readings.items():
                ratios[reading].append(value / measured[tokens])
            rows.append([f"{tokens:,}", f"{measured[tokens] * 1e3:.0f}",
                         *(f"{readings[reading] * 1e3:.0f}" for reading in READINGS)])
        medians = ", ".join(f"{statistics.median(ratios[reading]):.2f} {reading}" for reading in READINGS)
        print(f"\n{name}, {model}'s MoE layer ({source_dtype}, {experts} experts, K {k}, ep {ep}; "
              f"TensorRT-LLM kernels): model / measured, median {medians}\n")
        print(markdown_table(["tokens", "measured [µs]", "grouped GEMM (model) [µs]", "dense, m_0 per expert [µs]",
                              "dense, m_0 per layer [µs]"], rows))


if __name__ == "__main__":
    main()
