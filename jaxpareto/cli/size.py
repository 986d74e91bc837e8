"""``jaxpareto size``: the fewest GPUs (replicas x TP) serving a target load under SLOs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import pandas as pd

from jaxpareto.cli._common import FLOAT_FORMAT, add_solver_option
from jaxpareto.definitions.axes import AXIS_BY_NAME, TP_CHOICES
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.settings import Workload
from jaxpareto.search.sizing import size_deployment


def _parse_slo(items: Sequence[str]) -> dict:
    constraints = {}
    for item in items or []:
        for op in ("<=", ">="):
            name, sep, limit = item.partition(op)
            if sep:
                try:
                    constraints[name.strip()] = (op, float(limit))
                except ValueError:
                    raise JaxparetoError("--slo", f"not a number in {item!r}") from None
                break
        else:
            raise JaxparetoError("--slo", f"expected NAME<=LIMIT or NAME>=LIMIT, got {item!r}")
    return constraints


def _cmd_size(args: argparse.Namespace) -> int:
    try:
        tp = tuple(int(t) for t in args.tp.split(","))
    except ValueError:
        raise JaxparetoError("--tp", f"expected comma-separated integers, got {args.tp!r}") from None
    result = size_deployment(
        args.gpu, args.model, args.think_time_s, args.context_tokens, args.hit_rate, sessions=args.sessions,
        turns_per_s=args.turns_per_s, constraints=_parse_slo(args.slo), tp=tp,
        concurrency=(1, args.max_concurrency), osl=args.osl, delta_tokens=args.delta_tokens, engine=args.engine,
        **({"calibration": args.calibration} if args.calibration else {}),
        **({"solver": args.solver} if args.solver else {}))
    target = f"{args.sessions} concurrent sessions" if args.sessions else f"{args.turns_per_s} turns/s"
    if result.feasible:
        print(f"{target} of {args.model} on {args.gpu}: {result.gpus} GPUs = {result.replicas} replicas x TP "
              f"{result.tp}, {result.sessions_per_replica} sessions and {result.turns_per_s_per_replica:,.2f} turns/s "
              "per replica")
    else:
        print(f"{target} of {args.model} on {args.gpu}: not possible ({result.reason})")
    with pd.option_context("display.width", 250, "display.float_format", FLOAT_FORMAT):
        print("\n" + result.options.to_string(index=False))
    return 0 if result.feasible else 1


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("size", help="fewest GPUs (replicas x TP) serving a target load under SLOs")
    p.add_argument("--gpu", required=True)
    p.add_argument("--model", required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--sessions", type=int, help="target concurrent agent sessions")
    target.add_argument("--turns-per-s", type=float, help="target turn rate")
    p.add_argument("--think-time-s", type=float, default=2.0)
    p.add_argument("--context-tokens", type=int, default=32768)
    p.add_argument("--hit-rate", type=float, default=0.9)
    p.add_argument("--osl", type=float, default=Workload.osl)
    p.add_argument("--delta-tokens", type=float, default=Workload.delta_tokens)
    p.add_argument("--slo", action="append", metavar="NAME<=LIMIT", help="an SLO, e.g. ttft_ms<=2000 (repeatable)")
    p.add_argument("--tp", default=",".join(map(str, TP_CHOICES)),
                   help=f"TP choices per replica (default {','.join(map(str, TP_CHOICES))})")
    p.add_argument("--max-concurrency", type=int, default=4096, help="most sessions per replica searched")
    p.add_argument("--engine", default=AXIS_BY_NAME["engine"].default,
                   help="serving engine: seed (default: the seed's memory and factors), vllm, sglang or trtllm")
    p.add_argument("--calibration", metavar="FILE.toml",
                   help="a calibration file or a shipped one's name (hopper-measured); its profile is adopted")
    add_solver_option(p)
    p.set_defaults(func=_cmd_size)
    return p
