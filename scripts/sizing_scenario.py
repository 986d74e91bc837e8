"""The sizing question AIConfigurator answers, asked of jaxpareto with the seed's model and with
the measured profile calibrated on Hopper (the README's side-by-side).

Llama-3.1-70B (bf16 unless ``--model``) on 8x H100, ISL 4,000, OSL 500, TTFT <= 2 s, TPOT <= 50 ms:
the best TP and concurrency per TP group for output tokens/s per GPU, per engine.

    python scripts/sizing_scenario.py [--model llama-3.1-70b-fp8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxpareto as jp  # noqa: E402

GPUS = 8


def answer(ds) -> dict:
    row = {k: ds[k].values.ravel()[0] for k in ("tp", "concurrency", "output_tokens_per_s_per_gpu", "ttft_ms",
                                                 "tpot_ms")}
    replicas = GPUS // int(row["tp"])
    return {"layout": f"TP {int(row['tp'])} x {replicas}", "concurrency": int(row["concurrency"]) * replicas,
            "tokens/s/GPU": round(float(row["output_tokens_per_s_per_gpu"])),
            "TTFT ms": round(float(row["ttft_ms"])), "TPOT ms": round(float(row["tpot_ms"]), 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-70b")
    parser.add_argument("--calibration", default="hopper-measured")
    args = parser.parse_args(argv)
    common = dict(gpu=["h100-sxm"], model=[args.model], think_time_s=[0.0], context_tokens=[4000], hit_rate=[0.0],
                  osl=500, constraints={"ttft_ms": ("<=", 2000), "tpot_ms": ("<=", 50)}, tp=(1, 2, 4, 8),
                  concurrency=(1, 1024))
    rows = [{"model": "seed profile", **answer(jp.optimize(**common))}]
    for engine in ("vllm", "sglang", "trtllm"):
        rows.append({"model": f"measured, {engine}",
                     **answer(jp.optimize(**common, engine=[engine], calibration=args.calibration))})
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + "|".join(" --- " for _ in keys) + "|")
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
