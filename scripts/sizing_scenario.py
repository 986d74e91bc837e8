"""The sizing question AIConfigurator answers, asked of jaxpareto with the seed's model and with
the measured profile calibrated on Hopper (the README's side-by-side).

Llama-3.1-70B (bf16 unless ``--model``) on 8x H100, ISL 4,000, OSL 500, TTFT <= 2 s, TPOT <= 50 ms:
the best layout of replicas filling the 8 GPUs for output tokens/s per GPU, aggregated or
disaggregated, per engine (``jp.optimize(..., gpu_budget=8)``).

    python scripts/sizing_scenario.py [--model llama-3.1-70b-fp8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxpareto as jp  # noqa: E402

GPUS = 8


def answer(result) -> dict:
    """The best layout of the budget (`jp.optimize(..., gpu_budget=8)`) as the table's row."""
    if not result.feasible:
        return {"layout": f"none ({result.reason})", "serving": "", "concurrency": "", "tokens/s/GPU": "", "TTFT ms": "",
                "TPOT ms": ""}
    layout = f"{result.layouts.iloc[0]['layout']} x {result.replicas}" if result.serving == "aggregated" else \
        (f"{result.prefill_workers}x TP {result.prefill_tp} prefill + {result.decode_workers}x TP {result.tp} decode"
         + (f", x {result.replicas}" if result.replicas > 1 else ""))
    return {"layout": layout, "serving": result.serving, "concurrency": result.concurrency * result.replicas,
            "tokens/s/GPU": round(result.value), "TTFT ms": round(result.metrics["ttft_ms"]),
            "TPOT ms": round(result.metrics["tpot_ms"], 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-70b")
    parser.add_argument("--calibration", default="hopper-measured")
    args = parser.parse_args(argv)
    common = dict(gpu="h100-sxm", model=args.model, think_time_s=0.0, context_tokens=4000, hit_rate=0.0,
                  osl=500, constraints={"ttft_ms": ("<=", 2000), "tpot_ms": ("<=", 50)}, tp=(1, 2, 4, 8),
                  concurrency=(1, 1024), gpu_budget=GPUS)
    rows = [{"model": "seed profile", **answer(jp.optimize(**common))}]
    for engine in ("vllm", "sglang", "trtllm"):
        rows.append({"model": f"measured, {engine}",
                     **answer(jp.optimize(**common, engine=engine, calibration=args.calibration))})
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + "|".join(" --- " for _ in keys) + "|")
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
