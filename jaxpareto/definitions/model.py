"""Model definitions (docs/model.md) and their numeric, traceable form.

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
from jaxpareto.definitions.layers import GROWING, RECURRENT, WINDOWED, LayerGroup
from jaxpareto.definitions.units import COMPUTE_BITS, KV_DTYPE_BYTES, UNQUANTISED_WEIGHT_BYTES, weight_bytes

WeightDtype = Literal["fp16", "bf16", "fp8", "fp4", "int4"]
KvDtype = Literal["fp16", "bf16", "fp8"]

# docs/model.md: the MoE split must add up to the totals within 1 %.
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
            (docs/model.md: the bytes one expert slot costs to load per decode step).
        nonmoe_params_b: everything else: attention, shared experts, dense layers,
            embeddings [billions].
        expert_weight_dtype: dtype of the routed experts when it differs from ``weight_dtype``
            (mixed precision: Kimi K2.5 INT4 experts with BF16 elsewhere, gpt-oss MXFP4 experts).
        sliding_window: tokens a sliding-window attention layer keeps (gpt-oss: 128).
        sliding_layers: how many of the ``layers`` use that window (the rest see the whole
            context): KV(T) = full layers x T + sliding layers x min(T, window), per token width.
        layer_groups: per-layer description of a hybrid model (`jaxpareto.definitions.layers`):
            groups of identical layers, each full, sliding, chunked, linear or Mamba, with its
            own KV heads and widths or fixed state. Replaces ``kv_heads``/``head_dim`` and
            ``sliding_window``/``sliding_layers`` (not given then); the counts must add up to
            ``layers``. KV sharding under TP follows the full-attention layers' KV heads.
        input_embedding_params_b: the untied input embedding table V x hidden [billions]. It is
            in ``params_total_b`` (memory) but not in ``params_active_b`` or ``nonmoe_params_b``:
            a step looks up B rows of it, it computes nothing (docs/model.md, "What a model is"). 0 when tied (the table is then the output head, counted once) or unknown.
        unquantised_params_b: the part of ``nonmoe_params_b`` a quantised checkpoint keeps at 16
            bits (output head, norms, routers, modules its quantisation config skips)
            [billions]. The input table is always stored at 16 bits.
        weight_scale_bits: bits of group scales and zero points per quantised weight: AWQ/GPTQ
            4-bit group 128 with zeros 16/128 + 4/128; MXFP4 8/32; NVFP4 8/16; compressed-tensors
            group 32 16/32 (the formats' specifications). 0: not counted.
        max_context_tokens: the longest context the model serves [tokens]
            (``max_position_embeddings``, or a RoPE scaling's extension). None: unknown.
        params_active_published_b: the publisher's active-parameter figure, for display (Meta
            and Qwen count the input table, DeepSeek and OpenAI do not) [billions].
        attention_heads: query heads (config.json ``num_attention_heads``); with ``head_dim``
            (GQA) or the MLA dimensions it sets the attention FLOPs, counted by the measured
            profile and by ``attention="flops"`` (`jaxpareto.physics.attention`). None: those
            FLOPs are not counted.
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
    layer_groups: tuple[LayerGroup, ...] | None = None
    input_embedding_params_b: float = pydantic.Field(default=0.0, ge=0.0)
    unquantised_params_b: float = pydantic.Field(default=0.0, ge=0.0)
    weight_scale_bits: float = pydantic.Field(default=0.0, ge=0.0, le=8.0)
    max_context_tokens: int | None = pydantic.Field(default=None, gt=0)
    params_active_published_b: float | None = None
    sources: dict[str, str] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator("layer_groups", mode="before")
    @classmethod
    def _groups(cls, value):
        if isinstance(value, list):  # from TOML or JSON
            return tuple(LayerGroup(**g) if isinstance(g, dict) else g for g in value)
        return value

    @pydantic.field_validator("params_total_b", "params_active_b", "expert_params_b", "nonmoe_params_b",
                              "params_active_published_b")
    @classmethod
    def _positive(cls, value, info):
        return finite_positive(value, info.field_name)

    @pydantic.model_validator(mode="after")
    def _complete(self) -> "Model":
        if self.layer_groups is not None:
            self._check_groups()
        elif self.attention == "gqa":
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
        nonmoe = update.get("nonmoe_params_b", self.nonmoe_params_b)
        if self.unquantised_params_b > nonmoe * (1 + _MOE_CONSISTENCY_RTOL):
            raise ValueError(f"unquantised_params_b ({self.unquantised_params_b}) exceeds nonmoe_params_b ({nonmoe:.4g})")
        if self.params_active_b is not None and self.params_total_b is not None:
            if self.params_active_b > self.params_total_b * (1 + _MOE_CONSISTENCY_RTOL):
                raise ValueError("params_active_b must not exceed params_total_b")
        for key, value in update.items():
            object.__setattr__(self, key, value)
        return self

    def _check_groups(self) -> None:
        groups = self.layer_groups
        if self.attention != "gqa":
            raise ValueError("layer_groups describe GQA-style layers; MLA models are uniform (attention='mla')")
        if sum(g.count for g in groups) != self.layers:
            raise ValueError(f"layer_groups counts add up to {sum(g.count for g in groups)}, not layers={self.layers}")
        if self.sliding_layers or self.sliding_window is not None:
            raise ValueError("give sliding layers as layer_groups entries, not sliding_window/sliding_layers")
        if self.kv_heads is not None or self.head_dim is not None:
            raise ValueError("with layer_groups, give kv_heads and head_dim per group, not for the model")
        windows = {g.window for g in groups if g.attention in WINDOWED}
        if len(windows) > 1:
            raise ValueError(f"layer_groups have windows {sorted(windows)}; one window size is modelled")
        if not any(g.attention in GROWING + WINDOWED for g in groups):
            raise ValueError("layer_groups need at least one attention layer (full, sliding or chunked)")

    def _dense_split(self) -> dict:
        if self.experts_per_token is not None or self.expert_params_b is not None:
            raise ValueError("experts_per_token/expert_params_b need experts (MoE models only)")
        if self.params_total_b is None:
            raise ValueError("params_total_b is required")
        if self.input_embedding_params_b >= self.params_total_b:
            raise ValueError("input_embedding_params_b must be less than params_total_b")
        active = self.params_total_b - self.input_embedding_params_b if self.params_active_b is None \
            else self.params_active_b
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
            expert = (total - self.input_embedding_params_b - active) / (e - k)
            nonmoe = active - k * expert
            if nonmoe <= 0 or expert <= 0:
                raise ValueError("params_total_b and params_active_b give a negative non-expert or expert part")
        derived_total = nonmoe + e * expert + self.input_embedding_params_b
        derived_active = nonmoe + k * expert
        for field, given, derived in (
            ("params_total_b", total, derived_total),
            ("params_active_b", active, derived_active),
        ):
            if given is not None and abs(given - derived) > _MOE_CONSISTENCY_RTOL * derived:
                raise ValueError(
                    f"{field}={given} disagrees with nonmoe_params_b + experts x expert_params_b "
                    f"(+ input_embedding_params_b for the total) = {derived:.4g} by more than 1 %"
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
    def groups(self) -> tuple[LayerGroup, ...]:
        """The per-layer description: ``layer_groups``, or for a uniform GQA model its full and
        sliding layers (empty for MLA, whose layers are all alike)."""
        if self.layer_groups is not None:
            return self.layer_groups
        if self.attention == "mla":
            return ()
        uniform = dict(kv_heads=self.kv_heads, head_dim=self.head_dim)
        full = self.layers - self.sliding_layers
        groups = [LayerGroup(count=full, attention="full", **uniform)] if full else []
        if self.sliding_layers:
            groups.append(LayerGroup(count=self.sliding_layers, attention="sliding", window=self.sliding_window,
                                     **uniform))
        return tuple(groups)

    @property
    def kv_heads_sharded(self) -> int:
        """n_kv: how many GPUs the KV cache can be split over (1 for MLA's shared latent; for a
        hybrid model the KV heads of its full-attention layers)."""
        if self.attention == "mla":
            return 1
        attending = [g for g in self.groups if g.attention in GROWING] or \
            [g for g in self.groups if g.attention in WINDOWED]
        return int(min(g.kv_heads for g in attending))

    @property
    def kv_window_heads(self) -> int:
        """KV heads of the sliding and chunked layers (they split and replicate under TP on their
        own: Gemma 4's sliding layers have 8 where its global layers have 2); n_kv without them."""
        windowed = [g.kv_heads for g in self.groups if g.attention in WINDOWED]
        return min(windowed) if windowed else self.kv_heads_sharded

    @property
    def state_heads(self) -> int:
        """Heads the fixed recurrent state splits over under TP (the fewest of any group; 1 without
        recurrent layers, where it does not matter)."""
        return min((g.state_heads for g in self.groups if g.attention in RECURRENT), default=1)

    def _mla_width(self, layers: int) -> float:
        return float((self.kv_lora_rank + self.rope_head_dim) * layers * KV_DTYPE_BYTES[self.kv_dtype])

    def _kv_width(self, kinds: tuple[str, ...]) -> float:
        width = KV_DTYPE_BYTES[self.kv_dtype]
        return float(sum(g.kv_width(width) for g in self.groups if g.attention in kinds))

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token of context κ: the part that grows with the context, of the
        full-attention layers (docs/model.md).

        gqa: 2 x layers x kv_heads x head_dim x kv bytes (Llama-3.1-70B fp16: 327,680 B), one
        tensor instead of two where keys double as values; mla: (kv_lora_rank + rope_head_dim) x
        layers x kv bytes (DeepSeek-V3: 70,272 B). Sliding, chunked, linear and Mamba layers are
        not counted here (`kv_window_bytes_per_token`, `fixed_state_bytes`).
        """
        if self.attention == "mla":
            return self._mla_width(self.layers)
        return self._kv_width(GROWING)

    @property
    def kv_window_bytes_per_token(self) -> float:
        """KV bytes per token of the sliding-window and chunked layers, held for at most the window."""
        return self._kv_width(WINDOWED) if self.attention != "mla" else 0.0

    @property
    def kv_window_tokens(self) -> int:
        """The window (chunk) of the sliding (chunked) layers [tokens]; 0 without such layers."""
        return next((g.window for g in self.groups if g.attention in WINDOWED), 0)

    @property
    def fixed_state_bytes(self) -> float:
        """Fixed state of one sequence in the linear-attention and Mamba layers [B]: it does not
        grow with the context (recurrent state and convolution window, `LayerGroup.state_bytes`)."""
        return float(sum(g.count * g.state_bytes for g in self.groups if g.attention in RECURRENT))

    @property
    def state_bytes_per_sequence(self) -> float:
        """What one session holds whatever its length [B]: the fixed recurrent state plus the
        sliding and chunked layers' KV at their cap (the window)."""
        return self.fixed_state_bytes + self.kv_window_bytes_per_token * self.kv_window_tokens

    def _pair_flops(self, kinds: tuple[str, ...], absorbed: bool) -> float:
        if self.attention_heads is None and self.layer_groups is None:
            return 0.0
        if self.attention == "mla":
            if kinds != GROWING:
                return 0.0
            if absorbed:  # decode attends in the latent space: scores over d_c + d_rope, values d_c
                return float(2 * self.attention_heads * (2 * self.kv_lora_rank + self.rope_head_dim) * self.layers)
            return float(2 * self.attention_heads * (self.qk_nope_head_dim + self.rope_head_dim + self.v_head_dim)
                         * self.layers)
        return float(sum(g.pair_flops(self.attention_heads) for g in self.groups if g.attention in kinds))

    @property
    def attention_pair_flops(self) -> float:
        """Attention FLOPs per (query, key) pair summed over the full-attention layers, as prefill
        computes them: QK^T and PV, 2 x heads x head_dim each (GQA); MLA expanded per head,
        2 x heads x (qk_nope + rope + v) (DeepSeek-V3 report, section 2.1.1). 0 without heads.
        Linear and Mamba layers attend to no pairs (their per-token state update, about
        4 x value heads x key dim x value dim FLOPs, under 2 % of a token's matmuls, is not counted)."""
        return self._pair_flops(GROWING, absorbed=False)

    @property
    def attention_window_pair_flops(self) -> float:
        """The same per pair for the sliding-window and chunked layers (which see at most the
        window; a chunked query sees on average half its chunk, so this is an upper bound there)."""
        return self._pair_flops(WINDOWED, absorbed=False)

    @property
    def decode_pair_flops(self) -> float:
        """Attention FLOPs per (query, key) pair over the full layers in decode: as prefill for GQA;
        MLA with the up-projections absorbed, 2 x heads x (2 d_c + d_rope) (how vLLM, SGLang and
        TensorRT-LLM run MLA decode)."""
        return self._pair_flops(GROWING, absorbed=True)

    def kv_bytes(self, tokens: float) -> float:
        """KV bytes of one sequence of ``tokens``: κ x T + κ_window x min(T, window) (without the
        fixed recurrent state; `session_bytes` adds it)."""
        window = min(tokens, self.kv_window_tokens)
        return self.kv_bytes_per_token * tokens + self.kv_window_bytes_per_token * window

    def session_bytes(self, tokens: float) -> float:
        """Everything one session of ``tokens`` holds [B]: growing KV, windows and fixed state."""
        return self.kv_bytes(tokens) + self.fixed_state_bytes

    def tp_error(self, tp: int) -> str | None:
        """Why TP ``tp`` cannot shard this model, or None (the rule of `jaxpareto.physics.limits`:
        query heads % tp == 0, KV heads % tp == 0 or tp % KV heads == 0, a recurrent state's heads
        % tp == 0)."""
        problems = []
        if self.attention_heads is not None and self.attention_heads % tp:
            problems.append(f"{self.attention_heads} attention heads do not divide by {tp}")
        kv = self.kv_heads_sharded
        for heads in dict.fromkeys((kv, self.kv_window_heads)):
            if heads % tp and tp % heads:
                problems.append(f"{heads} KV heads and TP {tp} do not divide one another")
        if self.fixed_state_bytes and self.state_heads % tp:
            problems.append(f"the recurrent state's {self.state_heads} heads do not divide by {tp}")
        return "; ".join(problems) or None

    def valid_tps(self, up_to: int = 64) -> list[int]:
        """The TP degrees up to ``up_to`` that shard this model."""
        return [tp for tp in range(1, up_to + 1) if self.tp_error(tp) is None]

    @property
    def expert_dtype(self) -> str:
        """Dtype of the routed experts (``weight_dtype`` unless mixed precision)."""
        return self.expert_weight_dtype or self.weight_dtype

    @property
    def nonmoe_weight_bytes(self) -> float:
        """Bytes per weight of the non-expert part read each step: the quantised share at
        ``weight_dtype`` with its scales, ``unquantised_params_b`` at 16 bits."""
        quantised = weight_bytes(self.weight_dtype, self.weight_scale_bits)
        if not self.unquantised_params_b:
            return quantised
        kept = self.unquantised_params_b
        return ((self.nonmoe_params_b - kept) * quantised + kept * UNQUANTISED_WEIGHT_BYTES) / self.nonmoe_params_b

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes per weight of the routed experts, with their scales."""
        return weight_bytes(self.expert_dtype, self.weight_scale_bits)

    @property
    def weight_memory_gb(self) -> float:
        """M_model [GB] (seed eq. 5): P_total x d for one dtype; with mixed precision the
        non-expert params at ``weight_dtype`` plus E x expert params at ``expert_dtype``; group
        scales (``weight_scale_bits``) on quantised weights, and the input table and
        ``unquantised_params_b`` at 16 bits."""
        table = self.input_embedding_params_b * UNQUANTISED_WEIGHT_BYTES
        if not self.is_moe:
            quantised = weight_bytes(self.weight_dtype, self.weight_scale_bits)
            kept = self.unquantised_params_b
            stored = self.params_total_b - self.input_embedding_params_b - kept
            return stored * quantised + kept * UNQUANTISED_WEIGHT_BYTES + table
        return (self.nonmoe_params_b * self.nonmoe_weight_bytes
                + self.experts * self.expert_params_b * self.expert_weight_bytes) + table

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
            nonmoe_weight_bytes=self.nonmoe_weight_bytes,
            expert_weight_bytes=self.expert_weight_bytes,
            compute_bits=float(COMPUTE_BITS[self.compute_dtype]),
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_window_bytes_per_token=self.kv_window_bytes_per_token,
            kv_window_tokens=float(self.kv_window_tokens),
            fixed_state_bytes=self.fixed_state_bytes,
            state_heads=float(self.state_heads),
            attention_heads=math.nan if self.attention_heads is None else float(self.attention_heads),
            max_context_tokens=math.inf if self.max_context_tokens is None else float(self.max_context_tokens),
            kv_heads=float(self.kv_heads_sharded),
            kv_window_heads=float(self.kv_window_heads),
            layers=float(self.layers),
            hidden_size=math.nan if self.hidden_size is None else float(self.hidden_size),
            attention_pair_flops=self.attention_pair_flops,
            attention_window_pair_flops=self.attention_window_pair_flops,
            decode_pair_flops=self.decode_pair_flops,
            decode_window_pair_flops=self._pair_flops(WINDOWED, absorbed=True),
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
    (query, key) pair of the full and sliding layers in prefill and decode (`Model.attention_pair_flops`),
    ``fixed_state_bytes`` the recurrent state of one sequence [B] and ``state_heads`` the heads it
    splits over under TP, ``attention_heads`` the query heads (NaN: unknown) and
    ``max_context_tokens`` the longest context plus output served (inf: unknown) [tokens].
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
    fixed_state_bytes: jax.Array | float = 0.0
    state_heads: jax.Array | float = 1.0
    kv_window_heads: jax.Array | float = 1.0
    attention_heads: jax.Array | float = math.nan
    max_context_tokens: jax.Array | float = math.inf
