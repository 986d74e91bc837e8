"""GPU definitions (docs/model.md) and their numeric, traceable form.

`Hardware` is the validated definition a user writes or the catalog supplies; `HardwareParams`
is the frozen pytree of floats that the scalar physics receives (one GPU, or one row of a
table when the grid gathers it).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from jaxpareto.definitions.base import Definition, finite_positive
from jaxpareto.definitions.options import GEMM_RATES


#: GEMM kernel libraries a GPU may carry measurements of (`Hardware.engine_gemm`): each serving
#: engine runs its own (vLLM's CUTLASS and Triton kernels, SGLang's sgl-kernel, TensorRT-LLM's),
#: and they fill a GPU's tiles differently (AIConfigurator measures each engine's GEMMs apart)
GemmKernels = Literal["vllm", "sglang", "trtllm"]
GEMM_KERNELS: tuple[str, ...] = get_args(GemmKernels)
GEMM_PRECISIONS = ("fp16", "fp8", "fp4")
_GEMM_KINDS = ("fraction", "offset_tokens", "moe_fraction", "moe_offset_tokens")


class GemmMeasurements(Definition):
    """What a GPU's matrix multiplications measurably reach, per precision (used under
    ``gemm_rate="measured"``): `Hardware`'s own values (the medians over the engines measured),
    and, in `Hardware.engine_gemm`, those of one engine's kernels.

    Attributes:
        gemm_fraction_fp16, gemm_fraction_fp8, gemm_fraction_fp4: the share of the dense peak of
            that precision that large matrix multiplications reach, in (0, 1] (`effective_tflops`).
            None: not measured.
        gemm_offset_tokens_fp16, gemm_offset_tokens_fp8, gemm_offset_tokens_fp4: m_0 of that
            precision (>= 0): a GEMM of m tokens takes as long as m + m_0 at the large-GEMM rate
            (its tiles fill slowly; `gemm_offset_tokens`). None: not measured.
        gemm_moe_fraction_fp16, gemm_moe_fraction_fp8, gemm_moe_fraction_fp4: the share of the
            dense peak that a MoE layer's grouped GEMMs reach per routed token, in (0, 1]
            (`expert_tflops`). None: not measured (the routed experts compute as the dense
            matmuls do).
        gemm_moe_offset_tokens_fp16, gemm_moe_offset_tokens_fp8, gemm_moe_offset_tokens_fp4: m_0
            of one routed expert's GEMM in the grouped GEMM (>= 0): a MoE layer of p token-expert
            pairs over n experts takes as long as p + n m_0 pairs at its rate
            (`expert_offset_tokens`). None: not measured (the dense offset).

    Raises:
        pydantic.ValidationError (a ValueError) naming the field: a share outside (0, 1], a
        negative or non-finite offset, an unknown field.
    """

    gemm_fraction_fp16: float | None = pydantic.Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    gemm_fraction_fp8: float | None = pydantic.Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    gemm_fraction_fp4: float | None = pydantic.Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    gemm_offset_tokens_fp16: float | None = pydantic.Field(default=None, ge=0.0, allow_inf_nan=False)
    gemm_offset_tokens_fp8: float | None = pydantic.Field(default=None, ge=0.0, allow_inf_nan=False)
    gemm_offset_tokens_fp4: float | None = pydantic.Field(default=None, ge=0.0, allow_inf_nan=False)
    gemm_moe_fraction_fp16: float | None = pydantic.Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    gemm_moe_fraction_fp8: float | None = pydantic.Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    gemm_moe_fraction_fp4: float | None = pydantic.Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    gemm_moe_offset_tokens_fp16: float | None = pydantic.Field(default=None, ge=0.0, allow_inf_nan=False)
    gemm_moe_offset_tokens_fp8: float | None = pydantic.Field(default=None, ge=0.0, allow_inf_nan=False)
    gemm_moe_offset_tokens_fp4: float | None = pydantic.Field(default=None, ge=0.0, allow_inf_nan=False)


class Hardware(GemmMeasurements):
    """One GPU.

    Attributes:
        name: identifier used in the dataset's ``gpu`` coordinate.
        memory_gb: HBM capacity M_gpu per GPU [GB = 1e9 B], as the seed's memory budget (eq. 5)
            counts it.
        memory_reported_gb: the total the driver reports (``torch.cuda.mem_get_info()[1]``,
            ``cudaMemGetInfo``) [GB]: the memory an engine's ``gpu_memory_utilization`` is a
            share of (docs/model.md, "Engine memory"). None: ``memory_gb``. It differs from the
            nominal size both ways: an H100 "80 GB" is 80 GiB of HBM of which the driver reports
            79.19 GiB = 85.03 GB.
        bandwidth_gbs: peak HBM bandwidth BW per GPU [GB/s].
        tflops_fp16: dense FP16/BF16 tensor throughput [TFLOPS], no sparsity.
        tflops_fp8: dense FP8 throughput [TFLOPS]; None where the GPU has no FP8.
        tflops_fp4: dense FP4 (NVFP4/MXFP4) throughput [TFLOPS]; None where absent.
        interconnect_gbs: scale-up bandwidth per GPU, one direction [GB/s]; the all-reduce term's
            link (`jaxpareto.physics.communication`, opt-in).
        scaleup_domain_gpus: GPUs that share that link (an 8-GPU node; 72 for a GB200 NVL72
            rack); None: unlimited.
        scaleout_gbs: bandwidth per GPU beyond the scale-up domain, one direction [GB/s] (its
            NIC): the link of a TP group larger than the domain. None: unknown (the scale-up
            link is used).
        gemm_fraction_fp16, gemm_fraction_fp8, gemm_fraction_fp4: the share of the dense peak of
            that precision that large matrix multiplications measurably reach (in (0, 1]), used
            under ``gemm_rate="measured"`` (`effective_tflops`). None: not measured
            (`DEFAULT_GEMM_FRACTION` then).
        gemm_offset_tokens_fp16, gemm_offset_tokens_fp8, gemm_offset_tokens_fp4: m_0 of that
            precision (>= 0): a GEMM of m tokens measurably takes as long as m + m_0 at the
            large-GEMM rate (its tiles fill slowly), used under ``gemm_rate="measured"``
            (`gemm_offset_tokens`). None: not measured (`DEFAULT_GEMM_OFFSET_TOKENS` then).
        gemm_moe_fraction_fp16, gemm_moe_fraction_fp8, gemm_moe_fraction_fp4,
        gemm_moe_offset_tokens_fp16, gemm_moe_offset_tokens_fp8, gemm_moe_offset_tokens_fp4: the
            same for the routed experts of a MoE layer, whose tokens run as one grouped GEMM
            (one problem per expert), measured on whole MoE layers (`expert_tflops`,
            `expert_offset_tokens`); None: not measured (the experts compute as the dense
            matmuls do).
            These twelve are the GPU's own values: the medians over the engines measured.
        engine_gemm: engine kernels (one of `GEMM_KERNELS`) -> `GemmMeasurements`, the same
            measurements of that engine's own GEMM kernels; an engine whose ``gemm_kernels``
            names them computes at them (`engine_hardware`), the GPU's own values filling what
            they leave out. Empty: every engine at the GPU's values.
        sources: field name -> where its value comes from.

    Raises:
        pydantic.ValidationError (a ValueError) naming the field, for a missing, non-numeric,
        non-finite or non-positive number, an unknown field, or a ``gemm_*`` measurement of a
        precision without its ``tflops_*``.
    """

    name: str = pydantic.Field(min_length=1)
    memory_gb: float
    memory_reported_gb: float | None = None
    bandwidth_gbs: float
    tflops_fp16: float
    tflops_fp8: float | None = None
    tflops_fp4: float | None = None
    interconnect_gbs: float | None = None
    scaleup_domain_gpus: int | None = pydantic.Field(default=None, ge=1)
    scaleout_gbs: float | None = None
    engine_gemm: dict[GemmKernels, GemmMeasurements] = pydantic.Field(default_factory=dict)
    sources: dict[str, str] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator(
        "memory_gb", "memory_reported_gb", "bandwidth_gbs", "tflops_fp16", "tflops_fp8", "tflops_fp4",
        "interconnect_gbs", "scaleout_gbs"
    )
    @classmethod
    def _positive(cls, value, info):
        return finite_positive(value, info.field_name)

    @pydantic.model_validator(mode="after")
    def _measured_precisions(self):
        tables = {"": self, **{f"engine_gemm.{k}.": v for k, v in self.engine_gemm.items()}}
        for where, table in tables.items():
            for kind in _GEMM_KINDS:
                for precision in ("fp8", "fp4"):
                    field = f"gemm_{kind}_{precision}"
                    if getattr(table, field) is not None and getattr(self, f"tflops_{precision}") is None:
                        raise ValueError(f"{where}{field}: a measurement of {precision}, which this GPU has no "
                                         f"tflops_{precision} for")
        return self

    def to_params(self) -> "HardwareParams":
        """Numeric form for the physics; absent precisions become NaN."""
        nan = math.nan
        reported = self.memory_gb if self.memory_reported_gb is None else self.memory_reported_gb
        return HardwareParams(
            memory_gb=self.memory_gb,
            memory_reported_ratio=reported / self.memory_gb,
            bandwidth_gbs=self.bandwidth_gbs,
            tflops_fp16=self.tflops_fp16,
            tflops_fp8=nan if self.tflops_fp8 is None else self.tflops_fp8,
            tflops_fp4=nan if self.tflops_fp4 is None else self.tflops_fp4,
            interconnect_gbs=nan if self.interconnect_gbs is None else self.interconnect_gbs,
            scaleup_domain_gpus=math.inf if self.scaleup_domain_gpus is None else float(self.scaleup_domain_gpus),
            scaleout_gbs=nan if self.scaleout_gbs is None else self.scaleout_gbs,
            **{f"gemm_{kind}_{p}": nan if getattr(self, f"gemm_{kind}_{p}") is None
               else getattr(self, f"gemm_{kind}_{p}") for kind in _GEMM_KINDS for p in GEMM_PRECISIONS},
            **{f"gemm_{kind}_engines": self._engine_table(kind) for kind in _GEMM_KINDS},
        )

    def _engine_table(self, kind: str) -> np.ndarray:
        """(kernels, precisions) array of the engines' ``gemm_<kind>_*``, NaN where absent."""
        def value(kernels, precision):
            measured = self.engine_gemm.get(kernels)
            found = None if measured is None else getattr(measured, f"gemm_{kind}_{precision}")
            return math.nan if found is None else found
        return np.array([[value(k, p) for p in GEMM_PRECISIONS] for k in GEMM_KERNELS])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HardwareParams:
    """One GPU as scalars (or, stacked, a table with a leading GPU axis).

    Fields have the units of `Hardware`; ``tflops_fp8``/``tflops_fp4``/``interconnect_gbs``/
    ``scaleout_gbs``, the ``gemm_*fraction_*`` and ``gemm_*offset_tokens_*`` are NaN where absent,
    ``scaleup_domain_gpus`` inf. ``memory_reported_ratio`` is ``memory_reported_gb / memory_gb``, a
    ratio so that a what-if that scales ``memory_gb`` scales the reported total with it.
    The four ``gemm_*_engines`` (fraction, offset, and the MoE layers' two) are (kernels, precisions) arrays
    (`GEMM_KERNELS` x `GEMM_PRECISIONS`) of `Hardware.engine_gemm`, NaN where absent.
    """

    memory_gb: jax.Array | float
    memory_reported_ratio: jax.Array | float
    bandwidth_gbs: jax.Array | float
    tflops_fp16: jax.Array | float
    tflops_fp8: jax.Array | float
    tflops_fp4: jax.Array | float
    interconnect_gbs: jax.Array | float
    scaleup_domain_gpus: jax.Array | float = math.inf
    scaleout_gbs: jax.Array | float = math.nan
    gemm_fraction_fp16: jax.Array | float = math.nan
    gemm_fraction_fp8: jax.Array | float = math.nan
    gemm_fraction_fp4: jax.Array | float = math.nan
    gemm_offset_tokens_fp16: jax.Array | float = math.nan
    gemm_offset_tokens_fp8: jax.Array | float = math.nan
    gemm_offset_tokens_fp4: jax.Array | float = math.nan
    gemm_moe_fraction_fp16: jax.Array | float = math.nan
    gemm_moe_fraction_fp8: jax.Array | float = math.nan
    gemm_moe_fraction_fp4: jax.Array | float = math.nan
    gemm_moe_offset_tokens_fp16: jax.Array | float = math.nan
    gemm_moe_offset_tokens_fp8: jax.Array | float = math.nan
    gemm_moe_offset_tokens_fp4: jax.Array | float = math.nan
    gemm_fraction_engines: jax.Array = dataclasses.field(default_factory=lambda: _no_engine_table())
    gemm_offset_tokens_engines: jax.Array = dataclasses.field(default_factory=lambda: _no_engine_table())
    gemm_moe_fraction_engines: jax.Array = dataclasses.field(default_factory=lambda: _no_engine_table())
    gemm_moe_offset_tokens_engines: jax.Array = dataclasses.field(default_factory=lambda: _no_engine_table())


def _no_engine_table() -> np.ndarray:
    return np.full((len(GEMM_KERNELS), len(GEMM_PRECISIONS)), math.nan)


# The share of the dense peak a GPU without a measurement is taken to reach, per precision: the
# medians of the catalog's measured ``gemm_fraction_*`` (NVIDIA's from AIConfigurator's GEMM tables,
# AMD's MI300X and MI325X from AMD's max-achievable FLOPS; tests/test_gemm_rate.py checks them).
DEFAULT_GEMM_FRACTION = {"fp16": 0.672, "fp8": 0.5355, "fp4": 0.437}
# likewise the medians of the catalog's ``gemm_offset_tokens_*`` (NVIDIA's only)
DEFAULT_GEMM_OFFSET_TOKENS = {"fp16": 22.0, "fp8": 58.0, "fp4": 312.0}


def effective_tflops(hw: HardwareParams, compute_bits: jax.Array | float, gemm_rate: str = "peak") -> jax.Array:
    """Dense tensor throughput F [TFLOPS] the model's matmuls run at on this GPU.

    docs/model.md (seed section 5.1): fp16/bf16 and weight-only int4 use the FP16 rate;
    fp8 uses FP8, or FP16 where the GPU has none; fp4 uses FP4, else FP8, else FP16
    (an FP4 model on H100/H200 runs at the FP8 rate).

    Args:
        hw: one GPU (scalars).
        compute_bits: 16, 8 or 4, from `jaxpareto.definitions.units.COMPUTE_BITS` of the weight dtype.
        gemm_rate: "peak" (the datasheet's dense peak, the seed's) or "measured" (that peak times
            the precision's ``gemm_fraction``: the rate large GEMMs measurably reach, docs/model.md
            "Measured matmul rate"; `DEFAULT_GEMM_FRACTION` where the GPU has no measurement).
            Static.

    Returns:
        Scalar F in TFLOPS.

    Raises:
        ValueError: an unknown ``gemm_rate``.
    """
    peak = _by_precision(hw, compute_bits, hw.tflops_fp16, hw.tflops_fp8, hw.tflops_fp4)
    if _at_peak(gemm_rate):
        return peak
    return peak * _by_precision(hw, compute_bits, *_measured(hw, "fraction", DEFAULT_GEMM_FRACTION))


def gemm_offset_tokens(hw: HardwareParams, compute_bits: jax.Array | float, gemm_rate: str = "peak") -> jax.Array:
    """m_0 [tokens]: a GEMM of m tokens takes as long as m + m_0 tokens at the rate
    `effective_tflops` gives (docs/model.md, "Measured matmul rate"): 0 at the datasheet peak
    (``gemm_rate="peak"``, the seed's), else the GPU's ``gemm_offset_tokens`` of the precision
    the model computes in (`DEFAULT_GEMM_OFFSET_TOKENS` where not measured). Scalar.

    Raises:
        ValueError: an unknown ``gemm_rate``.
    """
    if _at_peak(gemm_rate):
        return 0.0 * hw.tflops_fp16
    return _by_precision(hw, compute_bits, *_measured(hw, "offset_tokens", DEFAULT_GEMM_OFFSET_TOKENS))


def expert_tflops(hw: HardwareParams, compute_bits: jax.Array | float, gemm_rate: str = "peak") -> jax.Array:
    """The rate [TFLOPS] a MoE layer's routed experts compute at (docs/model.md, "Measured matmul
    rate"): their tokens run as a grouped GEMM, one problem per expert, which reaches its own
    share of the peak (``gemm_moe_fraction`` of the precision, measured on whole MoE layers),
    else, where not measured and at the datasheet peak, `effective_tflops`. Scalar.

    Raises:
        ValueError: an unknown ``gemm_rate``.
    """
    dense = effective_tflops(hw, compute_bits, gemm_rate)
    if _at_peak(gemm_rate):
        return dense
    peak = _by_precision(hw, compute_bits, hw.tflops_fp16, hw.tflops_fp8, hw.tflops_fp4)
    share = _by_precision(hw, compute_bits, hw.gemm_moe_fraction_fp16, hw.gemm_moe_fraction_fp8,
                          hw.gemm_moe_fraction_fp4)
    return jnp.where(jnp.isfinite(share), peak * jnp.where(jnp.isfinite(share), share, 1.0), dense)


def expert_offset_tokens(hw: HardwareParams, compute_bits: jax.Array | float, gemm_rate: str = "peak") -> jax.Array:
    """m_0 of one routed expert's GEMM [tokens at `expert_tflops`]: a MoE layer of p token-expert
    pairs over n experts takes as long as p + n m_0 pairs (``gemm_moe_offset_tokens`` of the
    precision), else, where not measured, `gemm_offset_tokens`; 0 at the datasheet peak. Scalar.

    Raises:
        ValueError: an unknown ``gemm_rate``.
    """
    dense = gemm_offset_tokens(hw, compute_bits, gemm_rate)
    if _at_peak(gemm_rate):
        return dense
    own = _by_precision(hw, compute_bits, hw.gemm_moe_offset_tokens_fp16, hw.gemm_moe_offset_tokens_fp8,
                        hw.gemm_moe_offset_tokens_fp4)
    return jnp.where(jnp.isfinite(own), own, dense)


def engine_hardware(hw: HardwareParams, gemm_kernels: jax.Array | float | None) -> HardwareParams:
    """``hw`` with the GEMM measurements of an engine's own kernels (docs/model.md, "Measured
    matmul rate"): ``gemm_kernels`` is the engine's code (`EngineParams.gemm_kernels`: 1 + the
    index in `GEMM_KERNELS`; 0 or None: the GPU's own values, unchanged). Each ``gemm_fraction_*``
    and ``gemm_offset_tokens_*`` (and the MoE layers' ``gemm_moe_*``) becomes that engine's value where the GPU has one (finite), and
    stays the GPU's elsewhere. Scalar; used under ``gemm_rate="measured"`` only (the peak reads
    none of them)."""
    if gemm_kernels is None:
        return hw
    row = jnp.clip(jnp.asarray(gemm_kernels).astype(jnp.int32) - 1, 0, len(GEMM_KERNELS) - 1)
    named = jnp.asarray(gemm_kernels) >= 1
    updates = {}
    for kind in _GEMM_KINDS:
        table = jnp.asarray(getattr(hw, f"gemm_{kind}_engines"))[row]
        for j, precision in enumerate(GEMM_PRECISIONS):
            own = getattr(hw, f"gemm_{kind}_{precision}")
            updates[f"gemm_{kind}_{precision}"] = jnp.where(named & jnp.isfinite(table[j]), table[j], own)
    return dataclasses.replace(hw, **updates)


def engine_gpu(hw: HardwareParams, engine, options) -> HardwareParams:
    """The GPU as ``engine`` (an `EngineParams`, or None) computes on it under the model
    ``options``: `engine_hardware` at the engine's ``gemm_kernels`` where the matmuls run at the
    measured rate, else ``hw`` itself (the peak reads no measurement)."""
    if engine is None or options.gemm_rate == "peak":
        return hw
    return engine_hardware(hw, engine.gemm_kernels)


def _at_peak(gemm_rate: str) -> bool:
    """``gemm_rate`` is "peak" (else "measured"); raises ValueError for another."""
    if gemm_rate not in GEMM_RATES:
        raise ValueError(f"gemm_rate {gemm_rate!r} not in {GEMM_RATES}")
    return gemm_rate == "peak"


def _measured(hw: HardwareParams, kind: str, defaults: dict) -> tuple:
    """The GPU's ``gemm_<kind>_fp16/fp8/fp4``, each the default where not measured (NaN)."""
    values = (getattr(hw, f"gemm_{kind}_{p}") for p in ("fp16", "fp8", "fp4"))
    return tuple(jnp.where(jnp.isfinite(v), v, defaults[p]) for v, p in zip(values, ("fp16", "fp8", "fp4")))


def _by_precision(hw: HardwareParams, compute_bits, fp16, fp8, fp4):
    """The value of the precision a model of ``compute_bits`` computes in on this GPU: FP4,
    else FP8, else FP16, down to the first the GPU has (`effective_tflops`)."""
    fp8_or_fp16 = jnp.where(jnp.isfinite(hw.tflops_fp8), fp8, fp16)
    fp4_chain = jnp.where(jnp.isfinite(hw.tflops_fp4), fp4, fp8_or_fp16)
    return jnp.where(compute_bits <= 4, fp4_chain, jnp.where(compute_bits <= 8, fp8_or_fp16, fp16))
