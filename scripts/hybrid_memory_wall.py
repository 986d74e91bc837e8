"""What linear attention does to the memory wall of a 128K-context coding agent (the README's table
in "Catalog").

Qwen3-Next-80B-A3B (36 Gated DeltaNet layers with a fixed state + 12 full-attention layers) against
the same model read with every layer as full attention (what a non-hybrid model of the same size
and active size costs; also how configs were misread before the per-layer description), and
against a dense model of about the same active size, Qwen3-4B with YaRN to 128K. On 8 H200
(vLLM's memory reserve, the measured profile with the shipped Hopper calibration): TraceLab's
Claude Code step at 126K context, 252 output tokens, 97.9 % prefix hits, 0.3 s tools.
For each: sessions that fit per GPU at the best TP, and the best output tokens/s per GPU with
TPOT <= 50 ms and TTFT <= 10 s.

    python scripts/hybrid_memory_wall.py        # about 30 s
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxpareto as jp  # noqa: E402

GPUS = 8
CONTEXT = 126_180
# Qwen/Qwen3-4B config.json fields, with the YaRN scaling its model card gives for 131,072 tokens
QWEN3_4B = {"_name_or_path": "qwen3-4b-yarn", "model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 2560,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728,
            "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 40960,
            "torch_dtype": "bfloat16",
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}


def models() -> dict[str, jp.Model]:
    hybrid = jp.catalog.models()["qwen3-next-80b-a3b"]
    full = next(g for g in hybrid.groups if g.attention == "full")
    all_full = hybrid.model_copy(update={"name": "qwen3-next-all-full", "layer_groups": (
        full.model_copy(update={"count": hybrid.layers}),)})
    return {"Qwen3-Next-80B-A3B (hybrid)": hybrid, "same, every layer full attention": all_full,
            "Qwen3-4B dense (YaRN 128K)": jp.Model.from_hf_config(QWEN3_4B)}


def main() -> int:
    rows = []
    for label, model in models().items():
        common = dict(gpu=["h200-sxm"], model=[model], think_time_s=[0.3], context_tokens=[CONTEXT],
                      hit_rate=[0.979], osl=252, engine=["vllm"], calibration="hopper-measured")
        fits = jp.sweep(**common, tp=[1, 2, 4, 8], concurrency=[1])
        per_gpu = (fits.concurrency_max / fits.tp).squeeze()
        best = jp.optimize(**common, tp=(1, 2, 4, 8), concurrency=(1, 4096),
                           constraints={"tpot_ms": ("<=", 50), "ttft_ms": ("<=", 10_000)})
        tp = int(best.tp.values.ravel()[0])
        rows.append([label, f"{model.kv_bytes_per_token:,.0f}", f"{model.state_bytes_per_sequence / 1e6:.1f}",
                     f"{float(per_gpu.max()):.0f} (TP {int(per_gpu.tp[int(per_gpu.argmax('tp'))])})",
                     f"TP {tp} x {GPUS // tp}, {int(best.concurrency.values.ravel()[0]) * (GPUS // tp)} sessions",
                     f"{float(best.output_tokens_per_s_per_gpu.values.ravel()[0]):.0f}",
                     f"{float(best.tpot_ms.values.ravel()[0]):.1f}"])
    header = ["model", "KV B/token", "state MB/session", "sessions per GPU", "best layout on 8 GPUs",
              "tokens/s/GPU", "TPOT ms"]
    print("| " + " | ".join(header) + " |\n|" + "|".join(" --- " for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
