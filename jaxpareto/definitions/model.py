"""Model definitions (SPEC.md section 2) and their numeric, traceable form.

`Model` is the validated definition (catalog entry, user input or a Hugging Face
``config.json``); `ModelParams` is the frozen pytree of floats the scalar physics receives.
Dense models are MoE models with no routed experts, so one set of equations serves both.
"""

from __future__ import annotations

import math

import dataclasses
from pathlib import Path
from typing import Literal

import jax
import pydantic

from jaxpareto.definitions.hf_config import hf_config_fields
from jaxpareto.definitions.base import Definition, finite_positive
from jaxpareto.definitions.units import COMPUTE_BITS, KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES

WeightDtype = Literal["fp16", "bf16", "fp8", "fp4", "int4"]
KvDtype = Literal["fp16", "bf16", "fp8"]

# SPEC.md section 2: the MoE split must add up to the totals within 1 %.
_MOE_CONSISTENCY_RTOL = 0.01


class Model(Definition):
    """One LLM as the performance model sees it.

    Attributes:
        name: identifier used in the dataset's ``model`` coordinate.
        params_total_b: all weights P_total [billions]; sets weight memory.
        params_active_b: weights touched per token P_active [billions]; = total for dense.
        weight_dtype: fp16, bf16, fp8, fp4 (NVFP4/MXFP4) or int4 (weight-only).
        layers: transformer layers.
        kv_heads: KV heads n_kv (GQA; MHA is GQA with kv_heads = heads). Ignored for MLA,
            whose latent KV is one shared "head" (n_kv = 1).
        head_dim: per-head dimension, from the model's own config (not hidden / heads).
        kv_dtype: KV-cache dtype, fp16 by default.
        attention: "gqa" or "mla".
        kv_lora_rank: MLA latent width d_c.
        rope_head_dim: MLA decoupled RoPE key width d_rope.
        experts: routed experts E (MoE only).
        experts_per_token: routed experts per token K (MoE only).
        expert_params_b: one routed expert summed over all MoE layers [billions]
            (SPEC.md section 2: the bytes one expert slot costs to load per decode step).
        nonmoe_params_b: everything else: attention, shared experts, dense layers,
            embeddings [billions].
        expert_weight_dtype: dtype of the routed experts when it differs from ``weight_dtype``
            (mixed precision: Kimi K2.5 INT4 experts with BF16 elsewhere, gpt-oss MXFP4 experts).
        sliding_window: tokens a sliding-window attention layer keeps (gpt-oss: 128).
        sliding_layers: how many of the ``layers`` use that window (the rest see the whole
            context): KV(T) = full layers x T + sliding layers x min(T, window), per token width.
        attention_heads: query heads (config.json ``num_attention_heads``); with ``head_dim``
            (GQA) or the MLA dimensions it sets the attention FLOPs of the measured profile
            (`jaxpareto.physics.attention`). None: those FLOPs are not counted.
        qk_nope_head_dim, v_head_dim: MLA's per-head query/key width without RoPE and value
            width (DeepSeek-V3: 128 and 128).
        sources: field name -> where its value comes from.

    For MoE models give either ``expert_params_b`` and ``nonmoe_params_b`` (the totals are
    then derived, or checked within 1 % if also given) or ``params_total_b`` and
    ``params_active_b`` (the split is then derived).

    Raises:
        pydantic.ValidationError (a ValueError) naming the field for missing, inconsistent or
        out-of-range values and unknown fields.
    """

    name: str = pydantic.Field(min_length=1)
    params_total_b: float | None = None
    params_active_b: float | None = None
    weight_dtype: WeightDtype = "fp16"
    layers: int = pydantic.Field(gt=0)
    hidden_size: int | None = pydantic.Field(default=None, gt=0)
    kv_heads: int | None = pydantic.Field(default=None, gt=0)
    head_dim: int | None = pydantic.Field(default=None, gt=0)
    kv_dtype: KvDtype = "fp16"
    attention: Literal["gqa", "mla"] = "gqa"
    kv_lora_rank: int | None = pydantic.Field(default=None, gt=0)
    rope_head_dim: int | None = pydantic.Field(default=None, gt=0)
    experts: int | None = pydantic.Field(default=None, gt=0)
    experts_per_token: int | None = pydantic.Field(default=None, gt=0)
    expert_params_b: float | None = None
    nonmoe_params_b: float | None = None
    expert_weight_dtype: WeightDtype | None = None
    sliding_window: int | None = pydantic.Field(default=None, gt=0)
    sliding_layers: int = pydantic.Field(default=0, ge=0)
    attention_heads: int | None = pydantic.Field(default=None, gt=0)
    qk_nope_head_dim: int | None = pydantic.Field(default=None, gt=0)
    v_head_dim: int | None = pydantic.Field(default=None, gt=0)
    sources: dict[str, str] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator("params_total_b", "params_active_b", "expert_params_b", "nonmoe_params_b")
    @classmethod
    def _positive(cls, value, info):
        return finite_positive(value, info.field_name)

    @pydantic.model_validator(mode="after")
    def _complete(self) -> "Model":
        if self.attention == "gqa":
            if self.kv_heads is None or self.head_dim is None:
                raise ValueError("attention='gqa' needs kv_heads and head_dim")
        elif self.kv_lora_rank is None or self.rope_head_dim is None:
            raise ValueError("attention='mla' needs kv_lora_rank and rope_head_dim")
        if self.attention == "mla" and self.attention_heads is not None and (
                self.qk_nope_head_dim is None or self.v_head_dim is None):
            raise ValueError("attention='mla' with attention_heads needs qk_nope_head_dim and v_head_dim")
        if self.sliding_layers > self.layers:
            raise ValueError(f"sliding_layers ({self.sliding_layers}) exceeds layers ({self.layers})")
        if self.sliding_layers and self.sliding_window is None:
            raise ValueError("sliding_layers needs sliding_window (tokens)")
        if self.sliding_layers and self.attention == "mla":
            raise ValueError("sliding-window layers are modelled for GQA attention only")
        if self.expert_weight_dtype is not None and not self.is_moe:
            raise ValueError("expert_weight_dtype needs experts (MoE models only)")
        update = self._moe_split() if self.is_moe else self._dense_split()
        if self.params_active_b is not None and self.params_total_b is not None:
            if self.params_active_b > self.params_total_b * (1 + _MOE_CONSISTENCY_RTOL):
                raise ValueError("params_active_b must not exceed params_total_b")
        for key, value in update.items():
            object.__setattr__(self, key, value)
        return self

    def _dense_split(self) -> dict:
        if self.experts_per_token is not None or self.expert_params_b is not None:
            raise ValueError("experts_per_token/expert_params_b need experts (MoE models only)")
        if self.params_total_b is None:
            raise ValueError("params_total_b is required")
        active = self.params_total_b if self.params_active_b is None else self.params_active_b
        if self.nonmoe_params_b is not None and abs(self.nonmoe_params_b - active) > _MOE_CONSISTENCY_RTOL * active:
            raise ValueError("nonmoe_params_b of a dense model must equal params_active_b")
        return {"params_active_b": active, "nonmoe_params_b": active}

    def _moe_split(self) -> dict:
        e, k = self.experts, self.experts_per_token
        if k is None:
            raise ValueError("a MoE model (experts set) needs experts_per_token")
        if k > e:
            raise ValueError(f"experts_per_token ({k}) must not exceed experts ({e})")
        expert, nonmoe = self.expert_params_b, self.nonmoe_params_b
        total, active = self.params_total_b, self.params_active_b
        if expert is None or nonmoe is None:
            if expert is not None or nonmoe is not None or total is None or active is None or e == k:
                raise ValueError(
                    "a MoE model needs expert_params_b and nonmoe_params_b, or params_total_b "
                    "and params_active_b with experts > experts_per_token"
                )
            expert = (total - active) / (e - k)
            nonmoe = total - e * expert
            if nonmoe <= 0:
                raise ValueError("params_total_b and params_active_b give a negative non-expert part")
        derived_total = nonmoe + e * expert
        derived_active = nonmoe + k * expert
        for field, given, derived in (
            ("params_total_b", total, derived_total),
            ("params_active_b", active, derived_active),
        ):
            if given is not None and abs(given - derived) > _MOE_CONSISTENCY_RTOL * derived:
                raise ValueError(
                    f"{field}={given} disagrees with nonmoe_params_b + experts x expert_params_b "
                    f"= {derived:.4g} by more than 1 %"
                )
        return {
            "expert_params_b": expert,
            "nonmoe_params_b": nonmoe,
            "params_total_b": derived_total if total is None else total,
            "params_active_b": derived_active if active is None else active,
        }

    @property
    def is_moe(self) -> bool:
        return self.experts is not None

    @property
    def kv_heads_sharded(self) -> int:
        """n_kv: how many GPUs the KV cache can be split over (1 for MLA's shared latent)."""
        return 1 if self.attention == "mla" else int(self.kv_heads)

    def _kv_width(self, layers: int) -> float:
        width = KV_DTYPE_BYTES[self.kv_dtype]
        if self.attention == "mla":
            return float((self.kv_lora_rank + self.rope_head_dim) * layers * width)
        return float(2 * layers * self.kv_heads * self.head_dim * width)

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token of context κ of the full-attention layers (SPEC.md section 3).

        gqa: 2 x layers x kv_heads x head_dim x kv bytes (Llama-3.1-70B fp16: 327,680 B);
        mla: (kv_lora_rank + rope_head_dim) x layers x kv bytes (DeepSeek-V3: 70,272 B).
        Sliding-window layers are not counted here (see `kv_window_bytes_per_token`).
        """
        return self._kv_width(self.layers - self.sliding_layers)

    @property
    def kv_window_bytes_per_token(self) -> float:
        """KV bytes per token of the sliding-window layers, held for at most the window."""
        return self._kv_width(self.sliding_layers) if self.sliding_layers else 0.0

    def _pair_flops(self, layers: int, absorbed: bool) -> float:
        if self.attention_heads is None:
            return 0.0
        if self.attention == "mla":
            if absorbed:  # decode attends in the latent space: scores over d_c + d_rope, values d_c
                return float(2 * self.attention_heads * (2 * self.kv_lora_rank + self.rope_head_dim) * layers)
            return float(2 * self.attention_heads * (self.qk_nope_head_dim + self.rope_head_dim + self.v_head_dim)
                         * layers)
        return float(4 * self.attention_heads * self.head_dim * layers)

    @property
    def attention_pair_flops(self) -> float:
        """Attention FLOPs per (query, key) pair summed over the full-attention layers, as prefill
        computes them: QK^T and PV, 2 x heads x head_dim each (GQA); MLA expanded per head,
        2 x heads x (qk_nope + rope + v) (DeepSeek-V3 report, section 2.1.1). 0 without heads."""
        return self._pair_flops(self.layers - self.sliding_layers, absorbed=False)

    @property
    def attention_window_pair_flops(self) -> float:
        """The same per pair for the sliding-window layers (which see at most the window)."""
        return self._pair_flops(self.sliding_layers, absorbed=False)

    @property
    def decode_pair_flops(self) -> float:
        """Attention FLOPs per (query, key) pair over the full layers in decode: as prefill for GQA;
        MLA with the up-projections absorbed, 2 x heads x (2 d_c + d_rope) (how vLLM, SGLang and
        TensorRT-LLM run MLA decode)."""
        return self._pair_flops(self.layers - self.sliding_layers, absorbed=True)

    def kv_bytes(self, tokens: float) -> float:
        """KV bytes of one sequence of ``tokens``: κ x T + κ_window x min(T, window)."""
        window = min(tokens, self.sliding_window or 0)
        return self.kv_bytes_per_token * tokens + self.kv_window_bytes_per_token * window

    @property
    def expert_dtype(self) -> str:
        """Dtype of the routed experts (``weight_dtype`` unless mixed precision)."""
        return self.expert_weight_dtype or self.weight_dtype

    @property
    def weight_memory_gb(self) -> float:
        """M_model [GB] (seed eq. 5): P_total x d for one dtype; with mixed precision the
        non-expert params at ``weight_dtype`` plus E x expert params at ``expert_dtype``."""
        if not self.is_moe:
            return self.params_total_b * WEIGHT_DTYPE_BYTES[self.weight_dtype]
        return (self.nonmoe_params_b * WEIGHT_DTYPE_BYTES[self.weight_dtype]
                + self.experts * self.expert_params_b * WEIGHT_DTYPE_BYTES[self.expert_dtype])

    @property
    def compute_dtype(self) -> str:
        """The dtype whose tensor rate the matmuls run at: that of the larger active part
        (for gpt-oss-120b and Kimi K2.5 the routed experts)."""
        routed = (self.experts_per_token or 0) * (self.expert_params_b or 0.0)
        return self.expert_dtype if routed > self.nonmoe_params_b else self.weight_dtype

    def to_params(self) -> "ModelParams":
        """Numeric form for the physics (dense: zero routed experts)."""
        return ModelParams(
            params_total_b=self.params_total_b,
            params_active_b=self.params_active_b,
            nonmoe_params_b=self.nonmoe_params_b,
            expert_params_b=self.expert_params_b or 0.0,
            experts=float(self.experts or 0),
            experts_per_token=float(self.experts_per_token or 0),
            weights_gb=self.weight_memory_gb,
            nonmoe_weight_bytes=WEIGHT_DTYPE_BYTES[self.weight_dtype],
            expert_weight_bytes=WEIGHT_DTYPE_BYTES[self.expert_dtype],
            compute_bits=float(COMPUTE_BITS[self.compute_dtype]),
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_window_bytes_per_token=self.kv_window_bytes_per_token,
            kv_window_tokens=float(self.sliding_window or 0),
            kv_heads=float(self.kv_heads_sharded),
            layers=float(self.layers),
            hidden_size=math.nan if self.hidden_size is None else float(self.hidden_size),
            attention_pair_flops=self.attention_pair_flops,
            attention_window_pair_flops=self.attention_window_pair_flops,
            decode_pair_flops=self.decode_pair_flops,
            decode_window_pair_flops=self._pair_flops(self.sliding_layers, absorbed=True),
        )

    @classmethod
    def from_hf_config(
        cls,
        path: str | Path | dict,
        *,
        name: str | None = None,
        weight_dtype: WeightDtype | None = None,
        kv_dtype: KvDtype = "fp16",
    ) -> "Model":
        """Build a model from a Hugging Face ``config.json`` (a path or the parsed dict).

        See `jaxpareto.definitions.hf_config.hf_config_fields` for what is read and how parameters
        are counted.

        Raises:
            JaxparetoError: a missing or unreadable file, or a required key missing (named).
        """
        return cls(**hf_config_fields(path, name=name, weight_dtype=weight_dtype, kv_dtype=kv_dtype))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ModelParams:
    """One model as scalars (or, stacked, a table with a leading model axis).

    Units as in `Model`; ``weights_gb`` is M_model [GB], ``nonmoe_weight_bytes`` and
    ``expert_weight_bytes`` the bytes per weight d of each part, ``compute_bits`` the tensor
    precision (16/8/4), ``kv_bytes_per_token`` κ of the full-attention layers and
    ``kv_window_bytes_per_token`` that of the sliding layers, held for at most
    ``kv_window_tokens`` [B, tokens], ``kv_heads`` n_kv (1 for MLA), and the attention FLOPs per
    (query, key) pair of the full and sliding layers in prefill and decode (`Model.attention_pair_flops`).
    Dense models have ``experts = experts_per_token = expert_params_b = 0`` and
    ``nonmoe_params_b = params_active_b``.
    """

    params_total_b: jax.Array | float
    params_active_b: jax.Array | float
    nonmoe_params_b: jax.Array | float
    expert_params_b: jax.Array | float
    experts: jax.Array | float
    experts_per_token: jax.Array | float
    weights_gb: jax.Array | float
    nonmoe_weight_bytes: jax.Array | float
    expert_weight_bytes: jax.Array | float
    compute_bits: jax.Array | float
    kv_bytes_per_token: jax.Array | float
    kv_window_bytes_per_token: jax.Array | float
    kv_window_tokens: jax.Array | float
    kv_heads: jax.Array | float
    layers: jax.Array | float
    hidden_size: jax.Array | float
    attention_pair_flops: jax.Array | float = 0.0
    attention_window_pair_flops: jax.Array | float = 0.0
    decode_pair_flops: jax.Array | float = 0.0
    decode_window_pair_flops: jax.Array | float = 0.0
