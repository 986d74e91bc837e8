"""Per-layer description of a model: what each decoder layer attends with and what it keeps.

Hybrid models mix layer kinds: Qwen3-Next and Qwen3.5 put one full-attention layer after three
linear-attention (Gated DeltaNet) layers, Nemotron-H interleaves Mamba-2, MLP and attention
blocks, Gemma 2/3/4 and gpt-oss alternate sliding-window and global layers, and Llama 4 attends
within 8,192-token chunks on three layers of four. Their memory per session has two parts:

- **growing KV** [B/token]: the full-attention layers keep K and V of every token
  (`kv_bytes_per_token`);
- **bounded state** [B/sequence]: a sliding (chunked) layer keeps at most its window (chunk) of
  tokens, and a linear-attention or state-space layer keeps a fixed recurrent state plus its
  short convolution window, whatever the context (`fixed_state_bytes`).

`LayerGroup` describes a set of identical layers; a `Model` with ``layer_groups`` takes its KV
widths, state and attention FLOPs from them (`Model.from_hf_config` builds them from every
encoding it knows: ``layer_types``, ``hybrid_override_pattern``, ``full_attention_interval``,
Gemma's family patterns, Llama 4's ``no_rope_layers`` with ``attention_chunk_size``).
"""

from __future__ import annotations

from typing import Literal

import pydantic

from jaxpareto.definitions.base import Definition

AttentionKind = Literal["full", "sliding", "chunked", "linear", "mamba", "none"]
MlpKind = Literal["dense", "moe", "moe+shared", "moe+dense", "none"]
#: Kinds whose KV grows with the context, is capped at a window, or is a fixed recurrent state.
GROWING, WINDOWED, RECURRENT = ("full",), ("sliding", "chunked"), ("linear", "mamba")


class LayerGroup(Definition):
    """``count`` identical decoder layers (or hybrid blocks).

    Attributes:
        count: how many layers of the model are of this kind.
        attention: the token mixer: "full" (every token, GQA/MHA), "sliding" (the last
            ``window`` tokens), "chunked" (tokens of the current ``window``-token chunk, Llama 4),
            "linear" (linear attention, e.g. Gated DeltaNet) or "mamba" (state-space), each with
            a fixed state, or "none" (an MLP-only block, Nemotron-H "-").
        mlp: the feed-forward part, informative (parameter counts are the model's): "dense",
            "moe", "moe+shared" (with a shared expert), "moe+dense" (a dense MLP beside the
            experts, Gemma 4) or "none" (a mixer-only block).
        kv_heads, head_dim: KV heads and their width (full, sliding, chunked).
        window: tokens a sliding or chunked layer attends to and keeps.
        k_eq_v: keys double as values (Gemma 4 global layers, ``attention_k_eq_v``); the cache
            then stores one tensor per token, not two.
        attention_heads: query heads (attention FLOPs); None: the model's ``attention_heads``.
        state_bytes: fixed state of one sequence in one linear or Mamba layer [B] (recurrent
            state plus the convolution window, at the engine's state dtype).
        state_heads: heads that state splits over under TP (value heads; Mamba heads).

    Raises:
        JaxparetoError: a field missing for the kind, or given where it has no meaning.
    """

    count: int = pydantic.Field(gt=0)
    attention: AttentionKind
    mlp: MlpKind = "dense"
    kv_heads: int | None = pydantic.Field(default=None, gt=0)
    head_dim: int | None = pydantic.Field(default=None, gt=0)
    window: int | None = pydantic.Field(default=None, gt=0)
    k_eq_v: bool = False
    attention_heads: int | None = pydantic.Field(default=None, gt=0)
    state_bytes: float = pydantic.Field(default=0.0, ge=0.0)
    state_heads: int | None = pydantic.Field(default=None, gt=0)

    @pydantic.model_validator(mode="after")
    def _fields_of_kind(self) -> "LayerGroup":
        attends = self.attention in GROWING + WINDOWED
        if attends and (self.kv_heads is None or self.head_dim is None):
            raise ValueError(f"attention={self.attention!r} needs kv_heads and head_dim")
        if (self.attention in WINDOWED) != (self.window is not None):
            raise ValueError("window is required for sliding and chunked layers and only for them")
        if self.attention in RECURRENT and (self.state_bytes <= 0 or self.state_heads is None):
            raise ValueError(f"attention={self.attention!r} needs state_bytes > 0 and state_heads")
        if self.attention not in RECURRENT and self.state_bytes:
            raise ValueError("state_bytes is for linear and mamba layers only")
        return self

    def kv_width(self, kv_dtype_bytes: float) -> float:
        """KV bytes per token of all ``count`` layers (0 for recurrent and MLP-only layers)."""
        if self.attention not in GROWING + WINDOWED:
            return 0.0
        tensors = 1 if self.k_eq_v else 2
        return float(self.count * tensors * self.kv_heads * self.head_dim * kv_dtype_bytes)

    def pair_flops(self, model_heads: int | None) -> float:
        """Attention FLOPs per (query, key) pair of all ``count`` layers: 4 x heads x head_dim
        (QK^T and PV); 0 for recurrent layers, whose work per token is a fixed state update."""
        heads = self.attention_heads or model_heads
        if heads is None or self.attention not in GROWING + WINDOWED:
            return 0.0
        return float(4 * heads * self.head_dim * self.count)


def group_layers(per_layer: list[dict]) -> list[LayerGroup]:
    """Collapse one description per layer into `LayerGroup`s of identical layers (first-seen
    order), e.g. the 48 layers of Qwen3-Next into 36 linear and 12 full ones."""
    counts: dict[tuple, int] = {}
    for layer in per_layer:
        key = tuple(sorted(layer.items()))
        counts[key] = counts.get(key, 0) + 1
    return [LayerGroup(count=count, **dict(key)) for key, count in counts.items()]
