"""``jaxpareto size``: the fewest GPUs (replicas x TP) serving a target load under SLOs."""

from __future__ import annotations

import argparse
import textwrap

import pandas as pd

from jaxpareto.cli._common import (FLOAT_FORMAT, add_csv_option, add_scenario_options, add_solver_option,
                                   check_file_out, describe_scenario, prefill_model_of, prefill_overcommit_note,
                                   scenario_kwargs, write_csv)
from jaxpareto.search.sizing import size_deployment


def _cmd_size(args: argparse.Namespace) -> int:
    if args.csv:
        check_file_out(args.csv, "--csv", args.overwrite)
    result = size_deployment(sessions=args.sessions, turns_per_s=args.turns_per_s, **scenario_kwargs(args),
                             **({"solver": args.solver} if args.solver else {}))
    print(textwrap.fill(describe_scenario(args), width=100, subsequent_indent="  "))
    target = f"{args.sessions} concurrent sessions" if args.sessions else f"{args.turns_per_s} turns/s"
    if result.feasible:
        print(textwrap.fill(f"{target} of {args.model} on {args.gpu}: {result.gpus} GPUs = {result.replicas} "
                            f"{'replica' if result.replicas == 1 else 'replicas'} x TP {result.tp}, {result.sessions_per_replica} sessions and "
                            f"{result.turns_per_s_per_replica:,.2f} turns/s per replica", width=100,
                            subsequent_indent="  "))
    else:
        print(textwrap.fill(f"{target} of {args.model} on {args.gpu}: not possible ({result.reason})", width=100,
                            subsequent_indent="  "))
    with pd.option_context("display.width", 250, "display.float_format", FLOAT_FORMAT):
        # as `optimize` shows what does not apply: NaN and the None of a column of counts alike
        shown = result.options.apply(lambda column: column.where(column.notna(), "-") if column.dtype == object
                                     else column)
        print("\n" + shown.to_string(index=False, na_rep="-"))
    if result.note:
        print(textwrap.fill(result.note, width=100, subsequent_indent="  "))
    if result.feasible:
        chosen = result.options[result.options["tp"].eq(result.tp)].iloc[0]
        note = prefill_overcommit_note(float(chosen["gpu_utilization"]), prefill_model_of(args))
        if note:
            print(textwrap.fill(note, width=100, subsequent_indent="  "))
    write_csv(result.options, args.csv, args.overwrite, "TP options")
    return 0 if result.feasible else 1


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("size", help="fewest GPUs (replicas x TP) serving a target load under SLOs")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--sessions", type=int, help="target concurrent agent sessions")
    target.add_argument("--turns-per-s", type=float, help="target turn rate")
    add_scenario_options(p, required=True)
    add_csv_option(p, "the table of TP options")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    add_solver_option(p)
    p.set_defaults(func=_cmd_size)
    return p
