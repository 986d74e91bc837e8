"""Speed of this working tree against an earlier revision, in one run (not part of CI).

Exports the revision with ``git archive`` into a temporary folder and times the same sweeps
through the public API (``jp.sweep``) for both trees, in alternating child processes on the same
machine, so that load and thermal state affect both alike. Each variant of
``bench_models.py`` (the seed's damped and exact solvers, TTL, shared prefill, LRU, lognormal
LRU, shared + LRU + host tier) is compiled once, then the best of ``--repeat`` steady-state calls
is kept; the ratio new / old is printed per variant (> 1: this tree is faster).

Usage: python benchmarks/compare_revisions.py REV [--quick] [--repeat N] [--rounds N] [--variants a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
import jaxpareto as jp
sys.path.insert(0, {bench!r})
from bench_models import VARIANTS, grid

g = grid({quick})
out = {{}}
for name, options in VARIANTS.items():
    if {only!r} and name not in {only!r}:
        continue
    if "solver" in options:
        try:
            jp.sweep(**{{**g, "concurrency": [1]}}, **options, variables=["tpot_ms"])
        except TypeError:  # revisions before the solver= spelling
            options = {{"method": options["solver"]}}
    jp.sweep(**g, **options)
    best = np.inf
    for _ in range({repeat}):
        start = time.perf_counter()
        ds = jp.sweep(**g, **options)
        best = min(best, time.perf_counter() - start)
    out[name] = ds.feasible.size / best
print(json.dumps(out))
"""


def _rates(tree: Path, quick: bool, repeat: int, only: list[str]) -> dict[str, float]:
    code = CHILD.format(bench=str(ROOT / "benchmarks"), quick=quick, repeat=repeat, only=only)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tempfile.gettempdir(),
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"timing {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--quick", action="store_true", help="bench_models.py's smaller grid")
    parser.add_argument("--repeat", type=int, default=3, help="steady-state calls per variant (best kept)")
    parser.add_argument("--rounds", type=int, default=2, help="old/new alternations (best kept per tree)")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(["git", "archive", args.rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        best: dict[str, dict[str, float]] = {"old": {}, "new": {}}
        for _ in range(args.rounds):
            for label, tree in (("old", old), ("new", ROOT)):
                only = [v for v in args.variants.split(",") if v]
                for name, rate in _rates(tree, args.quick, args.repeat, only).items():
                    best[label][name] = max(rate, best[label].get(name, 0.0))
    print(f"{'variant':28s} {args.rev[:12]:>14s} {'this tree':>14s}  new/old")
    for name, rate in best["new"].items():
        before = best["old"][name]
        print(f"{name:28s} {before / 1e6:11.3f} M/s {rate / 1e6:11.3f} M/s  x{rate / before:.3f}")


if __name__ == "__main__":
    main()
