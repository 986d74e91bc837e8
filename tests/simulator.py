"""A discrete-event simulation of a continuous-batching server with chunked prefill, fed the
model's own step times (tests of `jaxpareto.physics.queueing` and `jaxpareto.physics.percentiles`).

Requests arrive as a Poisson process. Every engine step carries one decode token of each request
that has finished its prefill, plus up to ``chunk_tokens`` prefill tokens taken first-come
first-served from the waiting requests (vLLM's scheduler with chunked prefill); it lasts
T(n, p) = max(memory(n), compute(n) + p c_p) + fixed, the model's step (`jaxpareto.physics.engine.step_ms`)
for n decoding requests and p prefill tokens. A request's first token comes with the step that
completes its prefill, then one token per step until its output is complete. Measured as
``vllm bench serve`` does: TTFT from arrival to the first token, TPOT = (E2E - TTFT) / (OSL - 1)
per request, ITL every gap between a request's tokens.

`simulate_closed` runs the same engine as a benchmark at fixed concurrency instead: C clients
start together and each sends its next request the moment the last one ends (Z = 0).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import jax
import numpy as np

import jaxpareto as jp
from jaxpareto.definitions.catalog import resolve_gpu, resolve_model
from jaxpareto.definitions.hardware import effective_tflops
from jaxpareto.physics.decode import decode_coefficients, decode_step
from jaxpareto.physics.engine import step_ms
from jaxpareto.physics.prefill import ttft_ms


class Simulated(NamedTuple):
    """Per-request samples [ms] of the requests kept (ITL: every gap), and the time-weighted
    decode batch. ``slot_wait_ms`` (0 for a request that found a KV slot free on arrival) and
    ``hold_ms`` (from getting its slot to its last token) are given by `simulate` alone."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    itl_ms: np.ndarray
    e2el_ms: np.ndarray
    mean_batch: float
    slot_wait_ms: np.ndarray | None = None
    hold_ms: np.ndarray | None = None


def model_step(gpu: str, model: str, context_tokens: int, max_batch: int = 2048, tp: int = 1):
    """The shared engine's step T(n, p) [ms] of the seed profile at TP ``tp`` (the seed's
    factors: no all-reduce time), as the model computes it (`step_ms` of the decode step at n,
    with p prefill tokens at c_p each), tabulated over n."""
    hw, params, eff = resolve_gpu(gpu).to_params(), resolve_model(model).to_params(), jp.Efficiency()
    tflops = effective_tflops(hw, params.compute_bits)
    coefficients = decode_coefficients(hw, params, tp, float(context_tokens), tflops, eff.eta_decode,
                                       eff.elementwise_overhead)
    per_token = float(ttft_ms(params.params_active_b, 1.0, tp, tflops, eff.eta_prefill))
    steps = jax.vmap(lambda n: decode_step(coefficients, n))(np.arange(float(max_batch)))
    # T(n, p) = max(memory(n), compute(n) + p c_p) + fixed(n), as `step_ms` puts it
    memory = np.asarray((steps.t_weight_ms + steps.t_kv_ms) * eff.elementwise_overhead / eff.eta_decode, np.float64)
    compute = np.asarray(steps.t_compute_ms / eff.eta_decode, np.float64)
    fixed = np.broadcast_to(np.asarray(steps.t_fixed_ms, np.float64), memory.shape)
    check = np.asarray(step_ms(steps, eff.eta_decode, eff.elementwise_overhead, 0.0, per_token), np.float64)
    np.testing.assert_allclose(np.maximum(memory, compute) + fixed, check, rtol=1e-5)
    return lambda n, p: max(memory[n], compute[n] + p * per_token) + fixed[n]


def at_load(ds, load: float):
    """The point of an open-loop sweep over ``request_rate`` (its only dimension) nearest ``load``
    times the highest rate it serves (the model's capacity on that grid)."""
    capacity = float(ds.request_rate.where(ds.feasible, drop=True).max())
    return ds.sel(request_rate=load * capacity, method="nearest")


def lognormal(rng, mean: float, cv: float, n: int) -> np.ndarray:
    """n draws of a lognormal of the given mean and coefficient of variation (cv 0: the mean)."""
    if cv == 0:
        return np.full(n, mean)
    sigma = np.sqrt(np.log1p(cv * cv))
    return mean * np.exp(rng.normal(-0.5 * sigma * sigma, sigma, n))


def _prefill(waiting: deque, left: np.ndarray, chunk_tokens: float, decoding: int, decode_in_budget: bool,
             admitted: int | None = None) -> tuple[float, list[int]]:
    """One step's prefill, first-come first-served up to the budget (less one token per decoding
    request where ``decode_in_budget``), over the first ``admitted`` waiting requests (None: all):
    the prefill tokens it carries, and the requests it finishes (a head of ``waiting``); ``left``
    (tokens still to prefill per request) is updated in place."""
    budget = max(chunk_tokens - decoding, 0) if decode_in_budget else chunk_tokens
    start, finished = budget, []
    for k, r in enumerate(waiting):
        if admitted is not None and k >= admitted:  # no KV slot for it yet
            break
        take = min(budget, left[r])
        left[r] -= take
        budget -= take
        if left[r] <= 0:
            finished.append(r)
        if budget <= 0:
            break
    return start - budget, finished


class _Engine:
    """The simulated server's steps and clock, shared by the open and closed loops: each step
    prefills first-come first-served (`_prefill`), decodes one token of every decoding request
    and lasts ``step_ms(decoding, prefill tokens)``; the clock keeps the time-weighted batch.
    With ``prefill_first`` (SGLang's scheduler) a step with prompts waiting is a prefill batch
    of its own, ``step_ms(0, prefill tokens)``, and the decoding requests wait for the next step
    without one (``decoded`` tells the caller which kind the last step was)."""

    def __init__(self, step_ms, left: np.ndarray, chunk_tokens: float, decode_in_budget: bool,
                 prefill_first: bool = False):
        self.step_ms, self.left, self.chunk_tokens, self.decode_in_budget = step_ms, left, chunk_tokens, decode_in_budget
        self.prefill_first, self.decoded = prefill_first, True
        self.now, self.batch_time, self.busy_time = 0.0, 0.0, 0.0

    def step(self, waiting: deque, decoding: dict, admitted: int | None = None) -> list[int]:
        """Run one step; the clock ends at its end. Returns the requests whose prefill it finished."""
        self.decoded = not (self.prefill_first and waiting)
        prefill, finished = _prefill(waiting, self.left, self.chunk_tokens, len(decoding) if self.decoded else 0,
                                     self.decode_in_budget, admitted)
        n = len(decoding) if self.decoded else 0
        dt = self.step_ms(n, prefill)
        self.now += dt
        self.batch_time += n * dt
        self.busy_time += dt
        return finished

    def mean_batch(self) -> float:
        return self.batch_time / self.busy_time


def simulate(step_ms, rate_per_s: float, requests: int, prefill_tokens: float, osl: float, chunk_tokens: float,
             isl_cv: float = 0.0, osl_cv: float = 0.0, seed: int = 0, warmup: float = 0.1,
             slots: int | None = None, decode_in_budget: bool = False, arrival_cv: float = 1.0,
             hit_share: float = 0.0, hit_tokens: float = 0.0) -> Simulated:
    """Run ``requests`` Poisson arrivals at ``rate_per_s`` through the engine (or, with
    ``arrival_cv`` below 1, arrivals whose gaps are gamma distributed with that coefficient of
    variation: 1 / sqrt(k), a share of a Poisson stream dealt over k engines in turn).

    Args:
        step_ms: (decoding requests n, prefill tokens p) -> step time [ms].
        prefill_tokens, osl: mean prefill and output tokens per request.
        isl_cv, osl_cv: their lognormal coefficients of variation.
        warmup: share of the first requests left out of the statistics.
        slots: requests that may hold KV at once (prefilling or decoding); a request waits
            for a free one before its prefill starts (None: no limit).
        decode_in_budget: the decoding requests' tokens come off the step's budget first, one
            each (vLLM V1's and TensorRT-LLM's schedulers), leaving the rest to prefill.
        hit_share, hit_tokens: prefix-cache hits: that share of the requests prefills
            ``hit_tokens`` (lognormal of ``isl_cv`` too), the others ``prefill_tokens``.
    """
    rng = np.random.default_rng(seed)
    if arrival_cv == 1.0:  # the same draws as before the gaps could be other than exponential
        arrivals = np.cumsum(rng.exponential(1000.0 / rate_per_s, requests))
    else:
        arrivals = np.cumsum(rng.gamma(arrival_cv ** -2, 1000.0 / rate_per_s * arrival_cv ** 2, requests))
    need = np.maximum(np.round(lognormal(rng, prefill_tokens, isl_cv, requests)), 1.0)
    outputs = np.maximum(np.round(lognormal(rng, osl, osl_cv, requests)), 2).astype(int)
    if hit_share > 0:  # drawn after the others: runs without hits keep their draws
        hits = rng.random(requests) < hit_share
        need = np.where(hits, np.maximum(np.round(lognormal(rng, hit_tokens, isl_cv, requests)), 1.0), need)
    first = np.full(requests, np.nan)
    done = np.full(requests, np.nan)
    gaps: list[float] = []
    waiting: deque[int] = deque()
    left = need.copy()
    decoding: dict[int, int] = {}  # request -> tokens still to emit
    last_token: dict[int, float] = {}
    # a request gets its KV slot at its arrival where one is free during the step it arrives in
    # (the first ``free`` arrivals of that step), else at the start of the step that admits it
    slotted = np.full(requests, np.nan)
    free, front = np.inf, 0  # slots free during the step just run; waiting requests holding one
    engine, nxt = _Engine(step_ms, left, chunk_tokens, decode_in_budget), 0
    while nxt < requests or waiting or decoding:
        while nxt < requests and arrivals[nxt] <= engine.now:
            waiting.append(nxt)
            if free >= 1:
                slotted[nxt] = arrivals[nxt]
                free -= 1
            nxt += 1
        if not waiting and not decoding:
            engine.now, free = arrivals[nxt], np.inf
            continue
        admitted = len(waiting) if slots is None else max(slots - len(decoding), 0)
        holding = min(admitted, len(waiting))
        for k in range(front, holding):
            r = waiting[k]
            slotted[r] = np.fmin(slotted[r], engine.now)  # NaN: not slotted on arrival
        front = holding
        free = np.inf if slots is None else slots - len(decoding) - holding
        finished_prefill = engine.step(waiting, decoding, admitted)
        front -= len(finished_prefill)
        now = engine.now
        for r in list(decoding):
            gaps.append(now - last_token[r])
            last_token[r] = now
            decoding[r] -= 1
            if decoding[r] == 0:
                done[r] = now
                del decoding[r], last_token[r]
        for r in finished_prefill:
            waiting.popleft()
            first[r] = now
            last_token[r] = now
            decoding[r] = outputs[r] - 1
    keep = np.arange(requests) >= int(warmup * requests)
    ttft = (first - arrivals)[keep]
    e2el = (done - arrivals)[keep]
    tpot = (e2el - ttft) / (outputs[keep] - 1)
    return Simulated(ttft, tpot, np.asarray(gaps), e2el, engine.mean_batch(), (slotted - arrivals)[keep],
                     (done - slotted)[keep])


def simulate_closed(step_ms, concurrency: int, prefill_tokens: float, osl: int, chunk_tokens: float,
                    decode_in_budget: bool = False, rounds: int = 20, warmup_rounds: int = 2,
                    osl_cv: float = 0.0, seed: int = 0, prefill_first: bool = False) -> Simulated:
    """A benchmark at fixed concurrency through the engine of `simulate`: ``concurrency`` clients
    send their first requests at once (aiperf's ``--concurrency``, ``vllm bench serve
    --max-concurrency``), each the next one as soon as its last one ends, ``warmup_rounds`` x C
    requests left out of the statistics and ``rounds`` x C measured (AIConfigurator's benchmark
    template: ``--num-requests`` 20 C after ``--warmup-request-count`` 2 C). Fixed prompt lengths;
    output lengths fixed (``ignore_eos``) unless ``osl_cv`` spreads them lognormally;
    ``prefill_first``: prompts waiting are prefilled in batches of their own before the next
    decode step (`_Engine`). Returns `Simulated` of the measured requests (``itl_ms`` empty)."""
    rng = np.random.default_rng(seed)
    total = (warmup_rounds + rounds) * concurrency
    outputs = np.maximum(np.round(lognormal(rng, osl, osl_cv, total)), 2).astype(int)
    arrived = np.full(total, np.nan)
    first = np.full(total, np.nan)
    done = np.full(total, np.nan)
    left = np.full(total, float(prefill_tokens))
    waiting: deque[int] = deque(range(concurrency))
    arrived[:concurrency] = 0.0
    issued = concurrency
    decoding: dict[int, int] = {}
    engine = _Engine(step_ms, left, chunk_tokens, decode_in_budget, prefill_first)
    while waiting or decoding:
        finished_prefill = engine.step(waiting, decoding)
        now = engine.now
        for r in list(decoding) if engine.decoded else ():
            decoding[r] -= 1
            if decoding[r] == 0:
                done[r] = now
                del decoding[r]
                if issued < total:  # the client sends its next request at once
                    arrived[issued] = now
                    waiting.append(issued)
                    issued += 1
        for r in finished_prefill:
            waiting.popleft()  # first come, first finished: the waiting line's head
            first[r] = now
            decoding[r] = outputs[r] - 1
    keep = np.arange(total) >= warmup_rounds * concurrency
    ttft = (first - arrived)[keep]
    e2el = (done - arrived)[keep]
    return Simulated(ttft, (e2el - ttft) / (outputs[keep] - 1), np.zeros(0), e2el, engine.mean_batch())
