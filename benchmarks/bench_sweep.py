"""Sweep benchmarks (not part of CI): configs/s of

  (a) a plain Python scalar loop of the model (tests/reference.py),
  (b) a NumPy-vectorised implementation with the same damped stopping rule, gathering the
      active points each iteration, and (b') the same with masked whole-array updates (the
      fastest NumPy form, the fair baseline),
  (c) jaxpareto, damped solver,
  (d) jaxpareto, exact solver (blocks evaluated factored, `jaxpareto.mapper.evaluate_factored`),
      with every output and with 4 (TTFT, TPOT, output tokens/s per GPU and per user),

all on the same grid in one run, plus jaxpareto end to end into a compressed zarr store, Pareto
extraction on 1e7 points and peak RSS; `--huge N` also streams an N-point sweep into zarr in a
child process and records its peak RSS and disk footprint. Results go to
benchmarks/results/<name>.json with the device name. Compilation and steady state are timed
separately; every timing blocks on the outputs.

Grid ("named grid" of issue 4): Llama-3.1-70B FP16 on H200, TP 1/2/4/8, 160 log-spaced
concurrencies 1-1024 (110 unique integers), think time 0-30 s (5 values), 40 contexts 2K-200K,
11 hit rates: 968,000 points.

Usage: python benchmarks/bench_sweep.py [--quick] [--huge 1e9]
On a GPU machine (jax with CUDA installed) the same command benchmarks the GPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

import jaxpareto as jp
from jaxpareto.dataset.pareto import front_mask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference import reference_point  # noqa: E402  (the plain-Python scalar model)

GPU, MODEL = "h200-sxm", "llama-3.1-70b"
FOUR_VARIABLES = ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user")


def named_grid(quick: bool) -> dict:
    return dict(
        gpu=GPU, model=MODEL, tp=[1, 2, 4, 8],
        concurrency=np.unique(np.round(np.geomspace(1, 1024, 40 if quick else 160))).astype(int).tolist(),
        think_time_s=[0.0, 1.0, 5.0, 15.0, 30.0],
        context_tokens=np.unique(np.round(np.geomspace(2048, 200_000, 10 if quick else 40))).astype(int).tolist(),
        hit_rate=np.round(np.linspace(0.0, 1.0, 11), 12).tolist(),
    )


def _numpy_inputs(grid: dict, osl: float, delta: float) -> dict:
    """The grid's per-point constants of the seed equations as float32 NumPy arrays (shared by (b) and (b'))."""
    f32 = np.float32
    hw, m = jp.catalog.gpus()[GPU], jp.catalog.models()[MODEL]
    tp, c, z, ctx, h = np.meshgrid(*(np.asarray(grid[k], f32) for k in
                                     ("tp", "concurrency", "think_time_s", "context_tokens", "hit_rate")), indexing="ij")
    d, flops, bw, kappa = f32(2.0), f32(hw.tflops_fp16), f32(hw.bandwidth_gbs), f32(m.kv_bytes_per_token)
    avail = tp * f32(hw.memory_gb) - f32(m.params_total_b) * d
    kv_gb = ctx * kappa * (tp / np.minimum(tp, f32(m.kv_heads_sharded))) / f32(1e9)
    c_eff = np.minimum(c, np.floor(np.maximum(avail, 0) / kv_gb))
    feasible = (avail > 0) & (c_eff >= 1)
    prefill = h * np.minimum(f32(delta), ctx) + (1 - h) * ctx
    return dict(
        feasible=feasible, c_eff=np.where(feasible, c_eff, f32(1)), z_ms=z * f32(1e3),
        ttft=f32(2e9) * f32(m.params_active_b) * prefill / (tp * flops * f32(1e12)) * f32(1e3) / f32(0.65),
        t_w=f32(m.params_active_b) * d / (tp * bw) * f32(1e3),
        kv_ms=ctx * kappa / f32(1e9) / (np.minimum(tp, f32(m.kv_heads_sharded)) * bw) * f32(1e3),
        comp_ms=f32(2e9) * f32(m.params_active_b) / (tp * flops * f32(1e12)) * f32(1e3),
    )


def _numpy_outputs(x: dict, b: np.ndarray, tpot: np.ndarray, r: np.ndarray, it: np.ndarray) -> dict:
    nan, f32 = np.float32(np.nan), np.float32
    turns = x["c_eff"] / ((r + x["z_ms"]) / f32(1e3))
    feasible = x["feasible"]
    return {"batch_eff": np.where(feasible, b, nan), "tpot_ms": np.where(feasible, tpot, nan),
            "turns_per_s": np.where(feasible, turns, nan), "iterations": it}


def numpy_sweep(grid: dict, tol=1e-6, damping=0.4, max_iter=10_000, osl=128.0, delta=2128.0) -> dict:
    """(b): the model vectorised with NumPy over the whole grid (float32), damped iteration
    with the same start, update and stopping rule as docs/model.md, gathering the active points
    each iteration."""
    f32 = np.float32
    x = _numpy_inputs(grid, osl, delta)
    c_eff, ttft, t_w, kv_ms, comp_ms, z_ms = (x[k] for k in ("c_eff", "ttft", "t_w", "kv_ms", "comp_ms", "z_ms"))

    def target(b):
        step = np.maximum(b, f32(1))  # a step runs one request at least (B < 1: sessions mostly paused)
        tpot = np.maximum((t_w + step * kv_ms) * f32(1.1), step * comp_ms) / f32(0.4)
        r = ttft + tpot * f32(osl)
        return c_eff * r / (r + z_ms), tpot, r

    b = np.ones_like(c_eff)
    t, _, _ = target(b)
    active = np.abs(t - b) > f32(tol) * b
    it = np.zeros(b.shape, np.int32)
    while active.any() and it.max() < max_iter:
        idx = np.nonzero(active)
        bi = (1 - f32(damping)) * b[idx] + f32(damping) * t[idx]
        b[idx] = bi
        step = np.maximum(bi, f32(1))
        tpot = np.maximum((t_w[idx] + step * kv_ms[idx]) * f32(1.1), step * comp_ms[idx]) / f32(0.4)
        r = ttft[idx] + tpot * f32(osl)
        t[idx] = c_eff[idx] * r / (r + z_ms[idx])
        it[idx] += 1
        active[idx] = np.abs(t[idx] - bi) > f32(tol) * bi
    _, tpot, r = target(b)
    return _numpy_outputs(x, b, tpot, r, it)


def numpy_sweep_masked(grid: dict, tol=1e-6, damping=0.4, max_iter=10_000, osl=128.0, delta=2128.0) -> dict:
    """(b'): the same equations and stopping rule as `numpy_sweep`, updated as whole arrays under a
    mask instead of gathering the active points each iteration: the fastest NumPy form (every
    iteration streams contiguous arrays; converged points keep their value through ``np.where``)."""
    f32 = np.float32
    x = _numpy_inputs(grid, osl, delta)
    c_eff, ttft, z_ms = x["c_eff"], x["ttft"], x["z_ms"]
    # the 1.1 / 0.4 factors folded in once, not per iteration
    t_w, kv_ms, comp_ms = x["t_w"] * f32(1.1) / f32(0.4), x["kv_ms"] * f32(1.1) / f32(0.4), x["comp_ms"] / f32(0.4)

    def target(b):
        step = np.maximum(b, f32(1))
        tpot = np.maximum(t_w + step * kv_ms, step * comp_ms)
        r = ttft + tpot * f32(osl)
        return c_eff * r / (r + z_ms), tpot, r

    b = np.ones_like(c_eff)
    t, _, _ = target(b)
    active = np.abs(t - b) > f32(tol) * b
    it = np.zeros(b.shape, np.int32)
    for _ in range(max_iter):
        if not active.any():
            break
        b = np.where(active, (1 - f32(damping)) * b + f32(damping) * t, b)
        t, _, _ = target(b)
        it += active
        active &= np.abs(t - b) > f32(tol) * b
    _, tpot, r = target(b)
    return _numpy_outputs(x, b, tpot, r, it)


def best_of(fn, repeat=3):
    best, out = np.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def jax_steady(plan) -> tuple[float, float]:
    """(compile + first run, best steady-state run) of a planned sweep, blocking on outputs."""
    problem = plan.problem()

    def run():
        outs = [problem.launch(o) for o in problem.origins()]
        jax.block_until_ready(outs)

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    return first, best_of(run)[0]


def huge(points: float, out: Path) -> dict:
    """Stream an N-point sweep of 3 variables into zarr in a child process; its peak RSS."""
    n_c = 1024
    n_l = int(round(points / (4 * n_c * 11 * 11)))
    code = f"""
import json, time, numpy as np, jaxpareto as jp
grid = dict(gpu="{GPU}", model="{MODEL}", tp=[1, 2, 4, 8], concurrency=list(range(1, {n_c} + 1)),
            think_time_s=np.round(np.linspace(0, 30, 11), 9).tolist(),
            context_tokens=np.unique(np.round(np.geomspace(2048, 200000, {n_l}))).astype(int).tolist(),
            hit_rate=np.round(np.linspace(0, 1, 11), 12).tolist())
t = time.perf_counter()
ds = jp.sweep_to_zarr("{out}", variables=["tpot_ms", "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu"],
                      solver="exact", progress=True, **grid)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec from the parent
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps(dict(points=int(np.prod([ds.sizes[d] for d in ds.dims])), seconds=time.perf_counter() - t,
                      peak_rss_mb=peak / 1024)))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    disk = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    stats.update(configs_per_s=stats["points"] / stats["seconds"], disk_bytes=disk,
                 disk_bytes_per_point=disk / stats["points"])
    return stats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smaller grid for a smoke run")
    parser.add_argument("--huge", type=float, default=0, help="also stream this many points into zarr (e.g. 1e9)")
    args = parser.parse_args()
    grid = named_grid(args.quick)
    device = jax.devices()[0]
    results: dict = {"device": f"{device.platform}:{device.device_kind}", "devices": len(jax.devices()),
                     "platform": platform.platform(), "jax": jax.__version__}
    from jaxpareto.dataset.plan import plan_sweep as plan
    damped_plan, exact_plan = plan(**grid), plan(**grid, solver="exact")
    points = damped_plan.problem().size
    results["grid_points"] = points

    # (a) Python loop on a random sample, extrapolated per config.
    gpu, model = jp.catalog.gpus()[GPU].to_dict(), jp.catalog.models()[MODEL].to_dict()
    rng = np.random.default_rng(0)
    sample = [(int(rng.choice(grid["tp"])), int(rng.choice(grid["concurrency"])), float(rng.choice(grid["think_time_s"])),
               int(rng.choice(grid["context_tokens"])), float(rng.choice(grid["hit_rate"]))) for _ in range(3000)]
    start = time.perf_counter()
    for point in sample:
        reference_point(gpu, model, *point)
    results["a_python_loop_configs_per_s"] = len(sample) / (time.perf_counter() - start)

    # (b) NumPy, same stopping rule.
    numpy_s, numpy_out = best_of(lambda: numpy_sweep(grid), repeat=2)
    results["b_numpy_configs_per_s"] = points / numpy_s
    masked_s, masked_out = best_of(lambda: numpy_sweep_masked(grid), repeat=2)
    results["b_numpy_masked_configs_per_s"] = points / masked_s
    results["numpy_masked_vs_gathered_max_rel_diff_batch_eff"] = float(np.nanmax(
        np.abs(masked_out["batch_eff"] - numpy_out["batch_eff"]) / numpy_out["batch_eff"]))

    # (c), (d): device time of the model alone, compilation separate.
    for key, p in (("c_damped", damped_plan), ("d_exact", exact_plan)):
        first, steady = jax_steady(p)
        results[f"{key}_compile_and_first_run_s"] = first
        results[f"{key}_configs_per_s"] = points / steady
        sweep_s, ds = best_of(lambda: jp.sweep(p))  # end to end, in memory
        results[f"{key}_sweep_configs_per_s"] = points / sweep_s
        if key == "c_damped":
            results["mean_iterations"] = float(ds.iterations.where(ds.feasible).mean())
            check = np.nanmax(np.abs(numpy_out["batch_eff"] - ds.batch_eff.values.squeeze()) / ds.batch_eff.values.squeeze())
            results["numpy_vs_jax_max_rel_diff_batch_eff"] = float(check)

    # The 4-variable form: the exact solver keeping throughput and latency only.
    four = plan(**grid, solver="exact", variables=list(FOUR_VARIABLES))
    results["d_exact_4_variables_compile_and_first_run_s"], steady = jax_steady(four)
    results["d_exact_4_variables_configs_per_s"] = points / steady
    results["d_exact_4_variables_sweep_configs_per_s"] = points / best_of(lambda: jp.sweep(four))[0]

    # End to end into a compressed store.
    for solver in ("damped", "exact"):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            jp.sweep_to_zarr(Path(tmp) / "b.zarr", progress=False, solver=solver, **grid)
            results[f"sweep_to_zarr_{solver}_configs_per_s"] = points / (time.perf_counter() - start)

    # A reduced sweep: only each cell's front over TP x concurrency and its best points leave
    # the device (on a GPU; NumPy reduces on a CPU), nothing else is kept (the GPU goal's form).
    jp.pareto_sweep(exact_plan)
    results["e_reduced_exact_configs_per_s"] = points / best_of(lambda: jp.pareto_sweep(exact_plan))[0]

    # Pareto on 1e7 points (1e6 with --quick) in 1e4 groups of 1,000 configurations.
    n = 1_000_000 if args.quick else 10_000_000
    x, y = rng.random((10_000, n // 10_000)), rng.random((10_000, n // 10_000))
    valid = rng.random(x.shape) > 0.05
    results["pareto_points"] = n
    results["pareto_s"] = best_of(lambda: front_mask(x, y, valid), repeat=1)[0]
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    for key in ("c_damped", "d_exact"):
        results[f"{key}_vs_numpy"] = results[f"{key}_configs_per_s"] / results["b_numpy_configs_per_s"]
        results[f"{key}_vs_numpy_masked"] = results[f"{key}_configs_per_s"] / results["b_numpy_masked_configs_per_s"]
        results[f"{key}_sweep_vs_numpy_masked"] = \
            results[f"{key}_sweep_configs_per_s"] / results["b_numpy_masked_configs_per_s"]
        results[f"{key}_vs_python"] = results[f"{key}_configs_per_s"] / results["a_python_loop_configs_per_s"]
    results["exact_vs_damped"] = results["d_exact_configs_per_s"] / results["c_damped_configs_per_s"]
    results["exact_vs_damped_sweep"] = results["d_exact_sweep_configs_per_s"] / results["c_damped_sweep_configs_per_s"]

    if args.huge:
        with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as tmp:
            results["huge"] = huge(args.huge, Path(tmp) / "huge.zarr")

    name = f"bench_sweep_{device.platform}{'_quick' if args.quick else ''}"
    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    for key, value in results.items():
        print(f"{key:42s} {value:,.3f}" if isinstance(value, float) else f"{key:42s} {value}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
