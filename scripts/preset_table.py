"""Rebuild the README table "Where the presets land" (section "Agent sessions, presets and costs").

For every shipped preset, runs ``jaxpareto sweep NAME --out DIR/NAME.zarr`` (a session sweep),
opens the stored dataset and, at the preset's headline cell (``[report] headline``, recorded in
the store's ``report`` attribute), takes the best configuration by tasks/s among those whose
sessions all fit in KV memory for a whole task (``concurrency <= task_concurrency_eff``, the rule
``jaxpareto sweep`` prints as "most tasks/s"). Prints the README's Markdown table: operational
intensity and prefill share at the headline's turn, the GPU's ridge point and tasks/s.

Run time: about 35 s on a 2-core CPU (about 5 s per preset, most of it start-up and
compilation), so there is no --quick; ``--presets`` picks a subset.

Usage: python scripts/preset_table.py [--presets chat,code_agent] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

from _common import jaxpareto_command, markdown_table, run, timed

HEADER = ["preset", "GPU, model", "best config", "intensity (FLOP/byte)", "ridge", "prefill share", "tasks/s"]
# The README's spelling of catalog names (others fall back to the catalog name).
GPU_NAMES = {"h100-sxm": "H100", "h200-sxm": "H200", "a100-sxm-80gb": "A100", "b200": "B200", "gb200": "GB200",
             "b300": "B300", "l40s": "L40S", "mi300x": "MI300X", "mi325x": "MI325X", "mi355x": "MI355X"}
MODEL_NAMES = {"llama-3.1-8b": "Llama-3.1-8B", "llama-3.1-70b": "Llama-3.1-70B", "llama-3.1-70b-fp8": "Llama-3.1-70B FP8",
               "llama-3.1-405b": "Llama-3.1-405B", "llama-3.1-405b-fp8": "Llama-3.1-405B FP8", "qwen3-32b": "Qwen3-32B",
               "qwen3-235b-a22b": "Qwen3-235B-A22B", "deepseek-v3": "DeepSeek-V3", "kimi-k2.5": "Kimi-K2.5",
               "gpt-oss-120b": "gpt-oss-120b", "mixtral-8x7b": "Mixtral-8x7B", "qwen3-next-80b-a3b": "Qwen3-Next-80B-A3B",
               "qwen3.5-397b-a17b": "Qwen3.5-397B-A17B", "minimax-m2.5": "MiniMax-M2.5",
               "llama-4-maverick": "Llama-4-Maverick", "gemma-3-27b": "Gemma-3-27B",
               "nemotron-3-nano-30b-a3b": "Nemotron-3-Nano-30B-A3B"}
# The README's row order: the seed's presets, then the trace-based ones.
ORDER = ["chat", "code_agent", "research_agent", "deep_reasoning", "tracelab_claude_code", "swebench_pro_codex",
         "exgentic", "hybrid_code_agent"]


def shipped_presets() -> list[str]:
    """Preset names from ``jaxpareto presets`` (first word of each listed line), in the README's order."""
    out = run([*jaxpareto_command(), "presets"], quiet=True)
    names = [line.split()[0] for line in out.splitlines() if line.strip() and not line.startswith("run one")]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def tasks_format(value: float) -> str:
    return f"{value:.3g}" if value >= 1 else f"{value:.3f}"


def preset_row(name: str, store: Path) -> list[str]:
    """Run one preset into ``store`` and return its table row."""
    run([*jaxpareto_command(), "sweep", name, "--out", str(store), "--overwrite"], quiet=True)
    ds = xr.open_zarr(store)
    headline = json.loads(ds.attrs["report"])["headline"]
    turn = headline.pop("turn")
    cell = ds.sel(headline).load()
    cell = cell.squeeze([d for d in ("engine",) if d in cell.dims and cell.sizes[d] == 1], drop=True)
    fits = (cell.task_concurrency_eff >= 1) & (cell.concurrency <= cell.task_concurrency_eff)
    best = cell.tasks_per_s.where(fits)
    if not bool(best.notnull().any()):
        return [name, f"{GPU_NAMES.get(headline['gpu'], headline['gpu'])}, "
                      f"{MODEL_NAMES.get(headline['model'], headline['model'])}", "none fits", "", "", "", ""]
    top = cell.isel(best.argmax(dim=["tp", "concurrency"]))
    at_turn = top.sel(turn=turn)
    return [
        name,
        f"{GPU_NAMES.get(headline['gpu'], headline['gpu'])}, {MODEL_NAMES.get(headline['model'], headline['model'])}",
        f"TP {int(top.tp)}, C {int(top.concurrency)}",
        f"{float(at_turn.operational_intensity):,.0f}",
        f"{float(top.ridge_point):,.0f}",
        f"{float(at_turn.prefill_share):.2f}",
        tasks_format(float(top.tasks_per_s)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", help="comma-separated preset names (default: every shipped preset)")
    parser.add_argument("--keep", metavar="DIR", help="keep the preset stores in DIR (default: a temporary folder)")
    args = parser.parse_args()
    names = args.presets.split(",") if args.presets else shipped_presets()
    rows = []
    with tempfile.TemporaryDirectory(prefix="jaxpareto-presets-") as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        with timed("presets"):
            for name in names:
                rows.append(preset_row(name, folder / f"{name}.zarr"))
    print(markdown_table(HEADER, rows))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
