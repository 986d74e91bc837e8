#!/usr/bin/env bash
# The benchmark suite on a GPU machine: every benchmark on one GPU, then the sweep benchmark
# on all local GPUs (the grid is sharded over them, jaxpareto/mapper.py), writing
# benchmarks/results/*_gpu.json (and bench_sweep_gpu_all.json). The README's GPU figures come
# from these files.
#
# Needs a jax with CUDA in the Python it runs (default .venv/bin/python; set PYTHON to another):
#   .venv/bin/pip install -U 'jax[cuda12]'
# Usage: scripts/gpu_bench.sh [--quick]   (--quick: the benchmarks' smaller grids, a smoke run)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
QUICK=()
[[ "${1:-}" == "--quick" ]] && QUICK=(--quick)

platform=$("$PY" -c 'import jax; print(jax.devices()[0].platform)')
if [[ "$platform" != "gpu" ]]; then
    echo "gpu_bench.sh: JAX sees no GPU (platform '$platform'); install jax with CUDA, e.g." \
         "pip install -U 'jax[cuda12]'" >&2
    exit 1
fi
count=$("$PY" -c 'import jax; print(len(jax.devices()))')
echo "JAX sees $count GPU(s): $("$PY" -c 'import jax; print(jax.devices()[0].device_kind)')"

# JAX takes 75 % of GPU memory up front by default; the benchmarks measure their own peaks
export XLA_PYTHON_CLIENT_PREALLOCATE=false

echo "== one GPU"
for bench in bench_sweep bench_models bench_optimize; do
    CUDA_VISIBLE_DEVICES=0 "$PY" "benchmarks/$bench.py" "${QUICK[@]}"
done

if (( count > 1 )); then
    echo "== all $count GPUs (bench_sweep)"
    suffix=$([[ ${#QUICK[@]} -gt 0 ]] && echo _quick || true)
    single="benchmarks/results/bench_sweep_gpu${suffix}.json"
    cp "$single" "$single.one"
    "$PY" benchmarks/bench_sweep.py "${QUICK[@]}"
    mv "$single" "benchmarks/results/bench_sweep_gpu_all${suffix}.json"
    mv "$single.one" "$single"
fi
echo "written: $(ls benchmarks/results/*_gpu*.json | tr '\n' ' ')"
