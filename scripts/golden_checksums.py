"""Checksums of the outputs the restructuring must not change (tests/test_golden.py).

Each case computes one public result and hashes every variable, coordinate and (stable)
attribute bit for bit. Run ``python scripts/golden_checksums.py --write`` only when an output
is meant to change; the test compares against ``tests/golden/checksums.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden" / "checksums.json"
# attributes that record when or with what a result was made, not what it is
VOLATILE_ATTRS = ("created", "jaxpareto_version", "jax_version")


def _digest(values) -> str:
    array = np.asarray(values)
    if array.dtype.kind in "OUS":
        payload = "\x1f".join(map(str, array.ravel().tolist())).encode()
    else:
        payload = np.ascontiguousarray(array).tobytes()
    return hashlib.sha256(f"{array.dtype.str}{array.shape}".encode() + payload).hexdigest()[:20]


def dataset_checksums(ds: xr.Dataset) -> dict[str, str]:
    """name -> digest for every data variable, coordinate and stable attribute."""
    out = {f"var:{name}": _digest(ds[name].values) for name in sorted(ds.data_vars)}
    out.update({f"coord:{name}": _digest(ds[name].values) for name in sorted(ds.coords)})
    out.update({f"dims:{name}": str(ds[name].dims) for name in sorted(ds.variables)})
    attrs = {k: v for k, v in ds.attrs.items() if k not in VOLATILE_ATTRS}
    out["attrs"] = hashlib.sha256(json.dumps(attrs, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return out


def table_checksums(table: pd.DataFrame) -> dict[str, str]:
    return {f"column:{name}": _digest(table[name].to_numpy()) for name in table.columns}


# commands whose printed output must not change (lines with timings are left out)
CLI_RUNS = (("catalog", "--sources"), ("validate",), ("optimize", "sweeps/code_agent_slo.toml"),
            ("sweep", "chat"), ("size", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--sessions", "200",
                                "--slo", "ttft_ms<=2000"))
_TIMING = re.compile(r"wall time|configs/s| in [0-9.]+ s")


def _cli_stdout(argv) -> str:
    from jaxpareto.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        main(list(argv))
    return "\n".join(line for line in buffer.getvalue().splitlines() if not _TIMING.search(line))


def cases() -> dict:
    """Each golden case: name -> a function returning its checksums."""
    import jaxpareto as jp
    from jaxpareto.definitions.spec import load_spec

    def default_sweep():
        return dataset_checksums(jp.sweep(**load_spec().sweep_kwargs()))

    def shared_lru_tier():
        return dataset_checksums(jp.sweep(
            gpu=["h100-sxm", "b200"], model=["llama-3.1-70b", "deepseek-v3"], tp=[4, 8],
            concurrency=[1, 8, 32, 128, 512], think_time_s=[2.0, 30.0], context_tokens=[16384, 65536],
            hit_rate=[0.0, 0.9], prefill_model="shared", cache_model="lru", pause_distribution="lognormal",
            pause_sigma=1.2, tier_capacity_gb=256.0, tier_bandwidth_gbs=64.0))

    def session():
        return dataset_checksums(jp.session_sweep(
            gpu="h100-sxm", model="llama-3.1-70b", tp=[4, 8], concurrency=[1, 16, 64, 128], think_time_s=2.0,
            hit_rate=0.9, initial_context_tokens=16384, turns=8, osl=128, tool_tokens=2000,
            kv_demand="synchronised", prices={"input_per_mtok": 3, "cached_input_per_mtok": 0.3,
                                              "output_per_mtok": 15, "gpu_hour": 2.5}))

    def optimize_batch():
        return dataset_checksums(jp.optimize(
            gpu=["h100-sxm", "h200-sxm"], model=["llama-3.1-70b", "qwen3-32b"], think_time_s=[2.0],
            context_tokens=[16384, 65536], hit_rate=[0.9], constraints={"ttft_ms": ("<=", 2000)},
            tp=(1, 2, 4, 8), concurrency=(1, 512)))

    def optimize_gradient():
        return dataset_checksums(jp.optimize(
            gpu=["h100-sxm"], model=["llama-3.1-70b"], think_time_s=[2.0], context_tokens=[32768],
            hit_rate=[0.9], constraints={"tpot_ms": ("<=", 60)}, tp=(4, 8), concurrency=(1, 4096),
            method="gradient", steps=60, starts=3))

    def validate_table():
        return table_checksums(jp.validate())

    def cli_text():
        return {" ".join(argv): _digest(_cli_stdout(argv)) for argv in CLI_RUNS}

    return {"cli_text": cli_text, "default_sweep": default_sweep, "shared_lru_tier": shared_lru_tier, "session": session,
            "optimize_batch": optimize_batch, "optimize_gradient": optimize_gradient,
            "validate_table": validate_table}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN.name} (else compare)")
    args = parser.parse_args(argv)
    got = {name: fn() for name, fn in cases().items()}
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
        return 0
    want = json.loads(GOLDEN.read_text())
    bad = [f"{case}/{key}" for case in want for key in want[case] if got.get(case, {}).get(key) != want[case][key]]
    print("identical" if not bad else "differs: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
