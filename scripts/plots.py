"""Rebuild the plots the README describes (section "Measurements", **Plots.**): per GPU and
model, the Pareto frontier with one curve per think time, standard serving against an agent with
and without prefix caching, and the KV memory wall, as PNG files in a folder.

Runs two sweeps with the ``jaxpareto`` command and draws every plot each supports with
``jaxpareto plot``:

- ``OUT/sweep/``: the default sweep (``jaxpareto sweep``, the seed's code agent over 4 GPUs x 5
  models): frontier, cache comparison and memory wall against context for each GPU x model;
- ``OUT/sessions/``: the ``code_agent`` preset as whole sessions: the same plots per turn, with
  the memory wall against turn.

Run time on a 2-core CPU: about 1.5 minutes (a few seconds per sweep; most of it drawing about
80 PNGs). ``--quick`` draws only H100 x Llama-3.1-70B (about 15 s).

Usage: python scripts/plots.py OUT [--quick] [--dpi 120] [--size 8x5] [--keep-stores]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _common import jaxpareto_command, run, timed

QUICK_SEL = ["--sel", "gpu=h100-sxm", "--sel", "model=llama-3.1-70b"]
SWEEPS = {"sweep": [], "sessions": ["code_agent"]}  # output folder -> `jaxpareto sweep` arguments


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="folder for the PNG files (created; existing PNGs of the same name are replaced)")
    parser.add_argument("--quick", action="store_true", help="only H100 x Llama-3.1-70B (checks the script)")
    parser.add_argument("--dpi", default="120", help="passed to `jaxpareto plot` (default 120)")
    parser.add_argument("--size", default="8x5", help="passed to `jaxpareto plot`: WIDTHxHEIGHT inches (default 8x5)")
    parser.add_argument("--keep-stores", action="store_true", help="keep the sweeps' zarr stores in OUT/stores")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = jaxpareto_command()
    written = 0
    with tempfile.TemporaryDirectory(prefix="jaxpareto-plots-") as tmp:
        stores = out / "stores" if args.keep_stores else Path(tmp)
        stores.mkdir(exist_ok=True)
        for folder, spec in SWEEPS.items():
            store = stores / f"{folder}.zarr"
            with timed(f"{folder}: sweep and plots"):
                run([*cmd, "sweep", *spec, "--out", str(store), "--overwrite"], quiet=True)
                log = run([*cmd, "plot", str(store), "--out", str(out / folder), "--dpi", args.dpi, "--size",
                           args.size, *(QUICK_SEL if args.quick else [])], quiet=True)
            print(log.rstrip())
            written += len(list((out / folder).glob("*.png")))
    print(f"\n{written} PNG files under {out}" + (" (--quick: H100 x Llama-3.1-70B only)" if args.quick else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
