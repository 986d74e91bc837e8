"""Command line: ``jaxpareto COMMAND`` (README, "Command line"), one module per command, each
with a ``register(subparsers)``.

Every input is checked before anything is computed or written; errors print one line
``jaxpareto: error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jaxpareto.cli import calibrate, catalog, metrics, optimize, pareto, plot, presets, size, sweep, validate
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.version import __version__

COMMANDS = (sweep, pareto, optimize, size, presets, catalog, metrics, plot, validate, calibrate)  # --help order


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxpareto", description="Agent-serving Pareto sweeps in JAX.")
    parser.add_argument("--version", action="version", version=f"jaxpareto {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        args = build_parser().parse_args(argv)  # a renamed option raises JaxparetoError here
        for name in ("out", "csv"):  # an empty path would read as none given, and write nothing
            if getattr(args, name, None) == "":
                raise JaxparetoError(f"--{name}", "is empty: give a path")
        return args.func(args)
    except JaxparetoError as error:  # the library's hints name its keywords; here, the option
        print(f"jaxpareto: error: {str(error).replace('overwrite=True (CLI: --overwrite)', '--overwrite')}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line; a store keeps every block finished so far
        if getattr(args, "overwrite", False):  # run again as it was, it would start over
            print("jaxpareto: interrupted; run the same command again without --overwrite to resume a sweep "
                  "written with --out (finished blocks are kept; with --overwrite it starts over)", file=sys.stderr)
        else:
            print("jaxpareto: interrupted; run the same command again to resume a sweep written with --out "
                  "(finished blocks are kept; a session or reduced sweep's store is written whole at the end, "
                  "and was not written)", file=sys.stderr)
        return 130
    except OSError as error:  # unreadable or unwritable files: one line, not a traceback
        if isinstance(error, BrokenPipeError):  # output piped into `head` and closed early
            sys.stderr.close()
            return 0
        print(f"jaxpareto: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
