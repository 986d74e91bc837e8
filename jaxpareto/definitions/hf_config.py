"""Read a `Model`'s fields from a Hugging Face ``config.json``.

Parameter counts follow the standard per-layer formulas below, which reproduce the published
totals of the catalog's models (their model cards) within about 1 %:

- attention, GQA: h·(n_h·d) + 2·h·(n_kv·d) + (n_h·d)·h, plus biases when
  ``attention_bias`` is set, per-head sinks (gpt-oss) and q/k norms (Qwen3);
- attention, MLA: h·q_lora + q_lora·n_h·(d_nope + d_rope) + h·(d_c + d_rope)
  + d_c·n_h·(d_nope + d_v) + n_h·d_v·h, plus the two latent norms (without ``q_lora_rank``
  the query projection is h·n_h·(d_nope + d_rope));
- a SwiGLU MLP or expert: 3·h·I (gpt-oss experts add their 2·I + h biases);
- a MoE layer: E routed experts + shared experts + the router h·E;
- embeddings and an untied LM head: V·h each; two norms per layer and a final norm.

"Active" parameters are the non-expert part plus K routed experts, embeddings included.
"""

from __future__ import annotations

import json
from pathlib import Path

from jaxpareto.definitions.errors import JaxparetoError


def _get(cfg: dict, *keys, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _weight_dtypes(cfg: dict) -> tuple[str, str | None]:
    """(weight_dtype, expert_weight_dtype or None): a quantisation that leaves attention and
    the other non-expert weights out (compressed-tensors ``ignore``, MXFP4
    ``modules_to_not_convert``) applies to the routed experts only."""
    quant = cfg.get("quantization_config") or {}
    stored = _weight_dtype(cfg)
    native = {"float16": "fp16"}.get(str(cfg.get("torch_dtype", "bfloat16")), "bf16")
    skipped = " ".join(map(str, (quant.get("ignore") or []) + (quant.get("modules_to_not_convert") or [])))
    experts_only = "self_attn" in skipped and stored != native
    return (native, stored) if experts_only else (stored, None)


def _weight_dtype(cfg: dict) -> str:
    """Stored weight format of the quantised weights (or of the whole model).

    Raises:
        JaxparetoError: a format jaxpareto has no dtype for (8-bit integer, float32), naming
            the ``weight_dtype`` override to use.
    """
    quant = cfg.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    bits = quant.get("bits") or quant.get("w_bit")
    weights = [g.get("weights", {}) for g in (quant.get("config_groups") or {}).values() if isinstance(g, dict)]
    group_bits = {w.get("num_bits") for w in weights}
    if method in ("mxfp4", "nvfp4") or "fp4" in method or quant.get("quant_algo", "").upper() == "NVFP4":
        return "fp4"
    if method in ("fp8", "fbgemm_fp8") or quant.get("fmt") == "e4m3" or quant.get("quant_algo", "").upper() == "FP8":
        return "fp8"
    if quant.get("load_in_4bit") or bits == 4 or 4 in group_bits:  # AWQ, GPTQ, bitsandbytes, compressed-tensors
        return "int4"
    if any(w.get("num_bits") == 8 and w.get("type") == "float" for w in weights):
        return "fp8"  # compressed-tensors FP8
    if quant.get("load_in_8bit") or bits == 8 or 8 in group_bits:
        raise JaxparetoError("config.json: quantization_config", "8-bit integer weights have no jaxpareto dtype; "
                             "pass weight_dtype= (e.g. 'fp8' for their 1-byte footprint)")
    torch_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if torch_dtype == "float32":
        raise JaxparetoError("config.json: torch_dtype", "float32 weights are not a serving format; "
                             "pass weight_dtype= (fp16, bf16, fp8, fp4 or int4)")
    return {"float16": "fp16"}.get(torch_dtype, "bf16")


def _attention_params(cfg: dict, hidden: int, heads: int) -> tuple[int, dict]:
    """Per-layer attention weights and the attention fields of the `Model`."""
    if cfg.get("kv_lora_rank"):
        d_c = cfg["kv_lora_rank"]
        d_rope = cfg["qk_rope_head_dim"]
        d_nope = cfg["qk_nope_head_dim"]
        d_v = cfg["v_head_dim"]
        q_lora = cfg.get("q_lora_rank")
        q_width = heads * (d_nope + d_rope)
        query = hidden * q_lora + q_lora + q_lora * q_width if q_lora else hidden * q_width
        params = query + hidden * (d_c + d_rope) + d_c + d_c * heads * (d_nope + d_v) + heads * d_v * hidden
        return params, {"attention": "mla", "kv_lora_rank": d_c, "rope_head_dim": d_rope, "attention_heads": heads,
                        "qk_nope_head_dim": d_nope, "v_head_dim": d_v}
    head_dim = _get(cfg, "head_dim", default=hidden // heads)
    kv_heads = _get(cfg, "num_key_value_heads", default=heads)
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    params = hidden * q_dim + 2 * hidden * kv_dim + q_dim * hidden
    if cfg.get("attention_bias"):
        params += q_dim + 2 * kv_dim + hidden
    if cfg.get("model_type") == "gpt_oss":
        params += heads  # attention sinks
    if str(cfg.get("model_type", "")).startswith("qwen3"):
        params += 2 * head_dim  # q_norm and k_norm
    return params, {"attention": "gqa", "kv_heads": kv_heads, "head_dim": head_dim, "attention_heads": heads}


def hf_config_fields(
    path: str | Path | dict,
    *,
    name: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str = "fp16",
) -> dict:
    """Read a Hugging Face ``config.json`` into the fields of a `jaxpareto.Model` (what
    `Model.from_hf_config` builds the model from).

    Handles dense GQA (with or without an explicit ``head_dim``), MoE (``n_routed_experts`` /
    ``num_experts`` / ``num_local_experts``, ``moe_intermediate_size``, shared experts,
    ``first_k_dense_replace``, ``mlp_only_layers``) and MLA; a multimodal config's
    ``text_config`` is used when present (vision towers are not counted).

    Args:
        path: path to ``config.json``, or the parsed dict.
        name: model name; default the config's ``_name_or_path`` or the file's folder name.
        weight_dtype: override the stored weight format of the whole model (otherwise read
            from ``quantization_config``, else ``torch_dtype``; a quantisation that skips the
            attention and other non-expert weights sets ``expert_weight_dtype`` only).
        kv_dtype: KV-cache dtype (fp16, bf16, fp8).

    Returns:
        The `Model` fields, with computed ``params_total_b``, ``params_active_b`` and, for MoE,
        ``expert_params_b`` / ``nonmoe_params_b``.

    Raises:
        JaxparetoError: a missing or unreadable file, or a required key missing (named in the
            message).
    """
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
        default_name = cfg.get("_name_or_path") or path.resolve().parent.name
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size",
                "moe_intermediate_size", "num_key_value_heads", "head_dim", "n_routed_experts", "num_experts",
                "num_local_experts", "num_experts_per_tok", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                "v_head_dim", "q_lora_rank"):
        value = cfg.get(key)
        if key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size") and value is None:
            raise JaxparetoError(f"config.json: {key}", "is required and missing")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0 or
                                  (value == 0 and key in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                          "vocab_size"))):
            raise JaxparetoError(f"config.json: {key}", f"must be a positive integer, got {value!r}")

    layers, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    heads, vocab = cfg["num_attention_heads"], cfg["vocab_size"]
    attn, attn_fields = _attention_params(cfg, hidden, heads)
    norms = 2 * hidden

    experts = _get(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    top_k = _get(cfg, "num_experts_per_tok", "experts_per_token")
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2) + hidden

    def required(key):
        if cfg.get(key) is None:
            raise JaxparetoError(f"config.json: {key}", "is required and missing")
        return cfg[key]

    if not experts:
        dense_mlp = 3 * hidden * required("intermediate_size")
        total = layers * (attn + dense_mlp + norms) + embeddings
        active = total
        moe_fields: dict = {}
    else:
        expert_width = _get(cfg, "moe_intermediate_size", "intermediate_size")
        if expert_width is None or top_k is None:
            raise JaxparetoError("config.json: moe_intermediate_size / num_experts_per_tok", "is required and missing")
        per_expert = 3 * hidden * expert_width
        router = hidden * experts
        if cfg.get("model_type") == "gpt_oss":
            per_expert += 2 * expert_width + hidden  # gate_up and down biases
            router += experts
        shared = 3 * hidden * expert_width * (cfg.get("n_shared_experts") or 0)
        shared += 3 * hidden * (cfg.get("shared_expert_intermediate_size") or 0)
        dense_layers = set(range(cfg.get("first_k_dense_replace") or 0))
        dense_layers |= set(cfg.get("mlp_only_layers") or [])
        n_dense = len(dense_layers)
        n_moe = layers - n_dense
        dense_mlp = 3 * hidden * required("intermediate_size") if n_dense else 0
        nonmoe = layers * (attn + norms) + n_dense * dense_mlp + n_moe * (shared + router) + embeddings
        expert_total = n_moe * per_expert
        total = nonmoe + experts * expert_total
        active = nonmoe + top_k * expert_total
        moe_fields = {
            "experts": experts,
            "experts_per_token": top_k,
            "expert_params_b": expert_total / 1e9,
            "nonmoe_params_b": nonmoe / 1e9,
        }
    # an override applies to the whole model (and stands in for formats we cannot read)
    dtype, expert_dtype = (weight_dtype, None) if weight_dtype is not None else _weight_dtypes(cfg)
    if expert_dtype is not None and moe_fields:
        moe_fields["expert_weight_dtype"] = expert_dtype
    types = cfg.get("layer_types") or []
    sliding = sum(1 for t in types if "sliding" in str(t))
    window = {"sliding_window": cfg["sliding_window"], "sliding_layers": sliding} \
        if sliding and cfg.get("sliding_window") else {}
    return dict(
        name=name or str(default_name).split("/")[-1].lower(),
        params_total_b=total / 1e9,
        params_active_b=active / 1e9,
        weight_dtype=dtype,
        layers=layers,
        hidden_size=hidden,
        kv_dtype=kv_dtype,
        sources={"config": str(path) if not isinstance(path, dict) else "dict"},
        **attn_fields,
        **moe_fields,
        **window,
    )
