"""Print the README's "The dataset" variables table from the schema: every variable of a sweep
with its ``units`` and its ``long_name`` (the README's "meaning" column is worded by hand, so the
third column differs), and with ``--check README.md`` compare the README's table with it: a
variable missing on either side or with other units is reported, and the exit status is 1.

Run time: about 5 s (one one-point sweep, whose dataset carries the schema's attributes).

Usage: python scripts/dataset_variables.py [--check README.md]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import jaxpareto as jp
from _common import markdown_table

HEADER = ["variable", "units", "meaning"]


def schema() -> dict[str, tuple[str, str, str]]:
    """variable -> (units, long_name, dtype kind) of a one-point sweep, in the dataset's order."""
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1, think_time_s=0.0,
                  context_tokens=4096, hit_rate=0.0, percentiles=True)
    return {name: (str(ds[name].attrs.get("units", "")), str(ds[name].attrs.get("long_name", "")), ds[name].dtype.kind)
            for name in ds.data_vars}


def readme_table(path: Path) -> dict[str, str]:
    """variable -> units of the README table headed ``| variable | units | meaning |``."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("| variable | units |")), None)
    if start is None:
        sys.exit(f"{path}: no table headed '| variable | units | meaning |'")
    out = {}
    for line in lines[start + 2:]:
        if not line.strip().startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for name in re.findall(r"`([a-z_0-9]+)`", cells[0]):
            out[name] = cells[1]
    return out


def check(path: Path, variables: dict) -> list[str]:
    documented = readme_table(path)
    problems = [f"`{name}` is in the dataset but not in the README's table" for name in variables if name not in documented]
    problems += [f"`{name}` is in the README's table but not in the dataset" for name in documented if name not in variables]
    for name, units in documented.items():
        if name in variables:
            want, _, kind = variables[name]
            if units != want and not (units == "bool" and kind == "b"):
                problems.append(f"`{name}`: README says units {units!r}, the schema {want!r}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", metavar="README.md", help="compare this file's variables table with the schema")
    args = parser.parse_args()
    variables = schema()
    rows = [[f"`{name}`", "bool" if kind == "b" else units, long_name] for name, (units, long_name, kind) in variables.items()]
    print(markdown_table(HEADER, rows))
    if args.check:
        problems = check(Path(args.check), variables)
        print()
        print("\n".join(problems) if problems else f"{args.check}: every variable is listed, with the schema's units")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
