"""Read a `Model`'s fields from a Hugging Face ``config.json``, layer by layer.

Each layer is described first (`jaxpareto.definitions.layers`): its token mixer (full,
sliding, chunked, linear attention, Mamba-2, or none) and its MLP (dense, MoE with or without a
shared expert, dense beside MoE, or none). The encodings read are ``layer_types``,
``hybrid_override_pattern`` (Nemotron-H: M Mamba-2, * attention, - MLP, E MoE),
``full_attention_interval`` (Qwen3-Next), the family patterns of Gemma 2 (alternating) and
Gemma 3 (``sliding_window_pattern``), Llama 4's chunked attention (``attention_chunk_size`` on
the layers ``no_rope_layers`` marks, three of four by default), and for the MLP
``first_k_dense_replace``, ``moe_layer_freq``, ``mlp_only_layers``, ``decoder_sparse_step``,
``interleave_moe_layer_step`` and ``enable_moe_block``. A hybrid marker this reader does not
know is refused with its name rather than read as full attention.

Parameter counts follow the standard per-layer formulas, which reproduce the published totals of
the catalog's models (their model cards) within about 1 %:

- attention, GQA: h·(n_h·d) + 2·h·(n_kv·d) + (n_h·d)·h, plus biases when
  ``attention_bias`` is set, per-head sinks (gpt-oss), q/k norms (Qwen3, Gemma 3, MiniMax-M2),
  a doubled query projection for the output gate (Qwen3-Next, ``attn_output_gate``), and no
  value projection where keys double as values (``attention_k_eq_v``);
- attention, MLA: h·q_lora + q_lora·n_h·(d_nope + d_rope) + h·(d_c + d_rope)
  + d_c·n_h·(d_nope + d_v) + n_h·d_v·h, plus the two latent norms;
- linear attention (Gated DeltaNet; Qwen3-Next, Qwen3.5): h·(2·k + 2·v) projections for q, k, v
  and the gate, h·2·n_v for the decay and beta, a depthwise convolution over q, k, v, and the
  output v·h, with k = n_k·d_k and v = n_v·d_v; its fixed state per sequence is n_v·d_k·d_v
  (recurrent) plus (kernel - 1)·(2k + v) (convolution window);
- Mamba-2 (Nemotron-H): h·(2·I + 2·g·N + n_m) in, I·h out, a depthwise convolution over
  I + 2·g·N channels, with I = n_m·d_m; state n_m·d_m·N plus (kernel - 1)·(I + 2·g·N);
- a gated MLP or expert: 3·h·I (two matrices, 2·h·I, for Nemotron-H's squared ReLU; gpt-oss
  experts add their 2·I + h biases); a MoE layer adds its shared experts and the router h·E;
- embeddings: the input table V·h, and an untied LM head V·h; norms per layer (two, four for
  Gemma 2/3/4, one per Nemotron-H block) and a final norm. Multi-token-prediction modules are
  not counted (engines load them only for speculative decoding).

Active parameters are what a token reads and computes: the non-expert part plus K routed
experts, without the untied input table (`Model.input_embedding_params_b`); a tied table counts
once, as the head. Keys a config may omit take the family's default (the Hugging Face
configuration class of its ``model_type``); where a family has none, the key is required.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.layers import group_layers
from jaxpareto.definitions.units import KV_DTYPE_BYTES, UNQUANTISED_WEIGHT_BYTES, WEIGHT_DTYPE_BYTES

_HIDDEN_OVER_HEADS = "hidden/heads"
#: model_type -> defaults of its Hugging Face configuration class, for keys a config may omit.
FAMILY_DEFAULTS: dict[str, dict] = {
    **{t: {"tie_word_embeddings": False, "head_dim": _HIDDEN_OVER_HEADS}
       for t in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe")},
    **{t: {"tie_word_embeddings": False, "head_dim": 128} for t in ("qwen3", "qwen3_moe", "llama4", "llama4_text")},
    **{t: {"tie_word_embeddings": False} for t in ("deepseek_v2", "deepseek_v3", "kimi_k2", "minimax_m2",
                                                   "nemotron_h")},
    **{t: {"tie_word_embeddings": False, "head_dim": 256}
       for t in ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")},
    "gpt_oss": {"tie_word_embeddings": False, "head_dim": 64},
    "gemma": {"tie_word_embeddings": True, "head_dim": 256},
    "gemma2": {"tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096, "norms_per_layer": 4},
    **{t: {"tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6,
           "norms_per_layer": 4} for t in ("gemma3", "gemma3_text")},
    **{t: {"tie_word_embeddings": True, "head_dim": 256, "norms_per_layer": 4} for t in ("gemma4", "gemma4_text")},
}
#: Keys that mark layer kinds this reader does not model (Jamba, Zamba, Granite hybrids ...).
UNKNOWN_HYBRID_KEYS = ("attn_layer_period", "attn_layer_offset", "hybrid_layer_ids", "block_types",
                       "layers_block_type", "attn_layer_indices", "mamba_layers", "shared_attention_layers",
                       "linear_attn_config", "mamba_d_ssm", "attn_type_list")
#: Families whose layers mix kinds in ways this reader does not model (Jamba, Zamba, Falcon-H1, ...).
UNKNOWN_HYBRID_TYPES = ("jamba", "zamba", "zamba2", "falcon_h1", "bamba", "granitemoehybrid", "lfm2", "plamo2",
                        "kimi_linear", "minimax_text_01", "mamba", "mamba2", "rwkv", "rwkv7", "recurrent_gemma")
#: ``layer_types`` values -> attention kind.
LAYER_TYPES = {"full_attention": "full", "attention": "full", "global_attention": "full",
               "sliding_attention": "sliding", "chunked_attention": "chunked",
               "linear_attention": "linear", "mamba": "mamba", "mamba2": "mamba"}
#: ``hybrid_override_pattern`` characters -> (attention kind, MLP kind).
PATTERN = {"M": ("mamba", "none"), "*": ("full", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
_INT_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size",
             "moe_intermediate_size", "num_key_value_heads", "head_dim", "n_routed_experts", "num_experts",
             "num_local_experts", "num_experts_per_tok", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
             "v_head_dim", "q_lora_rank", "max_position_embeddings", "attention_head_dim", "sliding_window",
             "attention_chunk_size", "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
             "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_num_heads",
             "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "sliding_window_pattern",
             "interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_freq", "first_k_dense_replace",
             "global_head_dim", "num_global_key_value_heads", "attention_chunk_size")
#: Keys that must be at least 1 when given (a period or a width of 0 means nothing).
_POSITIVE = ("full_attention_interval", "sliding_window_pattern", "interleave_moe_layer_step", "decoder_sparse_step",
             "moe_layer_freq", "num_key_value_heads", "head_dim", "attention_head_dim", "sliding_window",
             "attention_chunk_size", "max_position_embeddings")
_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
#: Parameter categories a quantised checkpoint stores at low precision (the linear projections).
_QUANTISABLE = ("attention", "linear_attention", "mamba", "mlp", "shared")


def _get(cfg: dict, *keys, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _family(cfg: dict, key: str, what: str = "is required and missing"):
    """``cfg[key]``, else the default of the config's family, else a named error."""
    if cfg.get(key) is not None:
        return cfg[key]
    defaults = FAMILY_DEFAULTS.get(str(cfg.get("model_type")), {})
    if key in defaults:
        return defaults[key]
    raise JaxparetoError(f"config.json: {key}", f"{what} (model_type {cfg.get('model_type')!r} has no known "
                                                "default; add the key)")


def _required(cfg: dict, key: str, positive: bool = False):
    """``cfg[key]``; with ``positive``, a width or count the layer uses must be at least 1 (some
    configs carry 0 for a feature they do not use, so the check is made where it is used)."""
    if cfg.get(key) is None:
        raise JaxparetoError(f"config.json: {key}", "is required and missing")
    if positive and cfg[key] == 0:
        raise JaxparetoError(f"config.json: {key}", f"must be a positive integer, got {cfg[key]!r}")
    return cfg[key]


def _load(path: str | Path | dict) -> tuple[dict, str]:
    """The config (``text_config`` merged over the top level) and a default name."""
    if isinstance(path, dict):
        cfg, default_name = dict(path), path.get("_name_or_path", "hf-model")
    else:
        path = Path(path)
        if not path.is_file():
            raise JaxparetoError("config.json", f"no such file: {path}")
        try:
            cfg = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise JaxparetoError("config.json", f"{path} is not valid JSON: {error}") from None
        if not isinstance(cfg, dict):
            raise JaxparetoError("config.json", f"{path} holds a JSON {type(cfg).__name__}, not an object of "
                                                "settings")
        default_name = cfg.get("_name_or_path") or path.resolve().parent.name
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    for key in _INT_KEYS:
        value = cfg.get(key)
        if key in _REQUIRED and value is None:
            raise JaxparetoError(f"config.json: {key}", "is required and missing")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0 or
                                  (value == 0 and key in (*_REQUIRED, *_POSITIVE))):
            raise JaxparetoError(f"config.json: {key}", f"must be a positive integer, got {value!r}")
    for key in ("mlp_only_layers", "moe_layers", "no_rope_layers", "layer_types"):
        if cfg.get(key) is not None and not isinstance(cfg[key], list):
            raise JaxparetoError(f"config.json: {key}", f"must be a list, got {cfg[key]!r}")
    heads, kv_heads = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    if heads and kv_heads and (kv_heads > heads or heads % kv_heads):  # grouped-query attention shares KV heads
        raise JaxparetoError("config.json: num_key_value_heads", f"must divide num_attention_heads ({heads}), "
                                                                 f"got {kv_heads}")
    tied = cfg.get("tie_word_embeddings")
    if tied is not None and not isinstance(tied, bool):
        raise JaxparetoError("config.json: tie_word_embeddings", f"must be true or false, got {tied!r}")
    if cfg.get("no_rope_layers") is not None and len(cfg["no_rope_layers"]) != cfg["num_hidden_layers"]:
        raise JaxparetoError("config.json: no_rope_layers", f"must list {cfg['num_hidden_layers']} layers")
    for key in ("rope_scaling", "rope_parameters", "quantization_config"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise JaxparetoError(f"config.json: {key}", f"must be a table (a JSON object), got {cfg[key]!r}")
    for where, scaling in _rope_scalings(cfg):
        factor = scaling.get("factor")
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0):
            raise JaxparetoError(f"config.json: {where}.factor", f"must be a number > 0, got {factor!r}")
    return cfg, str(default_name)


def _rope_scalings(cfg: dict) -> list[tuple[str, dict]]:
    """Every RoPE scaling table with the key path it came from: ``rope_scaling`` (transformers
    4), or ``rope_parameters`` (transformers 5), which is either one table or one per layer type
    (``{"full_attention": {...}, "sliding_attention": {...}}``)."""
    if cfg.get("rope_scaling") is not None:
        return [("rope_scaling", cfg["rope_scaling"])]
    parameters = cfg.get("rope_parameters")
    if parameters is None:
        return []
    per_type = {k: v for k, v in parameters.items() if isinstance(v, dict)}
    if per_type and len(per_type) == len(parameters):
        return [(f"rope_parameters.{k}", v) for k, v in per_type.items()]
    return [("rope_parameters", parameters)]


# ---------------------------------------------------------------------------------------------
# Which kind each layer is
# ---------------------------------------------------------------------------------------------

def _attention_kinds(cfg: dict, layers: int) -> list[tuple[str, str | None]]:
    """(attention kind, MLP kind from the pattern or None) per layer."""
    for key in UNKNOWN_HYBRID_KEYS:
        if cfg.get(key) is not None:
            raise JaxparetoError(f"config.json: {key}", "marks hybrid layers jaxpareto does not read yet; give the "
                                 "model as jaxpareto.Model(layer_groups=...) instead")
    model_type = str(cfg.get("model_type", ""))
    if model_type in UNKNOWN_HYBRID_TYPES:
        raise JaxparetoError("config.json: model_type", f"{model_type!r} mixes layer kinds jaxpareto does not read "
                             "yet; give the model as jaxpareto.Model(layer_groups=...) instead")
    if cfg.get("hybrid_override_pattern") is not None:
        pattern = str(cfg["hybrid_override_pattern"])
        unknown = sorted(set(pattern) - set(PATTERN))
        if unknown or len(pattern) != layers:
            raise JaxparetoError("config.json: hybrid_override_pattern", f"must be {layers} characters of "
                                 f"{''.join(PATTERN)} (one per layer); got {len(pattern)} with {unknown or 'no'} unknown")
        return [PATTERN[c] for c in pattern]
    if cfg.get("layer_types") is not None:
        types = [str(t) for t in cfg["layer_types"]]
        unknown = sorted(set(types) - set(LAYER_TYPES))
        if unknown or len(types) != layers:
            raise JaxparetoError("config.json: layer_types", f"must list {layers} layers of {sorted(LAYER_TYPES)}; got "
                                 f"{len(types)} with unknown {unknown or 'none'}")
        return [(LAYER_TYPES[t], None) for t in types]
    if cfg.get("full_attention_interval") is not None:  # Qwen3-Next: linear, linear, linear, full, ...
        every = cfg["full_attention_interval"]
        return [("full" if (i + 1) % every == 0 else "linear", None) for i in range(layers)]
    if model_type == "gemma2":  # alternating, sliding first
        return [("sliding" if i % 2 == 0 else "full", None) for i in range(layers)]
    if model_type in ("gemma3", "gemma3_text"):
        every = _family(cfg, "sliding_window_pattern")
        return [("full" if (i + 1) % every == 0 else "sliding", None) for i in range(layers)]
    if model_type.startswith("llama4") and cfg.get("attention_chunk_size"):
        rope = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(layers)]
        return [("chunked" if rope[i] else "full", None) for i in range(layers)]
    if model_type == "mistral" and cfg.get("sliding_window"):  # Mistral 7B: every layer slides
        return [("sliding", None)] * layers
    return [("full", None)] * layers


def _is_moe_layer(cfg: dict, i: int) -> bool:
    """Whether layer ``i`` has routed experts (the families' placement keys)."""
    if i < (cfg.get("first_k_dense_replace") or 0) or i in set(cfg.get("mlp_only_layers") or []):
        return False
    if cfg.get("moe_layers") is not None:
        return i in set(cfg["moe_layers"])
    if i % (cfg.get("moe_layer_freq") or 1) != 0:
        return False
    step = cfg.get("interleave_moe_layer_step") or cfg.get("decoder_sparse_step") or 1
    return (i + 1) % step == 0


# ---------------------------------------------------------------------------------------------
# Parameters and state of each kind
# ---------------------------------------------------------------------------------------------

def _head_dim(cfg: dict, hidden: int, heads: int) -> int:
    value = _get(cfg, "head_dim", "attention_head_dim")
    if value is None:
        value = _family(cfg, "head_dim", "is missing; guessing hidden_size / num_attention_heads is not safe")
    return hidden // heads if value == _HIDDEN_OVER_HEADS else int(value)


def _attention(cfg: dict, kind: str, hidden: int, heads: int) -> tuple[int, int, dict]:
    """GQA attention of one layer: (projection params, other params, `LayerGroup` fields)."""
    head_dim, kv_heads = _head_dim(cfg, hidden, heads), _get(cfg, "num_key_value_heads", default=heads)
    k_eq_v = False
    if kind == "full" and cfg.get("global_head_dim"):  # Gemma 4's global layers
        head_dim = cfg["global_head_dim"]
        kv_heads = _required(cfg, "num_global_key_value_heads", True) if "num_global_key_value_heads" in cfg \
            and cfg["num_global_key_value_heads"] is not None else kv_heads
        k_eq_v = bool(cfg.get("attention_k_eq_v"))
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    model_type = str(cfg.get("model_type", ""))
    gated = model_type == "qwen3_next" or bool(cfg.get("attn_output_gate"))
    projections = hidden * q_dim * (2 if gated else 1) + hidden * kv_dim * (1 if k_eq_v else 2) + q_dim * hidden
    other = 0  # biases, sinks and norms stay in 16 bits under every quantisation
    if cfg.get("attention_bias"):
        other += q_dim + 2 * kv_dim + hidden
    if model_type == "gpt_oss":
        other += heads  # attention sinks
    if model_type.startswith(("qwen3", "gemma3", "gemma4")):
        other += 2 * head_dim  # q_norm and k_norm over one head
    if cfg.get("use_qk_norm") and cfg.get("qk_norm_type") == "per_layer":  # MiniMax-M2: over all heads
        other += q_dim + kv_dim
    fields = {"kv_heads": kv_heads, "head_dim": head_dim}
    # engines page keys and values apart even where they are equal (vLLM's attention KV spec
    # holds both), so the cache keeps two tensors per token; ``k_eq_v`` drops the projection only
    if kind == "sliding":
        fields["window"] = _family(cfg, "sliding_window")
    elif kind == "chunked":
        fields["window"] = _required(cfg, "attention_chunk_size")
    return projections, other, fields


def _mla(cfg: dict, hidden: int, heads: int) -> tuple[int, dict]:
    """MLA attention weights of one layer and the model's MLA fields."""
    # the latent, its rope part and the value heads cannot be empty (qk_nope_head_dim can)
    d_c, d_rope, d_nope, d_v = (_required(cfg, k, k != "qk_nope_head_dim")
                                for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"))
    q_lora = cfg.get("q_lora_rank")
    q_width = heads * (d_nope + d_rope)
    query = hidden * q_lora + q_lora + q_lora * q_width if q_lora else hidden * q_width
    params = query + hidden * (d_c + d_rope) + d_c + d_c * heads * (d_nope + d_v) + heads * d_v * hidden
    return params, {"attention": "mla", "kv_lora_rank": d_c, "rope_head_dim": d_rope, "attention_heads": heads,
                    "qk_nope_head_dim": d_nope, "v_head_dim": d_v}


def _state_dtype_bytes(cfg: dict, kv_dtype: str) -> float:
    """Bytes per element of a recurrent state: float32 where the config asks for it."""
    dtype = _get(cfg, "mamba_ssm_dtype", "mamba_ssm_cache_dtype", default="")
    return 4.0 if str(dtype) in ("float32", "fp32") else KV_DTYPE_BYTES[kv_dtype]


def _linear_attention(cfg: dict, hidden: int, kv_dtype: str) -> tuple[int, int, dict]:
    """Gated DeltaNet layer: (projection params, other params, `LayerGroup` fields)."""
    n_k, n_v, d_k, d_v, kernel = (_required(cfg, k, True) for k in (
        "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel_dim"))
    keys, values = n_k * d_k, n_v * d_v
    conv_channels = 2 * keys + values
    projections = hidden * (2 * keys + 2 * values) + hidden * 2 * n_v + values * hidden
    other = conv_channels * kernel + 2 * n_v + d_v  # conv, dt_bias and A_log, gated norm
    state = n_v * d_k * d_v * _state_dtype_bytes(cfg, kv_dtype) + (kernel - 1) * conv_channels * KV_DTYPE_BYTES[kv_dtype]
    return projections, other, {"state_bytes": float(state), "state_heads": min(n_k, n_v)}


def _mamba(cfg: dict, hidden: int, kv_dtype: str) -> tuple[int, int, dict]:
    """Mamba-2 layer: (projection params, other params, `LayerGroup` fields)."""
    n_m, d_m, groups, state_size, kernel = (_required(cfg, k, True) for k in (
        "mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel"))
    inner = n_m * d_m
    conv_channels = inner + 2 * groups * state_size
    projections = hidden * (2 * inner + 2 * groups * state_size + n_m) + inner * hidden
    if cfg.get("mamba_proj_bias") or cfg.get("use_bias"):
        projections += 2 * inner + 2 * groups * state_size + n_m + hidden
    other = conv_channels * kernel + (conv_channels if cfg.get("use_conv_bias", True) else 0) + 3 * n_m + inner
    state = n_m * d_m * state_size * _state_dtype_bytes(cfg, kv_dtype) \
        + (kernel - 1) * conv_channels * KV_DTYPE_BYTES[kv_dtype]
    return projections, other, {"state_bytes": float(state), "state_heads": n_m}


def _mlp_params(cfg: dict, hidden: int, width: int) -> int:
    matrices = 2 if str(cfg.get("model_type")) == "nemotron_h" else 3  # squared ReLU: up and down only
    return matrices * hidden * width


# ---------------------------------------------------------------------------------------------
# Quantised storage
# ---------------------------------------------------------------------------------------------

def _stored_format(cfg: dict) -> tuple[str, float]:
    """(dtype of the quantised weights, or of the whole model; group-scale bits per weight).

    Scale bits from the formats' layouts: AWQ and GPTQ keep a 16-bit scale and a 4-bit zero per
    group (group 128: 0.156); compressed-tensors a 16-bit scale per group (+ a zero when
    asymmetric); MXFP4 an 8-bit exponent per 32; NVFP4 an FP8 scale per 16; FP8 with 128x128
    blocks a 32-bit scale per block; bitsandbytes 4-bit a 32-bit absmax per 64 (8-bit with
    double quantisation).

    Raises:
        JaxparetoError: a format jaxpareto has no dtype for (8-bit integer, float32), naming the
            ``weight_dtype`` override to use.
    """
    quant = cfg.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "")).upper()
    bits = quant.get("bits") or quant.get("w_bit")
    weights = [g.get("weights", {}) for g in (quant.get("config_groups") or {}).values() if isinstance(g, dict)]
    group = quant.get("group_size") or quant.get("q_group_size")
    if method == "mxfp4":
        return "fp4", 8 / 32
    if method == "nvfp4" or algo == "NVFP4" or any(w.get("num_bits") == 4 and w.get("type") == "float"
                                                   for w in weights):
        return "fp4", 8 / (group or next((w.get("group_size") for w in weights if w.get("group_size")), 16))
    if method in ("fp8", "fbgemm_fp8") or quant.get("fmt") in ("e4m3", "float8_e4m3fn") or algo == "FP8" or \
            any(w.get("num_bits") == 8 and w.get("type") == "float" for w in weights):
        block = quant.get("weight_block_size")
        return "fp8", (32 / (block[0] * block[1]) if block else 0.0)
    if bits == 4 or (method in ("awq", "gptq") and bits is None):  # AWQ and GPTQ default to 4 bits
        group = group if group and group > 0 else None
        return "int4", ((16 + 4) / group if group else 0.0)
    if quant.get("load_in_4bit"):
        return "int4", (8 / 64 + 32 / (64 * 256) if quant.get("bnb_4bit_use_double_quant") else 32 / 64)
    int4 = [w for w in weights if w.get("num_bits") == 4]
    if int4:
        w = int4[0]
        size = w.get("group_size") or 0
        per_group = 16 + (0 if w.get("symmetric", True) else 4)
        return "int4", (per_group / size if size > 0 else 0.0)
    if quant.get("load_in_8bit") or bits == 8 or any(w.get("num_bits") == 8 for w in weights) or method == "eetq":
        raise JaxparetoError("config.json: quantization_config", "8-bit integer weights have no jaxpareto dtype; "
                             "pass weight_dtype= (e.g. 'fp8' for their 1-byte footprint)")
    if quant:
        raise JaxparetoError("config.json: quantization_config", f"a format jaxpareto does not read ({method or 'no '}"
                             f"quant_method, bits {bits}); pass weight_dtype= (fp16, bf16, fp8, fp4 or int4) for its "
                             "storage")
    torch_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if torch_dtype == "float32":
        raise JaxparetoError("config.json: torch_dtype", "float32 weights are not a serving format; "
                             "pass weight_dtype= (fp16, bf16, fp8, fp4 or int4)")
    if torch_dtype not in ("float16", "bfloat16"):  # a quantised checkpoint says so in quantization_config
        raise JaxparetoError("config.json: torch_dtype", f"{torch_dtype!r} is no 16-bit type jaxpareto reads "
                                                        "(float16, bfloat16); pass weight_dtype= (fp16, bf16, fp8, "
                                                        "fp4 or int4)")
    return {"float16": "fp16"}.get(torch_dtype, "bf16"), 0.0


def _skipped(cfg: dict) -> set[str]:
    """Parameter categories the quantisation config leaves at 16 bits (its ignore lists): an
    entry naming a whole module kind (``self_attn``, ``linear_attn``, ``mixer``, ``shared_expert``,
    the dense MLP's projections), not a norm, a router or one small projection of it."""
    quant = cfg.get("quantization_config") or {}
    entries = [str(e).lower() for e in (quant.get("ignore") or []) + (quant.get("modules_to_not_convert") or [])
               + (quant.get("exclude_modules") or [])]
    skipped = set()
    for entry in entries:
        if "norm" in entry or entry.endswith(("gate", "router", "e_score_correction_bias", "lm_head", "embed_tokens")):
            continue
        whole = entry.rstrip("*.$)").rstrip(".")
        if whole.endswith("linear_attn"):
            skipped.add("linear_attention")
        elif whole.endswith("mixer"):
            skipped.add("mamba")
        elif "linear_attn" not in entry and re.search(r"self_attn|(^|[.*:])attn($|[.*])|\.attention($|[.*])", entry):
            skipped.add("attention")
        elif re.search(r"shared_experts?($|[.*])", entry):
            skipped.add("shared")
        elif re.search(r"mlp\W*\(?(gate|up|down)(_up)?(\|(gate|up|down)(_up)?)*\)?_proj", entry):
            skipped.add("mlp")  # the dense MLP's projections (not mlp.gate, a router)
    return skipped


def _max_context(cfg: dict) -> int | None:
    """``max_position_embeddings``, or a RoPE scaling's extension when larger: factor x
    ``original_max_position_embeddings`` of a YaRN, dynamic or LongRoPE scaling that names its
    original length (Llama 3's and Gemma 3's scalings are already in ``max_position_embeddings``).
    The scaling is ``rope_scaling`` or transformers 5's ``rope_parameters``; with one table per
    layer type, the largest extension any of them gives counts (sliding layers never attend beyond
    their window, and their tables do not extend the context)."""
    limit = cfg.get("max_position_embeddings")
    if limit is None:
        return None
    for _, scaling in _rope_scalings(cfg):
        kind = str(scaling.get("rope_type") or scaling.get("type") or "")
        original = scaling.get("original_max_position_embeddings")
        if kind in ("yarn", "dynamic", "longrope") and scaling.get("factor") and original:
            limit = max(limit, int(scaling["factor"] * original))
    return limit


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------

def hf_config_fields(
    path: str | Path | dict,
    *,
    name: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str = "fp16",
) -> dict:
    """Read a Hugging Face ``config.json`` into the fields of a `jaxpareto.Model` (what
    `Model.from_hf_config` builds the model from).

    Handles dense GQA, MoE (``n_routed_experts`` / ``num_experts`` / ``num_local_experts``,
    ``num_experts_per_tok`` / ``top_k_experts``, ``moe_intermediate_size``, shared experts, the
    MoE placement keys), MLA, and hybrid layers (see the module docstring); a multimodal config's
    ``text_config`` is used when present (vision towers are not counted).

    Args:
        path: path to ``config.json``, or the parsed dict.
        name: model name; default the config's ``_name_or_path`` or the file's folder name.
        weight_dtype: override the stored weight format of the whole model (otherwise read
            from ``quantization_config``, else ``torch_dtype``; a quantisation that skips the
            attention and other non-expert weights sets ``expert_weight_dtype`` only).
        kv_dtype: KV-cache dtype (fp16, bf16, fp8); recurrent states use it too unless the config
            asks for float32 (``mamba_ssm_dtype``).

    Returns:
        The `Model` fields, with computed ``params_total_b``, ``params_active_b``,
        ``input_embedding_params_b``, ``max_context_tokens``, quantised-storage fields, for MoE
        ``expert_params_b`` / ``nonmoe_params_b``, and ``layer_groups`` for a non-uniform model.

    Raises:
        JaxparetoError: a missing or unreadable file, a required key missing or of the wrong
            type, or an unknown hybrid marker (each named in the message).
    """
    cfg, default_name = _load(path)
    layers, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    heads, vocab = cfg["num_attention_heads"], cfg["vocab_size"]
    kinds = _attention_kinds(cfg, layers)
    experts = _get(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    top_k = _get(cfg, "num_experts_per_tok", "experts_per_token", "top_k_experts")
    if weight_dtype is not None and weight_dtype not in WEIGHT_DTYPE_BYTES:
        raise JaxparetoError("weight_dtype", f"unknown dtype {weight_dtype!r}", list(WEIGHT_DTYPE_BYTES))
    if kv_dtype not in KV_DTYPE_BYTES:
        raise JaxparetoError("kv_dtype", f"unknown dtype {kv_dtype!r}", list(KV_DTYPE_BYTES))
    if experts and top_k is None:
        raise JaxparetoError("config.json: num_experts_per_tok", "is required and missing (also read: "
                             "experts_per_token, top_k_experts)")
    norms = FAMILY_DEFAULTS.get(str(cfg.get("model_type")), {}).get("norms_per_layer", 2)
    if cfg.get("hybrid_override_pattern") is not None:
        norms = 1  # one norm per block

    params = dict.fromkeys(_QUANTISABLE + ("router", "norms", "other", "head"), 0)
    expert_total, per_layer, mla_fields = 0, [], {}
    for i, (attention, pattern_mlp) in enumerate(kinds):
        layer: dict = {"attention": attention}
        if cfg.get("kv_lora_rank"):
            count, mla_fields = _mla(cfg, hidden, heads)
            params["attention"] += count
        elif attention in ("full", "sliding", "chunked"):
            count, other, fields = _attention(cfg, attention, hidden, heads)
            params["attention"] += count
            params["other"] += other
            layer.update(fields)
        elif attention == "linear":
            count, other, fields = _linear_attention(cfg, hidden, kv_dtype)
            params["linear_attention"] += count
            params["other"] += other
            layer.update(fields)
        elif attention == "mamba":
            count, other, fields = _mamba(cfg, hidden, kv_dtype)
            params["mamba"] += count
            params["other"] += other
            layer.update(fields)
        params["norms"] += norms * hidden
        moe = (pattern_mlp == "moe") if pattern_mlp is not None else (bool(experts) and _is_moe_layer(cfg, i))
        if pattern_mlp == "none":
            layer["mlp"] = "none"
        elif moe:
            width = _get(cfg, "moe_intermediate_size", "intermediate_size")
            if width is None:
                raise JaxparetoError("config.json: moe_intermediate_size", "is required and missing")
            per_expert = _mlp_params(cfg, hidden, width)
            if cfg.get("model_type") == "gpt_oss":
                per_expert += 2 * width + hidden  # gate_up and down biases
                params["router"] += experts
            expert_total += per_expert
            params["router"] += hidden * experts
            shared = _mlp_params(cfg, hidden, width) * (cfg.get("n_shared_experts") or 0)
            shared_width = _get(cfg, "shared_expert_intermediate_size", "shared_intermediate_size",
                                "moe_shared_expert_intermediate_size", default=0)
            if shared_width and cfg.get("n_shared_experts") and cfg.get("moe_shared_expert_intermediate_size"):
                shared = 0  # Nemotron: the shared expert's own width replaces n x moe width
            shared += _mlp_params(cfg, hidden, shared_width)
            if shared_width and str(cfg.get("model_type", "")).startswith(("qwen2_moe", "qwen3")):
                params["router"] += hidden  # the shared expert's sigmoid gate
            if str(cfg.get("model_type", "")).startswith("llama4"):
                shared += _mlp_params(cfg, hidden, _required(cfg, "intermediate_size"))  # one shared expert
            params["shared"] += shared
            layer["mlp"] = "moe+shared" if shared else "moe"
            if cfg.get("enable_moe_block"):  # Gemma 4: a dense MLP beside the experts
                params["mlp"] += _mlp_params(cfg, hidden, _required(cfg, "intermediate_size"))
                layer["mlp"] = "moe+dense"
        else:
            width = _get(cfg, "intermediate_size_mlp", "intermediate_size")
            if width is None:
                raise JaxparetoError("config.json: intermediate_size", "is required and missing")
            params["mlp"] += _mlp_params(cfg, hidden, width)
            layer["mlp"] = "dense"
        per_layer.append(layer)

    tied = bool(_family(cfg, "tie_word_embeddings"))
    table = vocab * hidden
    params["head"] = table  # the output head (the table itself when tied)
    params["norms"] += hidden  # final norm
    nonmoe = sum(params.values())
    input_table = 0 if tied else table
    moe_layers = sum(1 for layer in per_layer if layer.get("mlp", "").startswith("moe"))

    stored, scale_bits = (weight_dtype, 0.0) if weight_dtype is not None else _stored_format(cfg)
    native = {"float16": "fp16"}.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), "bf16")
    skipped = _skipped(cfg) if weight_dtype is None else set()
    fields: dict = {}
    if experts and "attention" in skipped and stored != native:  # only the routed experts are quantised
        dtype, fields["expert_weight_dtype"] = native, stored
    else:
        dtype = stored
    if WEIGHT_DTYPE_BYTES[dtype] < UNQUANTISED_WEIGHT_BYTES:
        kept = nonmoe - sum(params[c] for c in _QUANTISABLE if c not in skipped)
        if kept:
            fields["unquantised_params_b"] = kept / 1e9
    if scale_bits and (WEIGHT_DTYPE_BYTES[dtype] < UNQUANTISED_WEIGHT_BYTES or "expert_weight_dtype" in fields):
        fields["weight_scale_bits"] = scale_bits

    if experts:
        fields.update(experts=experts, experts_per_token=top_k, expert_params_b=expert_total / 1e9,
                      nonmoe_params_b=nonmoe / 1e9)
    if input_table:
        fields["input_embedding_params_b"] = input_table / 1e9
    if cfg.get("kv_lora_rank"):
        fields.update(mla_fields)
    else:
        fields.update(_uniform_or_groups(per_layer, heads))
    if _max_context(cfg) is not None:
        fields["max_context_tokens"] = _max_context(cfg)
    total = nonmoe + input_table + (experts or 0) * expert_total
    active = nonmoe + (top_k or 0) * expert_total
    sources = {"config": str(path) if not isinstance(path, dict) else "dict"}
    if experts and moe_layers == 0:
        raise JaxparetoError("config.json: num_experts", "is set but no layer has experts (check the MoE "
                             "placement keys)")
    return dict(
        name=name or default_name.split("/")[-1].lower(),
        params_total_b=total / 1e9,
        params_active_b=active / 1e9,
        weight_dtype=dtype,
        layers=layers,
        hidden_size=hidden,
        kv_dtype=kv_dtype,
        sources=sources,
        **fields,
    )


def _uniform_or_groups(per_layer: list[dict], heads: int) -> dict:
    """The `Model`'s attention fields: uniform GQA fields where every layer is full attention
    (optionally with one sliding window), else ``layer_groups``."""
    shapes = {(layer.get("kv_heads"), layer.get("head_dim")) for layer in per_layer}
    kinds = {layer["attention"] for layer in per_layer}
    if len(shapes) == 1 and kinds <= {"full", "sliding"}:
        kv_heads, head_dim = shapes.pop()
        fields = {"attention": "gqa", "kv_heads": kv_heads, "head_dim": head_dim, "attention_heads": heads}
        sliding = [layer for layer in per_layer if layer["attention"] == "sliding"]
        if sliding:
            fields.update(sliding_window=sliding[0]["window"], sliding_layers=len(sliding))
        return fields
    return {"attention": "gqa", "attention_heads": heads, "layer_groups": group_layers(per_layer)}
