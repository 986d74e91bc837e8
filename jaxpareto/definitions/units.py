"""Unit conventions (docs/model.md) and byte widths of the numeric formats.

Every conversion factor used by the physics lives here, so that no bare ``1e3`` or ``1e9``
appears in the model's equations.
"""

from __future__ import annotations

BYTES_PER_GB = 1e9  # GB = 1e9 bytes, never GiB
PARAMS_PER_B = 1e9  # parameter counts are given in billions
FLOPS_PER_TFLOPS = 1e12
MS_PER_S = 1e3
FLOPS_PER_PARAM_PER_TOKEN = 2.0  # one multiply and one add per weight per token

# Bytes per stored weight, and the tensor-core precision the matmuls run at.
WEIGHT_DTYPE_BYTES: dict[str, float] = {
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "fp4": 0.5,  # NVFP4 / MXFP4
    "int4": 0.5,  # weight-only (W4A16): dequantised to 16-bit before the matmul
}
KV_DTYPE_BYTES: dict[str, float] = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0}

# Compute precision of each weight dtype, as the number of bits of the tensor-core format
# the seed assumes (section 5.1): int4 weight-only runs on 16-bit tensor cores.
COMPUTE_BITS: dict[str, int] = {"fp16": 16, "bf16": 16, "fp8": 8, "fp4": 4, "int4": 16}
# What a quantised checkpoint keeps in 16 bits (input table, head, norms, skipped modules).
UNQUANTISED_WEIGHT_BYTES = 2.0


def weight_bytes(dtype: str, scale_bits: float = 0.0) -> float:
    """Bytes per stored weight of ``dtype``, with ``scale_bits`` of group scales and zero points
    per weight when the format is quantised (not for fp16/bf16)."""
    quantised = WEIGHT_DTYPE_BYTES[dtype] < UNQUANTISED_WEIGHT_BYTES
    return WEIGHT_DTYPE_BYTES[dtype] + (scale_bits / 8.0 if quantised and scale_bits else 0.0)
