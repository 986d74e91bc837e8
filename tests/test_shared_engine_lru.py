"""Shared GPU time (chunked-prefill engine) and the memory-coupled LRU prefix cache.

Checks: GPU time is conserved; the engine reduces to the seed's isolated prefill at light load;
TTFT grows faster than TPOT towards saturation; the Che approximation against a discrete-event
LRU simulation; the collapse past saturation for agents and not for chat; the host tier's limits;
implicit gradients against finite differences.
"""

import heapq
import itertools

import jax
import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.physics.cache import lru_survival
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.mapper import shared_scalars, stack_params
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.physics.point import evaluate_point
from jaxpareto.definitions.settings import Efficiency, Solver, Workload

CODE_AGENT = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=8, think_time_s=2.0, context_tokens=16384 + 9 * 2128,
                  hit_rate=0.9, osl=128, delta_tokens=2128)


def test_gpu_time_is_conserved_on_a_random_grid():
    rng = np.random.default_rng(3)
    grid = dict(gpu=["h100-sxm", "b200", "a100-sxm-80gb"], model=["llama-3.1-8b", "llama-3.1-70b", "qwen3-235b-a22b"],
                tp=[1, 2, 4, 8], concurrency=sorted(rng.integers(1, 600, 12).tolist()),
                think_time_s=[0.0, 0.5, 5.0], context_tokens=[2048, 32768, 131072], hit_rate=[0.0, 0.7, 0.97])
    for chunk in (512, 8192):
        shared = jp.sweep(**grid, prefill_model="shared", prefill_chunk_tokens=chunk)
        util = shared.gpu_utilization.values
        assert np.nanmax(util) <= 1.0 + 1e-5, chunk
        assert shared.converged.values[shared.feasible.values].mean() > 0.999
    # the seed's isolated prefill asks for more GPU time than there is on the same grid
    assert np.nanmax(jp.sweep(**grid).gpu_utilization.values) > 1.5


def test_light_load_reduces_to_the_seed_prefill():
    # one session with long pauses: the engine prefills alone at full speed (L_prefill >= chunk)
    seed = jp.sweep(**{**CODE_AGENT, "hit_rate": 0.0, "think_time_s": 600.0}, concurrency=1)
    shared = jp.sweep(**{**CODE_AGENT, "hit_rate": 0.0, "think_time_s": 600.0}, concurrency=1, prefill_model="shared")
    assert shared.ttft_ms.item() == pytest.approx(seed.ttft_ms.item(), rel=0.02)
    assert shared.tpot_ms.item() == pytest.approx(seed.tpot_ms.item(), rel=0.01)


def test_ttft_grows_several_times_faster_than_tpot_to_saturation():
    # seed 004: TTFT x4.8 but TPOT x1.5 at saturation (Llama-3.1-70B, H100). With vLLM's
    # long-prefill cap of 512 tokens per step (seed 004's AgentX example) decode steps stay
    # short while prefills queue; the throughput peak is the saturation point.
    c = np.unique(np.geomspace(1, 256, 40).astype(int))
    ds = jp.sweep(**CODE_AGENT, concurrency=c, prefill_model="shared", prefill_chunk_tokens=512).squeeze()
    peak = int(np.nanargmax(ds.turns_per_s.values))
    ttft_growth = ds.ttft_ms.values[peak] / ds.ttft_ms.values[0]
    tpot_growth = ds.tpot_ms.values[peak] / ds.tpot_ms.values[0]
    assert ttft_growth > 3.0 * tpot_growth, (ttft_growth, tpot_growth)
    assert tpot_growth < 2.5


def _des_lru_hit_rate(sessions, slots, turn_s, mean_pause_s, pauses, rng, returns=60_000):
    """Discrete-event simulation: C sessions alternate a turn (fixed length) and a pause; the
    memory holds ``slots`` session caches; active sessions hold theirs; paused caches are evicted
    least recently used first when a returning miss needs room. Returns the hit share."""
    clock = np.zeros(sessions)
    events = [(rng.uniform(0, turn_s + mean_pause_s), s, "return") for s in range(sessions)]
    heapq.heapify(events)
    cached = {}  # paused session -> time its pause began (LRU order = insertion order)
    active = 0
    hits = seen = 0
    while seen < returns:
        time, s, kind = heapq.heappop(events)
        if kind == "return":
            seen += 1
            if s in cached:
                hits += 1
                del cached[s]
            else:
                while cached and active + len(cached) + 1 > slots:
                    del cached[next(iter(cached))]
            active += 1
            heapq.heappush(events, (time + turn_s, s, "pause"))
        else:
            active -= 1
            cached[s] = time
            heapq.heappush(events, (time + pauses(), s, "return"))
        clock[s] = time
    return hits / seen


@pytest.mark.parametrize("distribution", ["exponential", "lognormal"])
def test_che_approximation_matches_an_lru_simulation(distribution):
    rng = np.random.default_rng(7)
    slots, turn_s, mean_pause, sigma = 24, 1.0, 5.0, 1.0
    if distribution == "exponential":
        def pauses():
            return rng.exponential(mean_pause)
    else:
        def pauses():
            return rng.lognormal(np.log(mean_pause) - sigma**2 / 2, sigma)
    for sessions in (12, 30, 45, 60, 75):
        simulated = _des_lru_hit_rate(sessions, slots, turn_s, mean_pause, pauses, rng)
        busy = sessions * turn_s / (turn_s + mean_pause)
        che = lru_survival(np.float64(max(slots - busy, 0.0)), np.float64(sessions - busy), np.float64(mean_pause),
                           distribution, np.float64(sigma))
        assert float(che.survival) == pytest.approx(simulated, abs=0.05), (sessions, simulated)


def test_agent_throughput_collapses_past_the_knee_and_chat_does_not():
    c = np.unique(np.geomspace(1, 512, 48).astype(int))
    agent = jp.sweep(**CODE_AGENT, concurrency=c, prefill_model="shared", cache_model="lru").squeeze()
    x = agent.turns_per_s.values
    peak = int(np.nanargmax(x))
    assert 0 < peak < len(c) - 1
    assert np.all(np.diff(x[: peak + 1]) > 0)  # rises to the knee
    assert x[-1] < 0.6 * x[peak]  # then loses over 40 %
    h = agent.hit_rate_eff.values
    assert h[0] == pytest.approx(0.9) and h[-1] < 0.2 * h[0]
    assert np.all(np.diff(h) <= 1e-6)
    assert agent.converged.values.all()
    assert np.nanmax(agent.memory_wait_ms.values) > 0

    chat = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=c, think_time_s=0.0,
                    context_tokens=1024, hit_rate=0.5, osl=256, delta_tokens=256,
                    prefill_model="shared", cache_model="lru").squeeze()
    y = chat.turns_per_s.values
    assert np.all(np.diff(y) >= -1e-6 * y[1:])  # never falls
    assert chat.hit_rate_eff.values == pytest.approx(0.5)  # no pause: caches are never lost


def test_host_tier_limits():
    base = dict(CODE_AGENT, hit_rate=1.0, concurrency=[8, 64, 256], prefill_model="shared", cache_model="lru")
    no_tier = jp.sweep(**base)
    assert no_tier.hit_rate_eff.min().item() < 0.1  # memory-bound: GPU caches are lost
    # an unlimited tier: every lost GPU cache is loaded back, no full re-prefill
    unlimited = jp.sweep(**base, tier_capacity_gb=1e9, tier_bandwidth_gbs=1e9)
    np.testing.assert_allclose(unlimited.prefill_tokens.values, 2128.0, rtol=1e-6)
    assert unlimited.tier_hit_rate.max().item() > 0.9
    assert (unlimited.turns_per_s.values >= no_tier.turns_per_s.values * (1 - 1e-6)).all()
    # a tier without a link changes nothing
    dead = jp.sweep(**base, tier_capacity_gb=1e9, tier_bandwidth_gbs=0.0)
    for name in ("turns_per_s", "ttft_ms", "prefill_tokens", "hit_rate_eff"):
        np.testing.assert_array_equal(dead[name].values, no_tier[name].values)
    assert dead.tier_hit_rate.max().item() == 0.0


def test_options_are_checked():
    with pytest.raises(jp.JaxparetoError, match="prefill_model"):
        jp.sweep(**CODE_AGENT, concurrency=4, prefill_model="disaggregated")
    with pytest.raises(jp.JaxparetoError, match="cache_model"):
        jp.sweep(**CODE_AGENT, concurrency=4, cache_model="fifo")
    with pytest.raises(jp.JaxparetoError, match="solver"):
        jp.sweep(**CODE_AGENT, concurrency=4, cache_model="lru", solver="exact")
    with pytest.raises(jp.JaxparetoError, match="tier_capacity_gb"):
        jp.sweep(**CODE_AGENT, concurrency=4, tier_capacity_gb=100.0)
    with pytest.raises(jp.JaxparetoError, match="cache_ttl_s"):
        jp.sweep(**CODE_AGENT, concurrency=4, cache_model="lru", cache_ttl_s=60.0)
    with pytest.raises(jp.JaxparetoError, match="prefill_chunk_tokens"):
        jp.sweep(**CODE_AGENT, concurrency=4, prefill_model="shared", prefill_chunk_tokens=0)
    # settings the chosen equations would ignore are refused, not silently dropped
    for setting in (dict(prefill_chunk_tokens=512), dict(tier_bandwidth_gbs=64.0), dict(pause_sigma=2.0),
                    dict(pause_distribution="lognormal")):
        with pytest.raises(jp.JaxparetoError, match=next(iter(setting))):
            jp.sweep(**CODE_AGENT, concurrency=4, **setting)


@pytest.mark.parametrize("distribution", ["exponential", pytest.param("lognormal", marks=pytest.mark.slow)])
def test_implicit_gradients_match_finite_differences(distribution):
    options = ModelOptions(prefill_model="shared", cache_model="lru", pause_distribution=distribution)
    with jax.enable_x64(True):
        hw = stack_params([jp.catalog.gpus()["h100-sxm"].to_params()], "float64")
        model = stack_params([jp.catalog.models()["llama-3.1-70b"].to_params()], "float64")
        hw, model = (jax.tree_util.tree_map(lambda a: a[0], t) for t in (hw, model))
        workload, efficiency, solver = shared_scalars(Workload(tier_capacity_gb=200.0, tier_bandwidth_gbs=64.0),
                                                      Efficiency(), Solver(tol=1e-12), "float64")

        def throughput(x):
            concurrency, think_time_s = x
            point = GridPoint(gpu=hw, model=model, tp=8.0, concurrency=concurrency, think_time_s=think_time_s,
                              context_tokens=34_000.0, hit_rate=0.9)
            out = evaluate_point(point, workload, efficiency, solver, options=options)
            return out.turns_per_s

        gradient = jax.jit(jax.grad(throughput))
        throughput = jax.jit(throughput)
        for point in ([30.0, 2.0], [55.0, 3.0]):  # before and past the knee
            x = np.asarray(point)
            grad = np.asarray(gradient(x))
            for k in range(2):
                step = np.zeros(2)
                step[k] = 1e-4 * x[k]
                fd = (throughput(x + step) - throughput(x - step)) / (2 * step[k])
                assert grad[k] == pytest.approx(float(fd), rel=2e-3, abs=5e-6), (point, k)  # d/dC near 0 past the knee


def test_spec_and_sessions_take_the_options():
    from pathlib import Path

    from jaxpareto.definitions.spec import load_spec
    from jaxpareto.dataset.plan import plan_sweep

    spec = load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "code_agent_collapse.toml")
    plan = plan_sweep(**spec.sweep_kwargs())
    assert plan.options == ModelOptions(prefill_model="shared", cache_model="lru")
    assert plan.workload.tier_capacity_gb == 512 and plan.attrs()["prefill_model"] == "shared"
    tasks = jp.session_sweep("h100-sxm", "llama-3.1-70b", 8, [8, 128], 2.0, 0.9, turns=5, prefill_model="shared",
                             cache_model="lru").squeeze()
    assert np.isfinite(tasks.tasks_per_s.values).all()
    assert tasks.hit_rate_eff.values[0].min() == pytest.approx(0.9) and tasks.hit_rate_eff.values[1].max() < 0.9


@pytest.mark.slow
def test_optimiser_admits_sessions_beyond_kv_memory_under_lru():
    # memory acts through the hit rate, not as a cap on concurrency
    kw = dict(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=60.0, context_tokens=35000, hit_rate=0.9,
              objective="turns_per_s", tp=(8,), concurrency=(1, 400), prefill_model="shared", cache_model="lru")
    best = jp.optimize(**kw, method="exhaustive")
    assert best.concurrency > best.metrics["concurrency_max"] and "memory" not in best.binding
    # a coarse grid plus the optimum found: nothing on it beats the optimum
    grid = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=sorted({*range(1, 401, 5), best.concurrency}),
                    think_time_s=60.0, context_tokens=35000, hit_rate=0.9, prefill_model="shared", cache_model="lru")
    assert best.value == pytest.approx(float(grid.turns_per_s.where(grid.converged).max()), rel=1e-6)
    assert jp.optimize(**kw, method="gradient").concurrency == best.concurrency


def test_sessions_waiting_for_memory_compete_for_the_host_tier():
    # its hit rate falls with congestion, never above the tier's share of the sessions not
    # running, and every point converges
    c = np.asarray([60, 100, 200, 400, 1000])
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=c, think_time_s=2.0, context_tokens=35000,
                  hit_rate=1.0, prefill_model="shared", cache_model="lru", tier_capacity_gb=100.0,
                  tier_bandwidth_gbs=64.0).squeeze()
    assert ds.converged.values.all()
    tier_slots = 100.0 / ds.kv_per_session_gb.values[0]
    assert (ds.tier_hit_rate.values <= np.minimum(tier_slots / (c - ds.batch_eff.values), 1.0) + 1e-6).all()
    assert (np.diff(ds.tier_hit_rate.values) < 0).all()
    # the memory wait delays the first token and is part of the turn latency
    assert (ds.ttft_ms.values >= ds.memory_wait_ms.values).all() and ds.memory_wait_ms.values[-1] > 0
    np.testing.assert_allclose(ds.latency_ms.values, ds.ttft_ms.values + 128 * ds.tpot_ms.values, rtol=1e-5)


def test_float32_rounding_in_the_engine_roots_does_not_cycle_the_fixed_point():
    one = jp.sweep(gpu="b200", model="llama-3.1-8b", tp=8, concurrency=365, think_time_s=10.0, context_tokens=32768,
                   hit_rate=0.0, prefill_model="shared")
    assert bool(one.converged.all()) and int(one.iterations.max()) < 200


def test_api_costs_follow_the_cache_model():
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=4, think_time_s=[1.0, 600.0],
                  context_tokens=8192, hit_rate=0.9, cache_ttl_s=300.0, pause_distribution="deterministic")
    cost = jp.add_costs(ds, input_per_mtok=3, cached_input_per_mtok=0.3, output_per_mtok=15).api_cost_per_turn_usd
    kept, expired = cost.values.ravel()
    assert kept == pytest.approx((0.1 * 8192 * 3 + 0.9 * 8192 * 0.3 + 128 * 15) / 1e6, rel=1e-5)
    assert expired == pytest.approx((8192 * 3 + 128 * 15) / 1e6, rel=1e-5)  # the cache expired: all uncached


@pytest.mark.parametrize("options", [dict(profile="measured"), dict(profile="measured", prefill_model="shared")])
def test_the_lru_turn_is_the_given_models_at_its_effective_hit_rate(options):
    """What the LRU model changes is the hit rate: at the rate it finds, the turn is the given
    model's at that rate. Sessions beyond what KV memory keeps (C 10-14 against about 6 caches of
    64K tokens) keep none, some or all of their prefixes; the prefill's attention must then be a
    miss's where the prefix was evicted, whatever the nominal rate (it was the nominal mix's: at
    h = 1 with every prefix evicted, twice a miss's attention). The measured profile, in which
    both models admit every session (the seed's turns away those beyond memory)."""
    base = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, context_tokens=65536, dtype="float64", **options)
    grid = dict(concurrency=[6, 10, 14], think_time_s=[5.0, 30.0], hit_rate=[0.5, 0.9, 1.0])
    lru = jp.sweep(**base, **grid, cache_model="lru")
    found = lru.hit_rate_eff.values.reshape(3, 2, 3)
    kept = found / np.asarray(grid["hit_rate"])
    assert kept.min() == 0.0 and kept.max() > 0.999 and ((kept > 0.05) & (kept < 0.95)).any()
    for (i, c), (j, z), (k, h) in itertools.product(*(enumerate(grid[a]) for a in grid)):
        given = jp.sweep(**base, concurrency=c, think_time_s=z, hit_rate=float(found[i, j, k]))
        for name in ("ttft_ms", "tpot_ms", "latency_ms", "gpu_utilization"):
            np.testing.assert_allclose(float(lru[name].values.reshape(3, 2, 3)[i, j, k]),
                                       float(given[name].values.ravel()[0]), rtol=5e-6, err_msg=f"{name} {c} {z} {h}")


def test_an_evicted_prefix_costs_a_miss_whatever_the_nominal_hit_rate():
    """The seed's profile with attention's FLOPs counted: eight sessions of 64K tokens without a
    pause, more than KV memory keeps, evict every prefix, so every nominal hit rate prefills the
    same misses (TTFT went 4,879 to 6,816 ms from h = 0 to 1, a hit's attention counted on a
    miss's tokens)."""
    out = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=8, think_time_s=0.0,
                   context_tokens=65536, hit_rate=[0.0, 0.5, 0.9, 1.0], cache_model="lru", attention="flops",
                   prefill_model="shared")
    assert np.all(out.hit_rate_eff.values == 0.0)
    for name in ("ttft_ms", "output_tokens_per_s_per_gpu", "gpu_utilization"):
        values = out[name].values.ravel()
        np.testing.assert_allclose(values, values[0], rtol=1e-6, err_msg=name)
