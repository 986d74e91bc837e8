"""The share of its dense datasheet peak that each GPU's large matrix multiplications reach, and
the tokens' worth of time a GEMM adds whatever its size, per format, from AIConfigurator's
measured GEMM tables: the ``gemm_fraction_*`` and ``gemm_offset_tokens_*`` values of
``jaxpareto/data/catalog.toml`` (used under ``gemm_rate="measured"``).

Source: ``aiconfigurator_core/systems/data/<gpu>/gemm/<engine>/<version>/gemm_perf.parquet`` of
the pip package ``aiconfigurator-core`` 0.12.0 (Apache-2.0; a dependency of ``aiconfigurator``):
the latency [ms] of one (M x K) by (K x N) product per kernel, measured by NVIDIA with each
engine's own kernels (vLLM, SGLang, TensorRT-LLM).

Rule, per GPU and format (``bfloat16`` -> fp16, ``fp8`` per-tensor -> fp8, ``nvfp4`` -> fp4):

- shapes: M (tokens) in 2,048-16,384 and N, K in {8192, 10240, 16384}, the sizes of a large
  model's projections under a prefill chunk or a full decode batch, where a GEMM is bound by
  its compute, not by reading its weights;
- per engine: the fastest kernel of each shape, its rate 2 M N K / latency, and the median of
  those rates over the shapes, as a share of the catalog's dense peak;
- the GPU's value: the median over its engines' tables (an engine with two versions counts
  each).

The offset m_0, per GPU and format: for each engine and shape (N, K as above), the straight line
through the fastest kernel's latencies at M = 512, 1,024, 2,048 and 4,096 tokens (least squares;
past the weights' read, before the rate levels off), m_0 = its intercept / its slope, the tokens'
worth of time the GEMM adds whatever M (its tiles' ramp and tail); the median over the shapes,
then over the engines, and 0 where that median is negative (no measurable offset).

Per engine (the ``[gpu.<name>.engine_gemm.<engine>]`` tables, which an engine naming its
``gemm_kernels`` computes at): the same two values of that engine's tables alone, the median over
its versions (SGLang's two on H100), and an offset 0 where negative.

Reading parquet needs ``pandas`` and ``pyarrow``, which jaxpareto itself does not; run this in an
environment that has them (``pip install aiconfigurator-core==0.12.0 pandas pyarrow``).

Usage: python scripts/gemm_fractions.py [--data PATH/TO/aiconfigurator_core/systems/data]
"""

from __future__ import annotations

import statistics
from pathlib import Path

from _common import aiconfigurator_data, per_engine_medians
from jaxpareto.definitions import catalog
from jaxpareto.definitions.hardware import GEMM_KERNELS

# AIConfigurator's system names -> the catalog's GPUs
GPUS = {"a100_sxm": "a100-sxm-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200",
        "gb200": "gb200", "b300_sxm": "b300", "l40s": "l40s"}
# the source's gemm_dtype -> the catalog's precision
FORMATS = {"bfloat16": "fp16", "fp8": "fp8", "nvfp4": "fp4"}
TOKENS = (2048, 4096, 8192, 16384)
SIZES = (8192, 10240, 16384)
RAMP_TOKENS = (512, 1024, 2048, 4096)



def fastest(path: Path, source_dtype: str, tokens: tuple[int, ...]):
    """The fastest kernel's latency [ms] per shape (M in ``tokens``, N and K in `SIZES`) of one
    engine's table, as a DataFrame with columns m, n, k, latency (empty: no rows)."""
    import pandas as pd

    table = pd.read_parquet(path)
    rows = table[(table.gemm_dtype == source_dtype) & table.m.isin(tokens) & table.n.isin(SIZES)
                 & table.k.isin(SIZES)]
    return rows.groupby(["m", "n", "k"]).latency.min().reset_index()


def table_fraction(path: Path, source_dtype: str, peak_tflops: float) -> float | None:
    """Median share of ``peak_tflops`` over the large shapes of one engine's table (None: no rows)."""
    best = fastest(path, source_dtype, TOKENS)
    if best.empty:
        return None
    tflops = 2.0 * best.m * best.n * best.k / (best.latency * 1e-3) / 1e12
    return float(statistics.median(tflops / peak_tflops))


def table_offset(path: Path, source_dtype: str) -> float | None:
    """Median m_0 [tokens] over the shapes of one engine's table (None: no shape with every
    `RAMP_TOKENS` size)."""
    import numpy as np

    best = fastest(path, source_dtype, RAMP_TOKENS)
    offsets = []
    for _, shape in best.groupby(["n", "k"]):
        if len(shape) == len(RAMP_TOKENS):
            slope, intercept = np.polyfit(shape.m.to_numpy(float), shape.latency.to_numpy(), 1)
            offsets.append(intercept / slope)
    return float(statistics.median(offsets)) if offsets else None


def main() -> None:
    data = aiconfigurator_data(__doc__.splitlines()[0])
    for system, name in GPUS.items():
        gpu = catalog.gpus()[name]
        for source_dtype, precision in FORMATS.items():
            peak = getattr(gpu, f"tflops_{precision}")
            if peak is None:
                continue
            shares, offsets = {}, {}
            for path in sorted(data.glob(f"{system}/gemm/*/*/gemm_perf.parquet")):
                engine = f"{path.parts[-3]} {path.parts[-2]}"
                share, offset = table_fraction(path, source_dtype, peak), table_offset(path, source_dtype)
                if share is not None:
                    shares[engine] = share
                if offset is not None:
                    offsets[engine] = offset
            if shares:
                tables = ", ".join(f"{engine} {share:.3f}" for engine, share in shares.items())
                print(f"{name:14s} gemm_fraction_{precision} = {statistics.median(shares.values()):.3f}  "
                      f"# of {peak:g} TFLOPS; {tables}")
            if offsets:
                tables = ", ".join(f"{engine} {offset:.0f}" for engine, offset in offsets.items())
                print(f"{name:14s} gemm_offset_tokens_{precision} = "
                      f"{max(statistics.median(offsets.values()), 0.0):.0f}  # {tables}")
            engine_shares, engine_offsets = per_engine_medians(shares), per_engine_medians(offsets)
            for kernels in GEMM_KERNELS:  # each engine's own kernels: the median over its versions
                if kernels in engine_shares:
                    print(f"{name:14s} engine_gemm.{kernels}.gemm_fraction_{precision} = {engine_shares[kernels]:.3f}")
                if kernels in engine_offsets:
                    print(f"{name:14s} engine_gemm.{kernels}.gemm_offset_tokens_{precision} = "
                          f"{max(engine_offsets[kernels], 0.0):.0f}")


if __name__ == "__main__":
    main()
