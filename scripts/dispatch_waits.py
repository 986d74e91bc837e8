"""How a front end's dealing of a Poisson stream over its replicas changes their prefill wait.

The figures behind ``arrival_cv`` in the validation set's Cisco server rows and docs/model.md
("Open-loop load", arrivals more regular than Poisson): k replicas, each a first-come
first-served prefill server, fed one Poisson stream by four rules:

- ``random``: each request to a replica drawn at random, so each sees a Poisson stream of its own
  (the model's default, ``arrival_cv`` 1);
- ``round_robin``: in turn, every k-th request, Erlang-k gaps (``arrival_cv`` 1 / sqrt(k));
- ``least_tokens``: to the replica with the fewest tokens scheduled so far (each request's prompt
  plus a fixed budget, never decremented), as Cisco's two-node MLPerf harness deals its queries;
- ``fewest_in_flight``: to the replica with the fewest requests not yet finished (join the
  shortest queue), as NVIDIA's single-node harness does in its ``load_balancing`` mode; while the
  decoding requests make up most of what is in flight, this deals almost at random.

Prints the mean prefill wait of each rule, and the GI/G/1 wait the model gives for Erlang-k gaps
(`jaxpareto.physics.queueing.renewal_wait_factor`). No GPU model: prefill times are the row's
(Llama-3.1-405B's MLPerf prompts on Cisco's H100s by default), decode residence a lognormal.
About 5 s.

Usage: python scripts/dispatch_waits.py [--replicas 2 8] [--requests 200000]
"""

from __future__ import annotations

import argparse
import heapq

import numpy as np

from jaxpareto.physics.queueing import mg1_wait_ms, renewal_wait_factor
from _common import markdown_table

RULES = ("random", "round_robin", "least_tokens", "fewest_in_flight")


def lognormal(rng, mean: float, cv: float, n: int) -> np.ndarray:
    sigma = np.sqrt(np.log1p(cv * cv))
    return mean * rng.lognormal(-0.5 * sigma * sigma, sigma, n)


def mean_wait_s(rule: str, replicas: int, rate_per_replica: float, prefill_s: float, prompt_cv: float,
                prompt_tokens: float, budget_tokens: float, decode_s: float, decode_cv: float, requests: int,
                seed: int = 0) -> float:
    """The mean wait for prefill [s] over the last 90 % of ``requests`` dealt by ``rule``."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / (rate_per_replica * replicas), requests))
    size = lognormal(rng, 1.0, prompt_cv, requests)  # prompt length over its mean
    decode = lognormal(rng, decode_s, decode_cv, requests)
    free = np.zeros(replicas)  # when each replica's prefill server is next free
    scheduled = np.zeros(replicas)  # least_tokens' running totals
    in_flight = [[] for _ in range(replicas)]  # heaps of finishing times
    waits = np.empty(requests)
    turn = -1
    for i, now in enumerate(arrivals):
        if rule == "random":
            r = int(rng.integers(replicas))
        elif rule == "round_robin":
            turn = r = (turn + 1) % replicas
        elif rule == "least_tokens":
            r = int(np.argmin(scheduled))
            scheduled[r] += size[i] * prompt_tokens + budget_tokens
        else:
            for heap in in_flight:
                while heap and heap[0] <= now:
                    heapq.heappop(heap)
            r = int(np.argmin([len(heap) for heap in in_flight]))
        start = max(now, free[r])
        waits[i] = start - now
        free[r] = start + prefill_s * size[i]
        heapq.heappush(in_flight[r], free[r] + decode[i])
    return float(waits[requests // 10:].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--rate", type=float, default=0.41, help="requests/s per replica (default 0.41)")
    parser.add_argument("--prefill-s", type=float, default=1.26, help="mean prefill time [s] (default 1.26)")
    parser.add_argument("--prompt-cv", type=float, default=0.43)
    parser.add_argument("--prompt-tokens", type=float, default=9429.0)
    parser.add_argument("--budget-tokens", type=float, default=2560.0)
    parser.add_argument("--decode-s", type=float, default=45.0, help="mean time in decode [s] (default 45)")
    parser.add_argument("--decode-cv", type=float, default=0.38)
    parser.add_argument("--requests", type=int, default=200_000)
    args = parser.parse_args()
    service_scv = args.prompt_cv ** 2
    out = []
    for k in args.replicas:
        waits = {rule: mean_wait_s(rule, k, args.rate, args.prefill_s, args.prompt_cv, args.prompt_tokens,
                                   args.budget_tokens, args.decode_s, args.decode_cv, args.requests)
                 for rule in RULES}
        poisson, load = (float(v) for v in mg1_wait_ms(args.rate, args.prefill_s, service_scv))
        model = poisson * float(renewal_wait_factor(1.0 / k, service_scv, load))
        out.append([str(k), f"{load:.2f}", f"{poisson:.3f}", *(f"{waits[r]:.3f}" for r in RULES), f"{model:.3f}",
                    f"{1 - waits['least_tokens'] / waits['random']:.0%}",
                    f"{1 - waits['fewest_in_flight'] / waits['random']:.0%}"])
    print(markdown_table(["replicas", "prefill load", "M/G/1 wait s", *(f"{r} s" for r in RULES),
                          "model, Erlang-k gaps s", "least_tokens under random", "fewest_in_flight under random"],
                         out))


if __name__ == "__main__":
    main()
