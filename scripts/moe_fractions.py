"""The rate and offset of a MoE layer's grouped GEMMs on each GPU, per format, from
AIConfigurator's measured MoE layers: the ``gemm_moe_fraction_*`` and ``gemm_moe_offset_tokens_*``
values of ``jaxpareto/data/catalog.toml`` (used under ``gemm_rate="measured"`` for the routed
experts' matmuls; docs/model.md, "Measured matmul rate").

Source: ``aiconfigurator_core/systems/data/<gpu>/moe/<engine>/<version>/moe_perf.parquet`` of the
pip package ``aiconfigurator-core`` 0.12.0 (Apache-2.0): the latency [ms] of one MoE layer
(routing, the grouped gate/up and down projections, the reduction) by token count, shape,
format, expert and tensor parallelism and kernel, measured by NVIDIA with each engine's kernels.

Rule, per GPU and format (``bfloat16`` -> fp16, ``fp8`` per-tensor -> fp8, ``nvfp4`` -> fp4, as
the dense GEMMs' ``scripts/gemm_fractions.py``; DeepSeek's block-scaled ``fp8_block`` experts run
other kernels, 0.5-0.7x as fast on H200, and are left out):

- layers: one 8-GPU expert-parallel group (``moe_ep_size`` `EXPERT_PARALLEL`, ``moe_tp_size`` 1:
  experts whole on each GPU, the layout of the validation set's MoE rows and of most
  deployments; fewer experts per GPU fill it less, more fill it better: TensorRT-LLM's FP8
  layers on H200 reach 1,097 TFLOPS at 16 experts per GPU and 1,294 at 128), at least
  `MIN_LOCAL_EXPERTS` experts per GPU, a hidden size of `MIN_HIDDEN` or more (the experts of
  large MoE models, as the dense GEMMs' rule takes a large model's projections: an expert's
  problem of a smaller model fills the GPU less, Qwen3-30B-A3B's 2,048 x 768 layers reach 0.29 of
  H200's FP8 peak with TensorRT-LLM, DeepSeek-V3's 7,168 x 2,048 0.67), tokens spread evenly
  over the experts (``distribution="balanced"``), every token count of `TOKENS`, and gated
  experts (the kernels named ``nongated`` run an up and a down projection only, 4 x hidden x
  intermediate FLOPs a pair, and are left out);
- per layer: the fastest kernel at each count, and the straight line latency = a + s x pairs
  through those latencies (least squares on relative error), where pairs = tokens x K / ep are
  the GPU's token-expert pairs. Its slope is the rate a routed expert's token reaches:
  6 x hidden x intermediate FLOPs (gate, up and down projections) per pair / s, as a share of
  the catalog's dense peak (``gemm_moe_fraction``); its intercept, per local expert, is the
  offset m_0 of one expert's GEMM in tokens at that rate, a / (s x E / ep)
  (``gemm_moe_offset_tokens``: a layer of p pairs over n touched experts takes as long as
  p + n m_0 pairs at the rate). Over 512-16,384 tokens the line is within 15 % of every
  measured layer of the validation set's MoE models;
- tables whose expert parallelism does not divide the work are left out: where a layer over 8
  GPUs takes less than half as long per GPU as on one (the median over the layers measured both
  ways, at 16,384 tokens; SGLang 0.5.10's, whose 8-way layers take as long as whole ones);
- per engine version: the median over the layers; the GPU's value: the median over its
  engines' version tables (an engine with two versions counts each); per engine (the
  ``[gpu.<name>.engine_gemm.<engine>]`` tables): the median over that engine's versions.

Reading parquet needs ``pandas`` and ``pyarrow``, which jaxpareto itself does not; run this in an
environment that has them (``pip install aiconfigurator-core==0.12.0 pandas pyarrow``).

Usage: python scripts/moe_fractions.py [--data PATH/TO/aiconfigurator_core/systems/data]
"""

from __future__ import annotations

import statistics
from pathlib import Path

from _common import aiconfigurator_data, per_engine_medians
from gemm_fractions import GPUS
from jaxpareto.definitions import catalog
from jaxpareto.definitions.hardware import GEMM_KERNELS

# the source's moe_dtype -> the catalog's precision
FORMATS = {"bfloat16": "fp16", "fp8": "fp8", "nvfp4": "fp4"}
TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
MIN_LOCAL_EXPERTS = 16
MIN_HIDDEN = 4096
EXPERT_PARALLEL = 8
MIN_SPEEDUP = 2.0  # a layer over EXPERT_PARALLEL GPUs at least this much faster than whole
SHAPE = ["hidden_size", "inter_size", "num_experts", "topk", "moe_ep_size"]



def expert_parallel_divides(rows) -> bool:
    """Whether a table's layers over `EXPERT_PARALLEL` GPUs are at least `MIN_SPEEDUP` times
    faster than whole on one, the median over the layers measured both ways at the largest of
    `TOKENS` (no such layer: True)."""
    import statistics as stats

    largest = rows[rows.num_tokens == TOKENS[-1]]
    ratios = []
    for _, layer in largest.groupby(["moe_dtype", *SHAPE[:-1]]):
        fastest = layer.groupby("moe_ep_size").latency.min()
        if 1 in fastest.index and EXPERT_PARALLEL in fastest.index:
            ratios.append(fastest[1] / fastest[EXPERT_PARALLEL])
    return not ratios or stats.median(ratios) >= MIN_SPEEDUP


def layer_lines(path: Path, precision: str, peak_tflops: float) -> list[tuple[float, float]]:
    """(share of ``peak_tflops``, m_0 per local expert [tokens]) of every qualifying layer of one
    engine version's table (module docstring)."""
    import numpy as np
    import pandas as pd

    table = pd.read_parquet(path)
    formats = [source for source, target in FORMATS.items() if target == precision]
    whole = table[table.moe_dtype.isin(formats) & (table.moe_tp_size == 1) & (table.distribution == "balanced")
                  & table.num_tokens.isin(TOKENS) & ~table.kernel_source.str.contains("nongated")]
    if not expert_parallel_divides(whole):
        return []
    rows = whole[(whole.moe_ep_size == EXPERT_PARALLEL)
                 & (whole.num_experts / whole.moe_ep_size >= MIN_LOCAL_EXPERTS) & (whole.hidden_size >= MIN_HIDDEN)]
    lines = []
    for shape, layer in rows.groupby(["moe_dtype", *SHAPE]):
        _, hidden, inter, experts, k, ep = shape
        fastest = layer.groupby("num_tokens").latency.min()
        if len(fastest) < len(TOKENS):
            continue
        pairs = fastest.index.to_numpy(float) * k / ep
        latency = fastest.to_numpy(float)
        design = np.stack([np.ones_like(pairs), pairs], axis=1) / latency[:, None]
        intercept, slope = np.linalg.lstsq(design, np.ones_like(latency), rcond=None)[0]
        if slope <= 0:
            continue
        tflops = 6.0 * hidden * inter / (slope * 1e-3) / 1e12
        lines.append((tflops / peak_tflops, max(intercept, 0.0) / slope / (experts / ep)))
    return lines


def main() -> None:
    data = aiconfigurator_data(__doc__.splitlines()[0])
    for system, name in GPUS.items():
        gpu = catalog.gpus()[name]
        for precision in dict.fromkeys(FORMATS.values()):
            peak = getattr(gpu, f"tflops_{precision}")
            if peak is None:
                continue
            shares, offsets = {}, {}
            for path in sorted(data.glob(f"{system}/moe/*/*/moe_perf.parquet")):
                lines = layer_lines(path, precision, peak)
                if lines:
                    table = f"{path.parts[-3]} {path.parts[-2]}"
                    shares[table] = statistics.median(share for share, _ in lines)
                    offsets[table] = statistics.median(offset for _, offset in lines)
            if not shares:
                continue
            listed = ", ".join(f"{table} {share:.3f}" for table, share in shares.items())
            print(f"{name:14s} gemm_moe_fraction_{precision} = {statistics.median(shares.values()):.3f}  "
                  f"# of {peak:g} TFLOPS; {listed}")
            listed = ", ".join(f"{table} {offset:.0f}" for table, offset in offsets.items())
            print(f"{name:14s} gemm_moe_offset_tokens_{precision} = {statistics.median(offsets.values()):.0f}  "
                  f"# {listed}")
            engine_shares, engine_offsets = per_engine_medians(shares), per_engine_medians(offsets)
            for kernels in GEMM_KERNELS:  # each engine's own kernels: the median over its versions
                if kernels in engine_shares:
                    print(f"{name:14s} engine_gemm.{kernels}.gemm_moe_fraction_{precision} = "
                          f"{engine_shares[kernels]:.3f}")
                    print(f"{name:14s} engine_gemm.{kernels}.gemm_moe_offset_tokens_{precision} = "
                          f"{engine_offsets[kernels]:.0f}")


if __name__ == "__main__":
    main()
