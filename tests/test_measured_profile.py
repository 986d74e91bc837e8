"""The measured profile's physics, each term against an independent count, and the engine axis."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions import catalog
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.engine import Engine, engines, resolve_engine
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.model import Model
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.physics.attention import causal_pairs, window_pairs
from jaxpareto.physics.communication import allreduce_time
from jaxpareto.physics.decode import DecodeCoefficients, decode_step
from jaxpareto.physics.engine import synchronised_turn
from jaxpareto.physics.memory import in_flight_context, memory_budget
from jaxpareto.physics.point import evaluate_point

MEASURED = ModelOptions(profile="measured")


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _explicit_pairs(new, prefix, window=None):
    total = 0
    for i in range(prefix, prefix + new):  # query at position i sees keys 0..i (causal)
        keys = i + 1
        total += keys if window is None else min(keys, window)
    return total


@pytest.mark.parametrize("new,prefix", [(1, 0), (7, 0), (5, 11), (64, 100), (300, 0)])
def test_causal_pairs_count_every_query_key_pair(new, prefix):
    assert float(causal_pairs(new, prefix)) == _explicit_pairs(new, prefix)


@pytest.mark.parametrize("new,prefix,window", [(7, 0, 4), (5, 11, 4), (64, 100, 128), (300, 0, 128), (3, 2, 10)])
def test_window_pairs_cap_each_query_at_the_window(new, prefix, window):
    assert float(window_pairs(new, prefix, window)) == _explicit_pairs(new, prefix, window)


def _tiny(**overrides):
    fields = dict(name="tiny", params_total_b=0.01, layers=3, hidden_size=64, kv_heads=2, head_dim=16,
                  attention_heads=4, weight_dtype="bf16", kv_dtype="bf16")
    return Model(**{**fields, **overrides})


def test_attention_flops_of_a_small_model_by_explicit_summation():
    model = _tiny()
    new, prefix = 9, 5
    flops = 0
    for _layer in range(model.layers):
        for i in range(prefix, prefix + new):
            for _key in range(i + 1):
                for _head in range(model.attention_heads):
                    flops += 2 * model.head_dim  # q . k
                    flops += 2 * model.head_dim  # p * v accumulated over the head's width
    assert model.attention_pair_flops * float(causal_pairs(new, prefix)) == flops


def test_mla_pair_flops_from_its_dimensions():
    v3 = catalog.models()["deepseek-v3"]
    heads, layers = 128, 61
    assert v3.attention_pair_flops == 2 * heads * (128 + 64 + 128) * layers  # prefill: expanded per head
    assert v3.decode_pair_flops == 2 * heads * (2 * 512 + 64) * layers  # decode: absorbed, latent space


def test_sliding_layers_get_their_own_pairs():
    model = catalog.models()["gpt-oss-120b"]
    assert model.attention_pair_flops == 4 * 64 * 64 * 18
    assert model.attention_window_pair_flops == 4 * 64 * 64 * 18


def _point(model="llama-3.1-70b", gpu="h100-sxm", engine="seed", tp=4, concurrency=1, context=8192, hit=0.0):
    hw = catalog.gpus()[gpu].to_params()
    m = (catalog.models()[model] if isinstance(model, str) else model).to_params()
    as_array = lambda x: jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), x)  # noqa: E731
    return GridPoint(gpu=as_array(hw), model=as_array(m), engine=as_array(resolve_engine(engine).to_params()),
                     tp=jnp.float64(tp), concurrency=jnp.float64(concurrency), think_time_s=jnp.float64(0.0),
                     context_tokens=jnp.float64(context), hit_rate=jnp.float64(hit))


def _shared(**fields):
    as_array = lambda x: jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), x)  # noqa: E731
    workload = as_array(Workload(**{"osl": 256.0, **fields}))
    solver = dataclasses.replace(as_array(Solver()), max_iter=jnp.int32(10_000))
    return workload, as_array(Efficiency()), solver


def test_isolated_prefill_is_a_roofline_of_compute_and_weights():
    """One request on Llama-3.1-70B at TP 4: TTFT against an independent float64 count."""
    workload, efficiency, solver = _shared(osl=1.0)
    out = evaluate_point(_point(context=8192), workload, efficiency, solver, MEASURED)
    model, gpu = catalog.models()["llama-3.1-70b"], catalog.gpus()["h100-sxm"]
    tp, n, chunk = 4, 8192, 8192  # the seed engine uses the workload's 8192-token chunk
    linear = 2 * model.params_active_b * 1e9 * n
    attention = 4 * 64 * 128 * 80 * (n * (n + 1) / 2)
    compute_ms = (linear + attention) / (tp * gpu.tflops_fp16 * 1e12) * 1e3 / 0.65
    weights_ms = model.params_active_b * 2 / (tp * gpu.bandwidth_gbs) * 1e3 * 1.10 / 0.40
    assert compute_ms > weights_ms
    assert float(out.ttft_ms) == pytest.approx(max(compute_ms, weights_ms) * max(n / chunk, 1), rel=1e-9)


def test_moe_prefill_at_small_batch_is_bound_by_the_experts_it_loads():
    workload, efficiency, solver = _shared(osl=1.0)
    out = evaluate_point(_point(model="deepseek-v3", gpu="h200-sxm", tp=8, context=64), workload, efficiency, solver,
                         MEASURED)
    model, gpu = catalog.models()["deepseek-v3"], catalog.gpus()["h200-sxm"]
    touched = min(64 * 8, 256)  # the seed's routing: min(T K, E)
    # fp8 with one float32 scale per 128 x 128 block; the LM head and norms stay bf16
    weights_gb = model.nonmoe_params_b * model.nonmoe_weight_bytes + touched * model.expert_params_b * (1 + 32 / 16384 / 8)
    assert model.nonmoe_weight_bytes == pytest.approx(
        ((model.nonmoe_params_b - model.unquantised_params_b) * (1 + 32 / 16384 / 8) + model.unquantised_params_b * 2)
        / model.nonmoe_params_b)
    weights_ms = weights_gb / (8 * gpu.bandwidth_gbs) * 1e3 * 1.10 / 0.40
    assert float(out.ttft_ms) == pytest.approx(weights_ms, rel=1e-9)


def test_decode_attention_adds_to_the_step_compute():
    workload, efficiency, solver = _shared()
    seed = evaluate_point(_point(concurrency=1), workload, efficiency, solver, ModelOptions())
    measured = evaluate_point(_point(concurrency=1), workload, efficiency, solver, MEASURED)
    gpu = catalog.gpus()["h100-sxm"]
    context = 8192 + 256 / 2  # the turn's mean context
    attention_ms = context * 4 * 64 * 128 * 80 / (4 * gpu.tflops_fp16 * 1e12) * 1e3
    batch = float(measured.batch_eff)
    linear_ms = float(seed.t_compute_ms) / float(seed.batch_eff)
    assert float(measured.t_compute_ms) == pytest.approx(batch * (linear_ms + attention_ms), rel=1e-9)


def test_allreduce_latency_grows_with_the_peer_gpus():
    hw, model = catalog.gpus()["h100-sxm"].to_params(), catalog.models()["llama-3.1-70b"].to_params()
    at = {g: float(allreduce_time(hw, model, g, 0.0, 10.0, latency_per_peer=True).fixed_ms) for g in (1, 2, 8)}
    assert at[1] == 0.0
    assert at[2] == pytest.approx(2 * 80 * 10e-3)  # two all-reduces per layer, one peer
    assert at[8] / at[2] == pytest.approx(7.0)
    flat = float(allreduce_time(hw, model, 8, 0.0, 10.0).fixed_ms)
    assert flat == pytest.approx(at[2])  # the seed's reading: one latency whatever G


def test_engine_memory_reserves_follow_each_engine():
    hw, model = catalog.gpus()["h100-sxm"].to_params(), catalog.models()["llama-3.1-70b"].to_params()
    weights = catalog.models()["llama-3.1-70b"].weight_memory_gb
    # the seed counts the datasheet's 80 GB; engines take their share of the 85.03 GB the driver reports
    expected = {"seed": 4 * 80 - weights, "vllm": 0.9 * 4 * 85.03 - weights - 4 * 2.0,
                "sglang": 0.88 * 4 * 85.03 - weights, "trtllm": 0.9 * (4 * 85.03 - weights - 4 * 1.0)}
    for name, available in expected.items():
        budget = memory_budget(hw, model, 4.0, 1.0, 8192.0, engines()[name].to_params())
        assert float(budget.available_gb) == pytest.approx(available, rel=1e-12), name
    assert float(memory_budget(hw, model, 4.0, 1.0, 8192.0).available_gb) == pytest.approx(expected["seed"])
    # a GPU that gives no reported total is taken at its datasheet size
    plain = catalog.gpus()["h100-sxm"].model_copy(update={"memory_reported_gb": None}).to_params()
    budget = memory_budget(plain, model, 4.0, 1.0, 8192.0, engines()["vllm"].to_params())
    assert float(budget.available_gb) == pytest.approx(0.9 * 4 * 80 - weights - 4 * 2.0, rel=1e-12)


def test_sessions_beyond_kv_memory_wait_and_their_wait_is_in_ttft():
    workload, efficiency, solver = _shared()
    out = evaluate_point(_point(concurrency=400, context=32768), workload, efficiency, solver, MEASURED)
    slots = float(out.concurrency_max)
    assert 1 <= slots < 400
    assert int(out.concurrency_eff) == 400  # every session admitted
    assert bool(out.converged)
    batch = float(out.batch_eff)
    assert batch == pytest.approx(slots)  # at most M run
    latency, wait = float(out.latency_ms), float(out.memory_wait_ms)
    # R = R_run x B / M with Z = 0 (B = C): the wait is R - R_run
    assert wait == pytest.approx(latency * (1 - slots / 400), rel=1e-5)
    assert float(out.ttft_ms) > wait
    seed = evaluate_point(_point(concurrency=400, context=32768), workload, efficiency, solver, ModelOptions())
    assert int(seed.concurrency_eff) == int(seed.concurrency_max)  # the seed turns the rest away


def test_past_kv_memory_the_throughput_levels_off_at_what_memory_runs():
    """Sessions waiting for KV memory neither prefill nor decode: the engine's turns see the
    sessions it runs (the arrival theorem's others among min(C, M)), so the turn rate stays at
    X(M) however many wait (it fell 0.051 -> 0.027 turns/s from C = 1 to 1,024 for DeepSeek-V3 on
    four MI300X at 128K, where memory runs one session: the waiting ones counted as prefill load)."""
    ds = jp.sweep(gpu="b200", model="qwen3-next-80b-a3b", engine="vllm", calibration="hopper-measured", tp=1,
                  context_tokens=131072, osl=256, concurrency=[1, 2, 3, 4, 8, 32, 128], think_time_s=0.0,
                  hit_rate=0.9)
    slots = int(ds.concurrency_max.values.ravel()[0])
    turns = ds.turns_per_s.values.ravel()
    assert slots == 3 and np.all(np.diff(turns) >= -1e-5 * turns[1:])  # the float32 solve's rounding
    np.testing.assert_allclose(turns[slots - 1:], turns[slots - 1], rtol=1e-5)
    assert np.all(np.diff(ds.memory_wait_ms.values.ravel()[slots - 1:]) > 0)


@pytest.mark.parametrize(("batch", "tokens", "osl", "counted"), [
    (16.0, 2048.0, 101.0, None),  # groups of k = 4 that fit a step: G = 4, one step each
    (10.0, 2048.0, 101.0, 1.0),  # counted: k = floor((P - B) / (L - 1)) = 3, groups 3, 3, 3, 1
    (40.0, 2048.0, 5.0, None),  # prefill-bound: the other 9 groups' steps outnumber the 4 decode steps
    (6.0, 10000.0, 101.0, None),  # prompts longer than the budget: a train, one whole step and a last one
    (1.0, 10000.0, 101.0, None),  # a train of one: its last step alone, T(B, L - P)
])
def test_synchronised_turn_against_the_lockstep_groups_by_hand(batch, tokens, osl, counted):
    c = DecodeCoefficients(nonmoe_ms=jnp.float64(5.0), expert_ms=jnp.float64(0.0), experts=jnp.float64(0.0),
                           experts_per_token=jnp.float64(0.0), kv_ms=jnp.float64(0.01), compute_ms=jnp.float64(0.02),
                           elementwise_overhead=jnp.float64(1.0), eta_decode=jnp.float64(1.0),
                           fixed_ms=jnp.float64(1.0))
    chunk, c_p = 8192.0, 0.01
    turn = synchronised_turn(decode_step(c, batch), jnp.float64(batch), jnp.float64(tokens), jnp.float64(osl),
                             jnp.float64(chunk), jnp.float64(c_p), jnp.float64(1.0), jnp.float64(1.0),
                             decode_in_budget=None if counted is None else jnp.float64(counted))

    def step(p):  # T(B, p): the seed's one roofline, B decoding
        return max(5.0 + batch * 0.01, batch * 0.02 + p * c_p) + 1.0

    budget = chunk - (batch if counted else 0.0)
    k = int(budget // (tokens - (1 if counted else 0)))  # g L <= P - c (B - g)
    if k >= 1:
        sizes = [k] * int(batch // k) + ([batch % k] if batch % k else [])
        own = sum(g * step(g * tokens) for g in sizes) / batch
        block, block_steps, own_steps, own_in_block = sum(step(g * tokens) for g in sizes), len(sizes), 1.0, own
    else:  # a train: whole steps, and a last one the train's next prompt fills (but for its last, 1 in B)
        full, spans = step(budget), tokens / budget
        rest = tokens - np.floor(spans) * budget
        shared = (batch - 1) / batch
        own = np.floor(spans) * full + (shared * full + (1 - shared) * step(rest) if rest > 0 else 0.0)
        block, block_steps = batch * spans * full, batch * spans
        own_steps, own_in_block = spans, spans * full
    others = block_steps - own_steps
    wait, free = max(others - (osl - 1), 0.0), max((osl - 1) - others, 0.0)
    # (a counted budget prefill-bound takes a wider k: checked against the simulated benchmark instead)
    assert not (counted and block_steps - 1 > osl - 1)
    mean = block / block_steps
    assert float(turn.ttft_ms) == pytest.approx(own + wait * mean, rel=1e-12)
    assert float(turn.tpot_ms) == pytest.approx((block - own_in_block - wait * mean + free * step(0.0)) / (osl - 1),
                                                rel=1e-12)


def test_engine_axis_sweeps_and_names_unknown_engines():
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", engine=["seed", "vllm", "trtllm"], tp=4,
                  concurrency=[1, 64], context_tokens=8192, options=MEASURED)
    assert list(ds.engine.values) == ["seed", "vllm", "trtllm"]
    cmax = ds.concurrency_max.sel(concurrency=1).squeeze()
    assert int(cmax.sel(engine="seed")) > int(cmax.sel(engine="trtllm")) > int(cmax.sel(engine="vllm"))
    with pytest.raises(JaxparetoError, match="engine") as info:
        jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", engine="tgi", tp=4, concurrency=1)
    assert "vllm" in str(info.value)


def test_an_engine_uses_its_own_factors_and_the_shared_ones_elsewhere():
    fast = Engine(name="fast", efficiency={"eta_decode": 0.8})
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", engine=[fast, "seed"], tp=1, concurrency=1,
                  context_tokens=1024, eta_decode=0.4)
    tpot = ds.tpot_ms.squeeze()
    assert float(tpot.sel(engine="seed")) == pytest.approx(2 * float(tpot.sel(engine="fast")), rel=1e-6)
    with pytest.raises(ValueError, match="unknown efficiency fields"):
        Engine(name="bad", efficiency={"eta_decodes": 0.8})


def test_the_seed_profile_is_unchanged_by_the_engine_axis():
    plain = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[4, 8], concurrency=[1, 64, 512])
    assert list(plain.engine.values) == ["seed"]
    with_engine = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", engine="seed", tp=[4, 8],
                           concurrency=[1, 64, 512])
    np.testing.assert_array_equal(plain.tpot_ms.values, with_engine.tpot_ms.values)
    # the seed's worked example, TPOT of Llama-3.1-70B at B = 1 on 4x H100 (eq. 3)
    model, gpu = catalog.models()["llama-3.1-70b"], catalog.gpus()["h100-sxm"]
    weights_ms = model.params_active_b * 2 / (4 * gpu.bandwidth_gbs) * 1e3  # without the input table
    kv_ms = 16384 * model.kv_bytes_per_token / 1e9 / (4 * gpu.bandwidth_gbs) * 1e3
    tpot = (weights_ms + kv_ms) * 1.10 / 0.40
    assert float(plain.tpot_ms.sel(tp=4, concurrency=1).squeeze()) == pytest.approx(tpot, rel=1e-5)


@pytest.mark.parametrize("osl,cv", [(256.0, 0.5), (4043.45, 1.253)])
def test_in_flight_context_against_a_simulated_batch(osl, cv):
    """A continuous batch, step by step: each of 16,384 slots holds a request of a lognormal prompt
    P and output O (the DeepSeek-R1 set's spread among them), its context growing by one token a
    step; a finished request is replaced at once. The mean context over the steps against
    L + OSL (1 + cv^2) / 2."""
    rng = np.random.default_rng(0)
    sigma2 = np.log1p(cv * cv)

    def draw(n):
        outputs = np.maximum(np.rint(rng.lognormal(np.log(osl) - sigma2 / 2, np.sqrt(sigma2), n)), 1.0)
        return rng.lognormal(np.log(800.0) - 0.1, np.sqrt(0.2), n), outputs

    # start in the steady state: a slot holds a request in proportion to its O, at a uniform
    # point of its turn (the renewal process' stationary age)
    pool_prompts, pool_outputs = draw(200_000)
    pick = rng.choice(pool_outputs.size, 16_384, p=pool_outputs / pool_outputs.sum())
    prompts, outputs = pool_prompts[pick], pool_outputs[pick]
    done = np.floor(rng.uniform(0, 1, outputs.size) * outputs)
    seen = []
    for step in range(int(2 * osl)):
        seen.append(np.mean(prompts + done))
        done += 1.0
        over = done >= outputs
        prompts[over], outputs[over] = draw(int(over.sum()))
        done[over] = 0.0
    simulated = np.mean(seen)
    assert float(in_flight_context(800.0, osl, cv)) == pytest.approx(simulated, rel=0.04)
    assert float(in_flight_context(800.0, osl, 0.0)) == 800.0 + osl / 2  # fixed lengths: the seed's mean


def test_spread_outputs_hold_the_longer_in_flight_context():
    """Under the measured profile, outputs spread with CV c hold the KV of L + OSL (1 + c^2) / 2:
    the same sessions fit as with fixed lengths and a context longer by OSL c^2 / 2."""
    efficiency, solver = _shared()[1:]
    spread, _, _ = _shared(osl=2048.0, osl_cv=1.2)
    fixed, _, _ = _shared(osl=2048.0)
    out = evaluate_point(_point(concurrency=4096, context=4096), spread, efficiency, solver, MEASURED)
    same = evaluate_point(_point(concurrency=4096, context=4096 + 2048 * 1.44 / 2), fixed, efficiency, solver, MEASURED)
    shorter = evaluate_point(_point(concurrency=4096, context=4096), fixed, efficiency, solver, MEASURED)
    assert int(out.concurrency_max) == int(same.concurrency_max) < int(shorter.concurrency_max)
    seed = [evaluate_point(_point(concurrency=64), w, efficiency, solver, ModelOptions()) for w in (spread, fixed)]
    assert float(seed[0].concurrency_max) == float(seed[1].concurrency_max)  # the seed's L is the session's own


def test_the_optimiser_memory_term_sizes_sessions_as_the_point_does():
    """`evaluate_with_memory` (the optimiser's memory penalty) holds the same context per session
    as `evaluate_point`: under the measured profile, the in-flight L + OSL (1 + cv^2) / 2, or the
    turn's final L + OSL for an engine that reserves its requests' output KV."""
    from jaxpareto.search.penalty import evaluate_with_memory

    efficiency, solver = _shared()[1:]
    for options in (ModelOptions(), MEASURED):
        for workload in (_shared(osl=2048.0)[0], _shared(osl=2048.0, osl_cv=1.2)[0]):
            for engine in ("seed", "trtllm"):
                out, memory = evaluate_with_memory(_point(engine=engine, concurrency=64, context=4096), workload,
                                                   efficiency, solver, options, names=["concurrency_max"])
                assert int(memory.concurrency_max) == int(out.concurrency_max)


def test_an_engine_that_reserves_the_output_kv_holds_the_turns_final_context():
    """TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT) starts a request only once
    KV for its prompt and its whole output is free: under the measured profile its sessions each
    hold L + OSL, where an engine whose KV grows with the context holds the in-flight
    L + OSL / 2 (fixed lengths). So the reserving engine at a prompt L runs as many sessions as
    the same engine without the reservation at L + OSL / 2, fewer than it at L, and the sessions
    beyond them wait for memory; the seed profile's KV holds L under both."""
    reserving = engines()["trtllm"]
    assert reserving.reserve_output_kv
    paged = reserving.model_copy(update={"name": "paged", "reserve_output_kv": False})
    workload, efficiency, solver = _shared(osl=8192.0)

    def run(engine, context, concurrency=64, options=MEASURED):
        return evaluate_point(_point(gpu="h200-sxm", tp=2, engine=engine, concurrency=concurrency, context=context),
                              workload, efficiency, solver, options, percentiles=False)

    held = run(reserving, 1024.0)
    assert float(held.kv_per_session_gb) == pytest.approx(float(run(paged, 1024.0 + 4096.0).kv_per_session_gb),
                                                          rel=1e-12)
    assert int(held.concurrency_max) == int(run(paged, 1024.0 + 4096.0).concurrency_max)
    grown = run(paged, 1024.0)
    assert float(held.kv_per_session_gb) / float(grown.kv_per_session_gb) == pytest.approx(9216 / 5120, rel=1e-12)
    assert int(held.concurrency_max) < 64 < int(grown.concurrency_max)
    # Llama-3.1-70B at 1,024 + 8,192 tokens on two H200s: 64 sessions fit as they grow, not reserved
    assert float(grown.memory_wait_ms) == 0.0 < float(held.memory_wait_ms)
    assert float(held.ttft_ms) > 100 * float(grown.ttft_ms)
    for engine in (reserving, paged):  # the seed profile: L per session whatever the engine
        assert float(run(engine, 1024.0, options=ModelOptions()).kv_per_session_gb) == \
            pytest.approx(float(run(reserving, 1024.0, options=ModelOptions()).kv_per_session_gb), rel=1e-12)


def test_the_engine_runs_at_most_its_request_limit_and_the_rest_wait():
    """An engine's ``max_running_requests`` (vLLM ``max_num_seqs``, TensorRT-LLM
    ``max_batch_size``) caps the running batch below what KV memory holds: the other sessions wait,
    R = R_run(M) x B / M as for memory, while the KV slots stay the memory's."""
    workload, efficiency, solver = _shared()
    capped = evaluate_point(_point(engine=Engine(name="capped", max_running_requests=16), concurrency=64,
                                   context=1024), workload, efficiency, solver, MEASURED)
    free = evaluate_point(_point(engine=Engine(name="free"), concurrency=64, context=1024), workload, efficiency,
                          solver, MEASURED)
    assert int(capped.concurrency_max) == int(free.concurrency_max) > 64  # memory holds them all
    assert float(free.batch_eff) == pytest.approx(64) and float(free.memory_wait_ms) == 0.0
    assert float(capped.batch_eff) == pytest.approx(16)
    latency, wait = float(capped.latency_ms), float(capped.memory_wait_ms)
    assert wait == pytest.approx(latency * (1 - 16 / 64), rel=1e-5)
    shipped = engines()
    assert [shipped[name].max_running_requests for name in ("seed", "vllm", "sglang", "trtllm")] == [0, 1024, 0, 2048]


def test_the_lru_cache_keeps_the_kv_memory_the_request_limit_leaves():
    """Under the LRU model the paused sessions compete for the KV slots the running requests
    leave: an engine that runs fewer requests at once leaves more of them, so more of the
    paused sessions' prefixes survive, while the KV slots themselves stay the memory's."""
    workload, efficiency, solver = _shared(osl=256.0)
    lru = ModelOptions(cache_model="lru")
    runs = {}
    for limit in (0, 16):
        point = _point(engine=Engine(name=f"limit{limit}", max_running_requests=limit), concurrency=512,
                       context=16384, hit=0.9).replace(think_time_s=jnp.float64(5.0))
        runs[limit] = evaluate_point(point, workload, efficiency, solver, lru)
    assert int(runs[16].concurrency_max) == int(runs[0].concurrency_max)
    assert float(runs[16].batch_eff) == pytest.approx(16)
    assert float(runs[0].batch_eff) > 16
    assert float(runs[16].hit_rate_eff) > float(runs[0].hit_rate_eff)
    assert float(runs[16].memory_wait_ms) > 0.0
