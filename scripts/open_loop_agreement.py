"""The open loop against a simulated server: means and percentiles of TTFT, TPOT, ITL and E2E
latency from the model (``arrivals="poisson"``, the shared engine) and from the discrete-event
simulation of a continuous-batching server with chunked prefill in ``tests/simulator.py`` (fed
the model's own step times, at most ``concurrency_max`` requests holding KV), at 30 % to 90 % of
the model's capacity, for prompts of a thirty-second, a quarter, 0.37, 0.61, one, 1.46 and two
chunks with fixed or lognormal lengths, and for a prefix-cached agent's turns (`HIT_CASES`: a
share of the prompts hits and prefills only its new tokens, the others the whole context). About
10 min; ``--quick`` about 15 s (two cases, two loads, fewer requests, one run, no hit cases).

Each row pools ``--seeds`` independent simulated runs (8 by default, 20,000 requests each, the
first tenth of each left out): near capacity one run's mean TTFT is a noisy reference (eight
runs of the same 90 % row put the model anywhere from 3 % under to 24 % over). The last column,
"± 2 SE", is twice the standard error of the pooled mean TTFT across the runs, in % of it.

Cells are model / simulated - 1 in %; a * marks one beyond the open-loop goals (means of TTFT
and TPOT within 10 %, their P99 within 20 %). The last two columns before it are the KV-slot
queue's: the chance that a request waits for a slot (``memory_wait_probability`` against the
simulated share) and the mean wait over every request (``memory_wait_ms``), where at least 1 % of
the simulated requests wait ("-" elsewhere). Unlike the other scripts this one imports the test
suite's simulator (run it from the repository root).

``--memory-scale 40`` gives the GPU 40 times its memory, in the model and the simulated server
alike, at the same request rates (the loads stay those of the GPU's own memory): the KV slots
then never bind, and the rows show what the KV-slot wait does to the agreement (the cells beyond
the goals at the GPU's own memory are all rows where it binds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import jaxpareto as jp  # noqa: E402
from jaxpareto.definitions.catalog import resolve_gpu  # noqa: E402
from simulator import Simulated, at_load, model_step, simulate  # noqa: E402

GPU, MODEL, OSL, CHUNK = "h100-sxm", "llama-3.1-8b", 128, 8192.0
CASES = [(256, 0.5), (2048, 0.0), (2048, 0.5), (3000, 0.0), (5000, 0.0), (5000, 0.5), (8192, 0.5), (12000, 0.0),
         (16384, 0.0), (16384, 0.5)]
# (context, hit rate, new tokens a hit prefills, length cv): 2,128 new tokens, the seed's delta less OSL
HIT_CASES = [(16384, 0.9, 2128, 0.0), (32768, 0.9, 2128, 0.0), (16384, 0.5, 2128, 0.5)]
LOADS = (0.3, 0.6, 0.8, 0.9)
COLUMNS = [("ttft", "mean", 10), ("ttft", 50, None), ("ttft", 99, 20), ("tpot", "mean", 10), ("tpot", 50, None),
           ("tpot", 99, 20), ("itl", "mean", None), ("itl", 99, None), ("e2el", "mean", None), ("e2el", 99, None)]
MEANS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "tpot_ms", "e2el": "latency_ms"}


def cells(point, sim) -> list[float]:
    """model / simulated - 1 [%] for each of `COLUMNS`."""
    measured = {"ttft": sim.ttft_ms, "tpot": sim.tpot_ms, "itl": sim.itl_ms, "e2el": sim.e2el_ms}
    out = []
    for metric, stat, _ in COLUMNS:
        if stat == "mean":
            model, simulated = float(point[MEANS[metric]]), measured[metric].mean()
        else:
            model, simulated = float(point[f"p{stat}_{metric}_ms"]), np.percentile(measured[metric], stat)
        out.append(100.0 * (model / simulated - 1.0))
    return out


def slot_cells(point, sim) -> list[str]:
    """The KV-slot queue's chance of waiting and mean wait, model / simulated - 1 [%], where at
    least 1 % of the simulated requests wait for a slot ("-" elsewhere)."""
    share = float((sim.slot_wait_ms > 0).mean())
    if share < 0.01:
        return ["-", "-"]
    return [f"{100.0 * (float(point.memory_wait_probability) / share - 1.0):+.0f}",
            f"{100.0 * (float(point.memory_wait_ms) / sim.slot_wait_ms.mean() - 1.0):+.0f}"]


def pooled(runs: list[Simulated]) -> tuple[Simulated, float]:
    """The runs' requests as one sample, and twice the standard error of its mean TTFT across the
    runs (in % of that mean; 0 for one run)."""
    means = np.array([run.ttft_ms.mean() for run in runs])
    spread = 2.0 * means.std(ddof=1) / np.sqrt(len(runs)) if len(runs) > 1 else 0.0
    joined = Simulated(*(np.concatenate([getattr(run, f) for run in runs]) for f in Simulated._fields[:4]),
                       float(np.mean([run.mean_batch for run in runs])),
                       *(np.concatenate([getattr(run, f) for run in runs]) for f in Simulated._fields[5:]))
    return joined, 100.0 * spread / joined.ttft_ms.mean()


def header(first: str) -> None:
    names = [f"{m} {s if s == 'mean' else f'P{s}'}" for m, s, _ in COLUMNS] + ["slot P(wait)", "slot wait"]
    print(f"| prompt | {first} | load | rate /s | " + " | ".join(names) + " | ± 2 SE |")
    print("|" + "---|" * (7 + len(COLUMNS)))


def table(cases, loads, requests: int, seeds: int, memory_scale: float = 1.0) -> None:
    """One row per case and load, then the largest error of each column. ``memory_scale``: the
    GPU's memory times this, at the rates of its own memory's loads (module docstring)."""
    worst = np.zeros(len(COLUMNS))
    gpu = resolve_gpu(GPU)
    if memory_scale != 1.0:
        gpu = gpu.model_copy(update=dict(name=f"{GPU}-memory-x{memory_scale:g}", memory_gb=memory_scale * gpu.memory_gb,
                                         memory_reported_gb=None))
    rates = np.geomspace(0.02, 200.0, 500)
    for context, hit_rate, new_tokens, cv in cases:
        settings = dict(arrivals="poisson", context_tokens=context, osl=OSL, prefill_model="shared",
                        isl_cv=cv, osl_cv=cv, hit_rate=hit_rate, delta_tokens=new_tokens + OSL, dtype="float64")
        ds = jp.sweep(GPU, MODEL, tp=1, request_rate=rates, **settings).squeeze()
        scaled = ds if memory_scale == 1.0 else jp.sweep(gpu, MODEL, tp=1, request_rate=rates, **settings).squeeze()
        step = model_step(GPU, MODEL, context)
        for load in loads:
            point = scaled.sel(request_rate=float(at_load(ds, load).request_rate))
            rate = float(point.request_rate)
            sim, error = pooled([simulate(step, rate, requests, context, OSL, CHUNK, cv, cv, seed=seed,
                                          slots=int(point.concurrency_max), hit_share=hit_rate,
                                          hit_tokens=new_tokens) for seed in range(1, seeds + 1)])
            row = cells(point, sim)
            worst = np.maximum(worst, np.abs(row))
            marked = [f"{c:+.0f}" + ("*" if goal is not None and abs(c) > goal else "")
                      for c, (_, _, goal) in zip(row, COLUMNS)]
            kind = f"{hit_rate}, {cv}" if hit_rate else f"{cv}"
            print(f"| {context} | {kind} | {load:.0%} | {rate:.2f} | " + " | ".join(marked + slot_cells(point, sim))
                  + f" | {error:.0f} |")
    print("| largest | | | | " + " | ".join(f"{w:.0f}" for w in worst) + " | | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run of 5,000 requests, two cases at 60 %% and 90 %%")
    parser.add_argument("--seeds", type=int, default=8, help="independent simulated runs pooled per row (default 8)")
    parser.add_argument("--memory-scale", type=float, default=1.0,
                        help="the GPU's memory times this in the model and the simulated server, at the same rates "
                             "(40: the KV slots never bind; default 1)")
    args = parser.parse_args()
    if args.memory_scale < 1.0:
        parser.error(f"--memory-scale must be at least 1, got {args.memory_scale}")
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    requests, seeds = (5_000, 1) if args.quick else (20_000, args.seeds)
    cases, loads = ([(256, 0.5), (16384, 0.0)], (0.6, 0.9)) if args.quick else (CASES, LOADS)
    memory = "" if args.memory_scale == 1.0 else f" with {args.memory_scale:g}x its memory (the loads its own memory's)"
    print(f"{GPU}{memory}, {MODEL}, TP 1, OSL {OSL}, chunk {CHUNK:.0f}, seed profile, shared engine; {seeds} x "
          f"{requests:,} simulated requests per row. Cells: model / simulated - 1, in %; * beyond the goals.\n")
    header("length cv")
    table([(context, 0.0, 0, cv) for context, cv in cases], loads, requests, seeds, args.memory_scale)
    if not args.quick:
        print("\nPrefix-cache hits: a share h of the prompts prefills its new tokens (2,128), the others the "
              "whole context (the prompt column)\n")
        header("h, length cv")
        table(HIT_CASES, loads, requests, seeds, args.memory_scale)


if __name__ == "__main__":
    main()
