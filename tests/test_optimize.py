"""Optimal configurations under SLOs: gradient search vs exhaustive, implicit gradients vs
finite differences, hardware what-if vs bisection, infeasibility reasons, sizing."""

import functools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.physics.point import evaluate_point
from jaxpareto.definitions.settings import Efficiency, Solver, Workload

SLO = {"ttft_ms": ("<=", 2000.0), "output_tokens_per_s_per_user": (">=", 20.0)}
SCENARIO = dict(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=2.0, context_tokens=32768, hit_rate=0.9,
                osl=128, delta_tokens=2128)


def test_exhaustive_and_gradient_searches_agree_on_the_seed_code_agent():
    results = {m: jp.optimize(**SCENARIO, objective="output_tokens_per_s_per_gpu", constraints=SLO,
                              tp=(1, 2, 4, 8), concurrency=(1, 1024), method=m)
               for m in ("exhaustive", "gradient", "auto")}
    best = results["exhaustive"]
    assert best.feasible and best.tp == 8 and best.concurrency == 42
    assert best.metrics["ttft_ms"] <= 2000 and best.metrics["output_tokens_per_s_per_user"] >= 20
    assert best.binding == ("output_tokens_per_s_per_user >= 20",)
    for other in results.values():
        assert (other.tp, other.concurrency) == (best.tp, best.concurrency)
    # brute force over the public sweep agrees
    ds = jp.sweep(**SCENARIO, tp=[1, 2, 4, 8], concurrency=list(range(1, 1025))).squeeze()
    ok = ds.feasible & (ds.ttft_ms <= 2000) & (ds.output_tokens_per_s_per_user >= 20) & (ds.concurrency <= ds.concurrency_max)
    assert float(ds.output_tokens_per_s_per_gpu.where(ok).max()) == pytest.approx(best.value)


def _random_gpus(rng, n):
    return [jp.Hardware(name=f"gpu-{i}", memory_gb=float(rng.choice([48, 80, 141, 192, 288])),
                        bandwidth_gbs=float(rng.uniform(800, 8000)), tflops_fp16=float(rng.uniform(300, 2500)),
                        tflops_fp8=float(rng.uniform(600, 5000)) if rng.random() < 0.7 else None) for i in range(n)]


@pytest.mark.parametrize("seed, slo, objective", [
    pytest.param(0, {"output_tokens_per_s_per_user": (">=", 25.0), "ttft_ms": ("<=", 3000.0)},
                 "output_tokens_per_s_per_gpu", marks=pytest.mark.slow),
    pytest.param(1, {"tpot_ms": ("<=", 80.0)}, "turns_per_s", marks=pytest.mark.slow),
])
def test_gradient_matches_exhaustive_on_random_scenarios(seed, slo, objective):
    rng = np.random.default_rng(seed)
    scenario = dict(gpu=_random_gpus(rng, 5), model=["llama-3.1-8b", "llama-3.1-70b", "qwen3-235b-a22b", "mixtral-8x7b",
                                                        "gpt-oss-120b"],
                    think_time_s=sorted(rng.uniform(0, 20, 2).round(2).tolist()),
                    context_tokens=sorted(rng.integers(2000, 150_000, 2).tolist()), hit_rate=[0.0, 0.9])
    kwargs = dict(objective=objective, constraints=slo, tp=(1, 2, 4, 8), concurrency=(1, 512))
    exact = jp.optimize(**scenario, **kwargs, method="exhaustive")
    grad = jp.optimize(**scenario, **kwargs, method="gradient")
    n = exact.feasible.size
    assert n >= 200
    np.testing.assert_array_equal(exact.feasible.values, grad.feasible.values)
    feasible = exact.feasible.values
    assert 0.2 * n < feasible.sum() < n  # both outcomes exercised
    rel = np.abs(grad.value.values - exact.value.values) / np.abs(exact.value.values)
    rel = np.where(feasible, rel, 0.0)
    misses = np.argwhere(rel > 0.005)
    for idx in misses:
        print("miss", {d: grad[d].values[i] for d, i in zip(grad.value.dims, idx)}, rel[tuple(idx)])
    assert len(misses) <= 0.02 * feasible.sum()
    assert rel.max() <= 0.02
    # never a configuration that violates an SLO
    for name, (op, limit) in slo.items():
        got = grad[name].values[feasible]
        assert (got <= limit).all() if op == "<=" else (got >= limit).all()
    assert (grad.concurrency.values[feasible] <= grad.concurrency_max.values[feasible]).all()


def test_unreachable_and_memory_infeasible():
    unreachable = jp.optimize(**SCENARIO, constraints={"ttft_ms": ("<=", 1.0)})
    assert not unreachable.feasible and unreachable.tp is None
    assert "ttft_ms <= 1" in unreachable.reason
    too_big = jp.optimize(gpu="l40s", model="llama-3.1-405b", context_tokens=8192, tp=(1, 2, 4, 8), constraints=SLO)
    assert not too_big.feasible and too_big.reason.startswith("memory")
    jointly = jp.optimize(**SCENARIO, constraints={"output_tokens_per_s_per_user": (">=", 60.0),
                                                   "output_tokens_per_s_per_gpu": (">=", 50.0)})
    assert not jointly.feasible and "SLO" in jointly.reason


def test_bad_optimize_inputs():
    with pytest.raises(jp.JaxparetoError, match="objective"):
        jp.optimize(**SCENARIO, objective="speed")
    with pytest.raises(jp.JaxparetoError, match="constraints.ttft"):
        jp.optimize(**SCENARIO, constraints={"ttft": ("<=", 1.0)})
    with pytest.raises(jp.JaxparetoError, match="constraints.ttft_ms"):
        jp.optimize(**SCENARIO, constraints={"ttft_ms": ("<", 1.0)})
    with pytest.raises(jp.JaxparetoError, match="concurrency"):
        jp.optimize(**SCENARIO, concurrency=(10, 1))
    with pytest.raises(jp.JaxparetoError, match="method"):
        jp.optimize(**SCENARIO, method="secant")


def test_method_names_the_search_and_solver_the_fixed_point():
    # a fixed-point solver's name given as method= (the old spelling) names solver=
    for name in ("damped", "exact"):
        with pytest.raises(jp.JaxparetoError, match=f"solver='{name}'"):
            jp.optimize(**SCENARIO, method=name)
        with pytest.raises(jp.JaxparetoError, match="solver="):
            jp.size_deployment("h100-sxm", "llama-3.1-70b", sessions=5, method=name)
    # solver= reaches the sweep plan of every search: "exact" is refused where R(B) is not
    # piecewise linear, before anything is computed
    with pytest.raises(jp.JaxparetoError, match="solver"):
        jp.optimize(**SCENARIO, constraints=SLO, solver="exact", cache_model="lru")
    with pytest.raises(jp.JaxparetoError, match="solver"):
        jp.optimize(**SCENARIO, tp=8, concurrency=40, constraints=SLO, variables=("bandwidth_gbs",), solver="exact",
                    cache_model="lru")
    with pytest.raises(jp.JaxparetoError, match="solver"):
        jp.size_deployment("h100-sxm", "llama-3.1-70b", sessions=5, solver="exact", cache_model="lru")
    with pytest.raises(jp.JaxparetoError, match="solver"):
        jp.optimize(**SCENARIO, constraints=SLO, solver="secant")


# -- implicit gradients -----------------------------------------------------------------------

OUTPUTS = ("ttft_ms", "tpot_ms", "latency_ms", "turns_per_s", "output_tokens_per_s_per_gpu")
INPUTS = ("concurrency", "think_time_s", "context_tokens", "hit_rate", "eta_prefill", "eta_decode",
          "bandwidth_gbs", "tflops_fp16", "elementwise_overhead")


def _outputs(x, hw, model, method):
    """The five outputs at the inputs ``x`` (a vector ordered as INPUTS), TP 8."""
    v = dict(zip(INPUTS, x))
    hw = type(hw)(**{**hw.__dict__, "bandwidth_gbs": v["bandwidth_gbs"], "tflops_fp16": v["tflops_fp16"]})
    point = GridPoint(gpu=hw, model=model, tp=8.0, concurrency=v["concurrency"], think_time_s=v["think_time_s"],
                      context_tokens=v["context_tokens"], hit_rate=v["hit_rate"])
    out = evaluate_point(point, Workload(), Efficiency(v["eta_prefill"], v["eta_decode"], v["elementwise_overhead"]),
                         Solver(tol=1e-12, max_iter=100_000, name=method))
    return jnp.stack([getattr(out, name) for name in OUTPUTS])


@pytest.mark.parametrize("method", ["damped", "exact"])
def test_gradients_match_central_differences(method):
    """Implicit-function gradients against float64 central differences, away from kinks."""
    rng = np.random.default_rng(7)
    gpu = jp.catalog.gpus()["h200-sxm"]
    checked = 0
    with jax.enable_x64(True):
        forward = jax.jit(jax.vmap(functools.partial(_outputs, method=method), in_axes=(0, None, None)))
        jacobian = jax.jit(jax.jacfwd(functools.partial(_outputs, method=method)))
        for model_name in ("llama-3.1-70b", "qwen3-235b-a22b", "deepseek-v3"):
            model = jp.catalog.models()[model_name].to_params()
            hw = jax.tree_util.tree_map(jnp.asarray, gpu.to_params())
            for _ in range(4):
                x = np.array([rng.uniform(5, 60), rng.uniform(0.5, 10), rng.uniform(4000, 60000), rng.uniform(0.1, 0.9),
                              0.65, 0.40, gpu.bandwidth_gbs, gpu.tflops_fp16, 1.1])
                value = np.asarray(forward(x[None], hw, model))[0]
                if not np.isfinite(value).all():
                    continue
                jac = np.asarray(jacobian(x, hw, model))  # (outputs, inputs)
                h = 1e-6 * np.maximum(np.abs(x), 1.0)
                steps = np.diag(h)
                plus = np.asarray(forward(x + steps, hw, model))
                minus = np.asarray(forward(x - steps, hw, model))
                fd = ((plus - minus) / (2 * h[:, None])).T  # (outputs, inputs)
                scale = np.maximum(np.maximum(np.abs(fd), np.abs(jac)), 1e-9 * np.abs(value)[:, None])
                bad = np.abs(jac - fd) > 1e-3 * scale + 1e-12
                assert not bad.any(), (model_name, [(OUTPUTS[i], INPUTS[j], jac[i, j], fd[i, j])
                                                    for i, j in np.argwhere(bad)])
                checked += jac.size
    assert checked >= 300


# -- hardware what-if and sizing ----------------------------------------------------------------

@pytest.mark.slow
def test_least_bandwidth_agrees_with_bisection():
    slo = {"output_tokens_per_s_per_user": (">=", 20.0)}
    best = jp.optimize(**SCENARIO, tp=8, concurrency=40, constraints=slo, variables=("bandwidth_gbs",))
    assert best.feasible and best.binding == ("output_tokens_per_s_per_user >= 20",)
    found = best.hardware.bandwidth_gbs

    def meets(bw):
        hw = jp.catalog.gpus()["h100-sxm"].model_copy(update={"bandwidth_gbs": bw, "name": "probe"})
        ds = jp.sweep(gpu=hw, model="llama-3.1-70b", tp=8, concurrency=40, think_time_s=2.0, context_tokens=32768,
                      hit_rate=0.9, dtype="float64", tol=1e-12)
        return float(ds.output_tokens_per_s_per_user.squeeze()) >= 20.0

    lo, hi = 100.0, 20_000.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    assert found == pytest.approx(hi, rel=1e-4)
    assert meets(found) and not meets(found * (1 - 1e-3))


@pytest.mark.slow
def test_what_if_two_variables_and_joint_scenarios():
    slo = {"output_tokens_per_s_per_user": (">=", 20.0)}
    best = jp.optimize(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=2.0, context_tokens=[16384, 32768],
                       hit_rate=0.9, tp=8, concurrency=60, constraints=slo, variables=("bandwidth_gbs", "memory_gb"))
    assert best.feasible and set(best.binding) == {"output_tokens_per_s_per_user >= 20", "memory"}
    # the memory found holds exactly 60 sessions of the longer context
    kv = 32768 * 327680 / 1e9
    assert best.hardware.memory_gb == pytest.approx((70.55 * 2 + 60 * kv) / 8, rel=1e-4)
    unreachable = jp.optimize(**SCENARIO, tp=8, concurrency=40, constraints={"ttft_ms": ("<=", 10.0)},
                              variables=("bandwidth_gbs",))
    assert not unreachable.feasible and "ttft_ms <= 10" in unreachable.reason


@pytest.mark.slow
def test_optimize_and_what_if_take_the_engine_axis():
    """The engine is a scenario axis like the others: a list of engines batches the optimiser,
    and the what-if's memory term leaves KV only the engine's share of memory."""
    from jaxpareto.definitions.engine import engines

    vllm = engines()["vllm"]
    kv = 32768 * 327680 / 1e9
    reported = 85.03 / 80.0  # vLLM's share is of the total the driver reports, which scales with the size
    wanted = {"seed": (70.55 * 2 + 40 * kv) / 8,
              "vllm": (70.55 * 2 + 8 * vllm.activation_reserve_gb + 40 * kv) / (8 * vllm.gpu_memory_utilization)
              / reported}
    for engine, memory_gb in wanted.items():
        best = jp.optimize(**SCENARIO, engine=engine, tp=8, concurrency=40, constraints={"ttft_ms": ("<=", 2000.0)},
                           variables=("memory_gb",))
        assert best.feasible and best.binding == ("memory",)
        assert best.hardware.memory_gb == pytest.approx(memory_gb, rel=1e-4)
        assert best.hardware.memory_reported_gb == pytest.approx(memory_gb * reported, rel=1e-4)
    batched = jp.optimize(**SCENARIO, engine=["seed", "vllm"], constraints=SLO, tp=(8,), concurrency=(1, 256))
    assert batched.sizes["engine"] == 2
    for engine in ("seed", "vllm"):
        one = jp.optimize(**SCENARIO, engine=engine, constraints=SLO, tp=(8,), concurrency=(1, 256))
        cell = batched.sel(engine=engine).squeeze()
        assert (int(cell.tp), int(cell.concurrency)) == (one.tp, one.concurrency)
    # vLLM's KV share binds: 0.9 of the 8 x 85.03 GB the driver reports, less weights and reserves
    vllm_slots = (0.9 * 8 * 85.03 - 70.55 * 2 - 8 * vllm.activation_reserve_gb) // kv
    assert int(batched.concurrency.sel(engine="vllm").squeeze()) == vllm_slots
    assert int(batched.concurrency.sel(engine="seed").squeeze()) >= vllm_slots


def test_size_deployment():
    result = jp.size_deployment("h100-sxm", "llama-3.1-70b", 2.0, 32768, 0.9, sessions=500, constraints=SLO)
    assert result.feasible and result.tp == 8 and result.gpus == result.replicas * 8
    capacity = jp.optimize(**SCENARIO, constraints=SLO, tp=(8,), concurrency=(1, 4096)).concurrency
    assert result.replicas == math.ceil(500 / capacity)
    options = result.options.set_index("tp")
    assert options.loc[8, "gpus"] <= options.dropna(subset=["gpus"]).gpus.min()
    rate = jp.size_deployment("h100-sxm", "llama-3.1-70b", 2.0, 32768, 0.9, turns_per_s=50, constraints=SLO)
    assert rate.feasible and rate.replicas * rate.turns_per_s_per_replica >= 50
    none = jp.size_deployment("l40s", "llama-3.1-405b", 2.0, 32768, 0.9, sessions=10, constraints=SLO)
    assert not none.feasible and none.reason.startswith("memory")
    assert result.note == rate.note == ""


def test_sizing_without_an_slo_where_sessions_wait_for_memory_says_so():
    """Where sessions wait for KV memory (the LRU model), a replica without an SLO admits all the
    search allows: the answer is the search's limit, and a note says so with the TTFT it costs."""
    result = jp.size_deployment("h100-sxm", "llama-3.1-70b", 2.0, 32768, 0.9, sessions=100, tp=(4, 8),
                                concurrency=(1, 256), cache_model="lru")
    assert result.feasible and result.options["capacity"].max() == 256
    assert result.note.startswith("note: no SLO was given") and "limit of 256" in result.note
    assert f"{float(result.options.set_index('tp').loc[result.tp, 'ttft_ms']):,.0f} ms" in result.note
    # DeepSeek-V3's 673 GB do not fit 8 H100s: the reason says how many GPUs the weights need
    wide = jp.size_deployment("h100-sxm", "deepseek-v3", 2.0, 32768, 0.9, sessions=100)
    assert not wide.feasible and "673 GB of weights" in wide.reason and "e.g. 16 and 32" in wide.reason
    assert jp.size_deployment("h100-sxm", "deepseek-v3", 2.0, 32768, 0.9, sessions=100, tp=(16, 32)).feasible


def test_cli_optimize_and_size(tmp_path, capsys):
    from jaxpareto.cli import main

    spec = tmp_path / "slo.toml"
    spec.write_text('[grid]\ngpu = ["h100-sxm", "l40s"]\nmodel = ["llama-3.1-70b"]\nthink_time_s = [2.0]\n'
                    'context_tokens = [32768]\nhit_rate = [0.9]\n[optimize]\n'
                    'constraints = { ttft_ms = ["<=", 2000.0], output_tokens_per_s_per_user = [">=", 20.0] }\n'
                    'concurrency = [1, 1024]\n')
    out = tmp_path / "best.zarr"
    assert main(["optimize", str(spec), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 scenarios" in printed
    assert "no configuration reaches output_tokens_per_s_per_user >= 20" in printed  # L40S bandwidth is too low
    import xarray as xr

    best = xr.open_zarr(out)
    assert int(best.tp.sel(gpu="h100-sxm").squeeze()) == 8
    assert int(best.concurrency.sel(gpu="h100-sxm").squeeze()) == 42
    assert not bool(best.feasible.sel(gpu="l40s").squeeze())
    capsys.readouterr()
    for argv in (["pareto", str(out)], ["plot", str(out), "--out", str(tmp_path / "plots")]):
        assert main(argv) == 2  # the optimum per scenario is no sweep: refused by name
        assert "holds `jaxpareto optimize` results" in capsys.readouterr().err
    code = main(["size", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--sessions", "500",
                 "--slo", "ttft_ms<=2000", "--slo", "output_tokens_per_s_per_user>=20"])
    assert code == 0 and "96 GPUs = 12 replicas x TP 8" in capsys.readouterr().out
    assert main(["size", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--sessions", "5", "--slo", "ttft<2"]) == 2
    spec.write_text(spec.read_text().replace('["<=", 2000.0]', '["<", 2000.0]'))
    assert main(["optimize", str(spec)]) == 2
    assert "constraints.ttft_ms" in capsys.readouterr().err


def test_cli_scenarios_take_the_model_equations_and_say_where_the_seeds_prefill_overcommits(capsys):
    """Full-context prefills of 64K tokens every 2 s: the seed's isolated prefill lets 23 sessions
    on TP 8 ask for 3.75x the GPUs' compute (each turn's prefill alone at full speed); the CLI says
    so, and --prefill-model shared answers with the GPUs shared (6 sessions). The equations given
    are the library's keywords, and are described with the scenario."""
    from jaxpareto.cli import main

    args = ["--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--think-time-s", "2", "--context-tokens", "65536",
            "--hit-rate", "0", "--slo", "ttft_ms<=5000", "--slo", "output_tokens_per_s_per_user>=15", "--tp", "4,8",
            "--max-concurrency", "256"]
    assert main(["optimize", *args]) == 0
    seed = capsys.readouterr().out
    assert "TP 8, concurrency 23" in seed and "asks for 3.75x the compute" in seed
    assert main(["optimize", *args, "--prefill-model", "shared"]) == 0
    shared = capsys.readouterr().out
    assert "prefill model shared" in shared and "TP 8, concurrency 6" in shared and "asks for" not in shared
    best = jp.optimize(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=2.0, context_tokens=65536, hit_rate=0.0,
                       constraints={"ttft_ms": ("<=", 5000.0), "output_tokens_per_s_per_user": (">=", 15.0)},
                       tp=(4, 8), concurrency=(1, 256), prefill_model="shared")
    assert best.concurrency == 6 and best.metrics["gpu_utilization"] <= 1.0
    assert main(["size", *args, "--sessions", "200"]) == 0
    assert "asks for" in capsys.readouterr().out
    assert main(["size", *args, "--sessions", "200", "--prefill-model", "shared", "--cache-model", "lru"]) == 0
    assert "cache model lru" in capsys.readouterr().out
    # the TTL model's time is a flag of its own (the model could not be chosen without it); it
    # implies that model, and only that model takes one (the library's check, as in a sweep)
    assert main(["size", *args, "--sessions", "200", "--cache-model", "ttl", "--cache-ttl-s", "60"]) == 0
    assert "cache model ttl, cache TTL 60 s" in capsys.readouterr().out
    assert main(["size", *args, "--sessions", "200", "--cache-ttl-s", "60"]) == 0
    assert "cache TTL 60 s" in capsys.readouterr().out
    assert main(["size", *args, "--sessions", "200", "--cache-model", "lru", "--cache-ttl-s", "60"]) == 2
    assert "cache_ttl_s: the TTL model needs cache_ttl_s and only it takes one" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main(["size", *args, "--sessions", "200", "--prefill-model", "chunked"])
    assert refused.value.code == 2 and "invalid choice: 'chunked'" in capsys.readouterr().err


def test_sizing_splits_sessions_evenly_only_where_the_split_meets_the_slos():
    # a lower bound on tokens/s per GPU fails below capacity: the even split must meet it itself
    split = jp.size_deployment("h100-sxm", "llama-3.1-70b", 2.0, 16384, 0.9, sessions=100,
                               constraints={"output_tokens_per_s_per_user": (">=", 20.0),
                                            "output_tokens_per_s_per_gpu": (">=", 150.0)})
    if split.feasible:
        row = split.options.set_index("tp").loc[split.tp]
        assert row.output_tokens_per_s_per_gpu >= 150.0 and row.output_tokens_per_s_per_user >= 20.0
    else:
        assert "even split" in split.reason


def test_without_constraints_memory_alone_bounds_the_concurrency():
    free = jp.optimize(gpu="h100-sxm", model="llama-3.1-70b")
    assert free.feasible and free.concurrency == free.metrics["concurrency_max"]


def test_gradient_search_honours_expert_routing():
    kw = dict(gpu="h200-sxm", model="deepseek-v3", think_time_s=2.0, context_tokens=16384, hit_rate=0.9,
              constraints={"output_tokens_per_s_per_user": (">=", 30.0)}, tp=(8,), concurrency=(1, 512),
              expert_routing="uniform")
    exact, grad = jp.optimize(**kw, method="exhaustive"), jp.optimize(**kw, method="gradient")
    assert (grad.tp, grad.concurrency) == (exact.tp, exact.concurrency)
    assert grad.metrics["output_tokens_per_s_per_user"] == pytest.approx(exact.metrics["output_tokens_per_s_per_user"])


def test_what_if_that_memory_forbids_says_memory():
    memory_bound = jp.optimize(**SCENARIO, tp=8, concurrency=60, constraints={"output_tokens_per_s_per_user": (">=", 20.0)},
                               variables=("bandwidth_gbs",))
    assert not memory_bound.feasible and "memory" in memory_bound.reason


def test_what_if_certifies_with_the_solver_given():
    kw = dict(**SCENARIO, tp=8, concurrency=40, constraints={"output_tokens_per_s_per_user": (">=", 20.0)},
              variables=("bandwidth_gbs",))
    # the default certifies with the search's own solver, exact where R(B) is piecewise linear
    assert jp.optimize(**kw, solver="exact") == jp.optimize(**kw)
    damped = jp.optimize(**kw, solver="damped", tol=1e-12)
    assert damped.feasible and damped.metrics["output_tokens_per_s_per_user"] >= 20.0
    assert damped.hardware.bandwidth_gbs == pytest.approx(jp.optimize(**kw).hardware.bandwidth_gbs, rel=1e-6)


def test_hf_quantisation_formats(tmp_path):
    import json

    base = json.loads((Path(__file__).parent / "fixtures" / "hf" / "llama-3.1-70b.json").read_text())
    for quant, dtype in (({"quant_method": "awq", "bits": 4}, "int4"), ({"quant_method": "gptq", "bits": 4}, "int4"),
                         ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "int4"),
                         ({"quant_method": "fbgemm_fp8"}, "fp8")):
        assert jp.Model.from_hf_config({**base, "quantization_config": quant}).weight_dtype == dtype
    with pytest.raises(jp.JaxparetoError, match="weight_dtype="):
        jp.Model.from_hf_config({**base, "quantization_config": {"quant_method": "gptq", "bits": 8}})
    with pytest.raises(jp.JaxparetoError, match="float32"):
        jp.Model.from_hf_config({**base, "torch_dtype": "float32"})
    assert jp.Model.from_hf_config({**base, "torch_dtype": "float32"}, weight_dtype="bf16").weight_dtype == "bf16"
    with pytest.raises(jp.JaxparetoError, match="num_attention_heads"):
        jp.Model.from_hf_config({**base, "num_attention_heads": 0})
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(jp.JaxparetoError, match="not valid JSON"):
        jp.Model.from_hf_config(bad)


def test_gpu_budget_fills_whole_replicas_and_ranks_the_layouts(tmp_path, capsys):
    from jaxpareto.cli import main

    best = jp.optimize(**SCENARIO, constraints=SLO, concurrency=(1, 256), gpu_budget=8)
    assert set(best.layouts["serving"]) == {"aggregated", "disaggregated"}
    assert (best.layouts["gpus_used"] == 8).all()  # never beyond the budget
    assert best.layouts["feasible"].tolist() == sorted(best.layouts["feasible"], reverse=True)  # infeasible ones last
    ranked = best.layouts.loc[best.layouts["feasible"], "output_tokens_per_s_per_gpu"]
    assert ranked.is_monotonic_decreasing
    layouts = best.layouts[(best.layouts["serving"] == "aggregated") & best.layouts["pp"].isna()]  # one TP group
    assert set(layouts["tp"]) == {1, 2, 4, 8}
    assert (layouts["replicas"] * layouts["tp"] == layouts["gpus_used"]).all()
    assert not layouts.set_index("tp").loc[1, "feasible"]  # 70B bf16 does not fit one H100
    # per-GPU throughput: the budget's best layout is the unconstrained search's best TP
    free = jp.optimize(**SCENARIO, constraints=SLO, concurrency=(1, 256))
    assert (best.tp, best.concurrency) == (free.tp, free.concurrency)
    assert best.value == pytest.approx(free.value, rel=1e-5)  # float32, evaluated in another batch
    assert (best.replicas, best.gpus_used, best.serving) == (8 // best.tp, 8, "aggregated")
    six = jp.optimize(**SCENARIO, constraints=SLO, concurrency=(1, 256), gpu_budget=6, serving="aggregated")
    assert set(six.layouts.query("serving == 'aggregated'")["tp"]) == {1, 2} and (six.layouts["gpus_used"] == 6).all()
    with pytest.raises(jp.JaxparetoError, match="gpu_budget: no TP choice in \\[2, 4, 8\\] divides 3 GPUs"):
        jp.optimize(**SCENARIO, constraints=SLO, tp=(2, 4, 8), gpu_budget=3)
    with pytest.raises(jp.JaxparetoError, match="gpu_budget: takes one scenario"):
        jp.optimize(**{**SCENARIO, "gpu": ["h100-sxm", "h200-sxm"]}, constraints=SLO, gpu_budget=8)
    out = tmp_path / "layouts.csv"
    assert main(["optimize", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--slo", "ttft_ms<=2000",
                 "--gpu-budget", "8", "--max-concurrency", "256", "--serving", "aggregated", "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "layouts of 8 GPUs" in printed and "best: aggregated, TP" in printed
    assert max(len(line) for line in printed.splitlines() if not line.startswith("wrote")) <= 100  # not the path
    assert set(pd.read_csv(out)["tp"]) == {1, 2, 4, 8}


def test_gpu_budget_ranks_replica_counts_over_the_budget():
    """requests/s is a replica's own: 8 replicas of TP 1 serve 8 times one (a per-replica ranking would not)."""
    scenario = dict(SCENARIO, model="llama-3.1-8b")
    best = jp.optimize(**scenario, objective="turns_per_s", constraints=SLO, concurrency=(1, 64), gpu_budget=8,
                       serving="aggregated")
    for _, row in best.layouts[best.layouts["feasible"] & best.layouts["pp"].isna()].iterrows():  # TP groups
        one = jp.optimize(**scenario, objective="turns_per_s", constraints=SLO, concurrency=(1, 64), tp=(int(row.tp),))
        assert row["turns_per_s"] == pytest.approx(one.value * row["replicas"], rel=1e-5)
    assert best.value == pytest.approx(best.layouts["turns_per_s"].max(), rel=1e-12)
    # an SLO on a replica's count is over the budget too, as the count is reported
    total = best.value
    held = jp.optimize(**scenario, objective="turns_per_s", constraints={**SLO, "turns_per_s": (">=", 0.9 * total)},
                       concurrency=(1, 64), gpu_budget=8, serving="aggregated")
    assert held.feasible and held.value >= 0.9 * total
    assert jp.optimize(**scenario, constraints={"turns_per_s": (">=", 1.1 * total)}, concurrency=(1, 64),
                       gpu_budget=8, objective="turns_per_s", serving="aggregated").feasible is False


def test_objectives_and_constraints_are_the_fronts_quantities():
    """One list of quantities for fronts, reduced sweeps and the optimiser: a utilisation limit is
    a constraint the answer meets (units "1" had been refused by the optimiser), and a status flag
    or the solver's iteration count is no objective anywhere."""
    capped = jp.optimize(**SCENARIO, objective="output_tokens_per_s_per_gpu",
                         constraints={"gpu_utilization": ("<=", 0.5)}, method="exhaustive")
    free = jp.optimize(**SCENARIO, objective="output_tokens_per_s_per_gpu", method="exhaustive")
    assert capped.feasible and capped.metrics["gpu_utilization"] <= 0.5 < free.metrics["gpu_utilization"]
    assert capped.value < free.value
    for name in ("iterations", "feasible"):
        with pytest.raises(jp.JaxparetoError, match="objective"):
            jp.optimize(**SCENARIO, objective=name)


def test_searches_take_an_slo_as_upper_limits_and_read_percentiles_wherever_asked():
    """``slo=`` in a search is its targets as "<=" constraints (it had been taken and ignored),
    and sizing with a percentile target computes the percentiles (it had failed after the
    sweep), with the same answer as the target given as a constraint."""
    tail = {"p99_ttft_ms": 2000.0}
    by_slo = jp.optimize(**SCENARIO, slo=tail, tp=(8,), concurrency=(1, 128))
    by_constraint = jp.optimize(**SCENARIO, constraints={"p99_ttft_ms": ("<=", 2000.0)}, tp=(8,),
                                concurrency=(1, 128))
    assert by_slo.feasible and (by_slo.tp, by_slo.concurrency) == (by_constraint.tp, by_constraint.concurrency)
    assert by_slo.metrics["p99_ttft_ms"] <= 2000.0
    assert not jp.optimize(**SCENARIO, slo={"p99_ttft_ms": 1.0}, tp=(8,), concurrency=(1, 64)).feasible
    with pytest.raises(jp.JaxparetoError, match="also given in constraints"):
        jp.optimize(**SCENARIO, slo={"ttft_ms": 1.0}, constraints={"ttft_ms": ("<=", 3.0)}, tp=(8,))
    sized = jp.size_deployment("h100-sxm", "llama-3.1-70b", 2.0, 16384, 0.5, sessions=500,
                               constraints={"p99_ttft_ms": ("<=", 2000.0)})
    assert sized.feasible and sized.gpus == jp.size_deployment("h100-sxm", "llama-3.1-70b", 2.0, 16384, 0.5,
                                                                sessions=500, slo=tail).gpus
    loose = jp.size_deployment("h100-sxm", "llama-3.1-70b", 2.0, 16384, 0.5, sessions=500,
                               constraints={"ttft_ms": ("<=", 2000.0)})
    assert sized.gpus >= loose.gpus  # a P99 target is at least as strict as the mean's


def test_size_shows_a_dash_where_no_replica_applies(capsys):
    """A TP whose weights do not fit has no replicas or GPUs: '-' as elsewhere (it printed None)."""
    from jaxpareto.cli import main

    assert main(["size", "--gpu", "h100-sxm", "--model", "llama-3.1-405b", "--sessions", "500", "--tp", "1,2"]) == 1
    out = capsys.readouterr().out
    assert "weights exceed memory" in out and "None" not in out
