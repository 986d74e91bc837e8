"""``jaxpareto presets [--show NAME]``: the shipped workload presets, one line each, or one
preset's TOML text verbatim (to copy and edit)."""

from __future__ import annotations

import argparse
import importlib.resources
import sys

from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.spec import presets


def _preset_text(name: str) -> str:
    """The shipped preset's TOML file, as written (package data ``jaxpareto/data/presets``)."""
    shipped = presets()
    if name not in shipped:
        raise JaxparetoError("--show", f"no preset named {name!r}", shipped)
    return importlib.resources.files("jaxpareto").joinpath(f"data/presets/{name}.toml").read_text(encoding="utf-8")


def _cmd_presets(args: argparse.Namespace) -> int:
    if args.show is not None:
        sys.stdout.write(_preset_text(args.show))
        return 0
    for name, description in presets().items():
        print(f"{name:24s} {description}")
    print("\nrun one with: jaxpareto sweep NAME; print one (to copy and edit) with: jaxpareto presets --show NAME")
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("presets", help="list the shipped workload presets, one line each")
    p.set_defaults(func=_cmd_presets)
    p.add_argument("--show", metavar="NAME", help="print this preset's TOML file verbatim (to copy and edit)")
    return p
