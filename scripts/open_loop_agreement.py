"""The open loop against a simulated server: means and percentiles of TTFT, TPOT, ITL and E2E
latency from the model (``arrivals="poisson"``, the shared engine) and from the discrete-event
simulation of a continuous-batching server with chunked prefill in ``tests/simulator.py`` (fed
the model's own step times), at 30 % to 90 % of the model's capacity, for short and long prompts
and fixed or lognormal lengths. About 1 min; ``--quick`` 20 s (fewer requests and cases).

Unlike the other scripts this one imports the test suite's simulator (run it from the
repository root).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import jaxpareto as jp  # noqa: E402
from simulator import model_step, simulate  # noqa: E402

GPU, MODEL, OSL, CHUNK = "h100-sxm", "llama-3.1-8b", 128, 8192.0
METRICS = ("ttft", "tpot", "itl", "e2el")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 requests, one case")
    args = parser.parse_args()
    requests = 5_000 if args.quick else 20_000
    cases = [(2048, 0.0), (2048, 0.5), (16384, 0.5)][: 1 if args.quick else None]
    print(f"{GPU}, {MODEL}, TP 1, OSL {OSL}, chunk {CHUNK:.0f}, seed profile, shared engine; {requests:,} "
          "simulated requests per row. Cells: model / simulated - 1, in %.\n")
    print("| prompt | length cv | load | rate /s | " + " | ".join(
        f"{m} mean | {m} P50 | {m} P99" for m in METRICS) + " |")
    print("|" + "---|" * (4 + 3 * len(METRICS)))
    for context, cv in cases:
        settings = dict(arrivals="poisson", context_tokens=context, osl=OSL, prefill_model="shared",
                        isl_cv=cv, osl_cv=cv, dtype="float64")
        rates = np.geomspace(0.02, 40.0, 400)
        ds = jp.sweep(GPU, MODEL, tp=1, request_rate=rates, **settings).squeeze()
        capacity = float(ds.request_rate.where(ds.feasible, drop=True).max())
        step = model_step(GPU, MODEL, context)
        for load in (0.3, 0.6, 0.9):
            point = ds.sel(request_rate=load * capacity, method="nearest")
            rate = float(point.request_rate)
            sim = simulate(step, rate, requests, context, OSL, CHUNK, cv, cv, seed=1, slots=int(point.concurrency_max))
            measured = {"ttft": sim.ttft_ms, "tpot": sim.tpot_ms, "itl": sim.itl_ms, "e2el": sim.e2el_ms}
            means = {"ttft": point.ttft_ms, "tpot": point.tpot_ms, "itl": point.tpot_ms, "e2el": point.latency_ms}
            cells = []
            for m in METRICS:
                cells.append(100 * (float(means[m]) / measured[m].mean() - 1))
                cells += [100 * (float(point[f"p{p}_{m}_ms"]) / np.percentile(measured[m], p) - 1) for p in (50, 99)]
            print(f"| {context} | {cv} | {load:.0%} | {rate:.2f} | " + " | ".join(f"{c:+.0f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
