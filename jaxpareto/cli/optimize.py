"""``jaxpareto optimize``: the best TP and concurrency under SLOs, for every scenario of a spec
(``jaxpareto optimize SPEC``, its ``[optimize]`` table) or for one scenario given as flags
(``jaxpareto optimize --gpu h100-sxm --model llama-3.1-70b --slo 'ttft_ms<=2000'``)."""

from __future__ import annotations

import argparse
import textwrap
import time

import numpy as np
import pandas as pd

from jaxpareto.cli._common import (FLOAT_FORMAT, SearchMethod, add_csv_option, add_output_options,
                                   add_scenario_options, add_solver_option, check_file_out, describe_scenario,
                                   new_output, prefill_model_of, prefill_overcommit_note, scenario_kwargs, write_csv)
from jaxpareto.dataset.store import to_zarr
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.options import DP_PREFILLS, SEARCH_METHODS, SERVING_MODES
from jaxpareto.definitions.schema import best_sense
from jaxpareto.definitions.settings import Workload
from jaxpareto.definitions.spec import load_spec
from jaxpareto.search.constraints import NUMERIC_OUTPUTS
from jaxpareto.search.optimize import optimize

#: Short column names of the printed table (the CSV keeps the dataset's names).
SHORT = {"think_time_s": "Z_s", "context_tokens": "L", "hit_rate": "h", "tp": "TP", "concurrency": "C",
         "output_tokens_per_s_per_user": "tok/s/user", "output_tokens_per_s_per_gpu": "tok/s/GPU"}
SHOWN = ("ttft_ms", "output_tokens_per_s_per_user")  # TPOT = 1000 / tok/s/user; in the CSV


def _short(binding: str) -> str:
    """A binding constraint with the outputs' short names."""
    for name in ("output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu"):
        binding = binding.replace(name, SHORT[name])
    return binding


def _wrapped(text: str) -> str:
    return textwrap.fill(text, width=100, subsequent_indent="  ")


def _print_table(ds, csv: str | None, overwrite: bool) -> None:
    """One row per scenario, at most about 100 characters wide: constant axes go to a header
    line, long names are abbreviated (legend printed), and infeasible scenarios' reasons are
    listed below the table. ``--csv`` gets every column under its full name."""
    full = ds.to_dataframe().reset_index()  # every column, for --csv
    dims = [d for d in ds.feasible.dims]
    constant = {d: full[d].iloc[0] for d in dims if full[d].nunique() == 1}
    if constant:
        print(_wrapped("every scenario: " + ", ".join(f"{d} {v}" for d, v in constant.items())))
    table = full.drop(columns=[*constant, "feasible", "reason"])
    table["binding"] = table["binding"].map(_short)
    metrics = [c for c in SHOWN if c in table and c != ds.attrs["objective"]]
    table = table[[*[d for d in dims if d not in constant], "tp", "concurrency", "value", *metrics, "binding"]]
    table = table.rename(columns=SHORT)
    legend = [f"{s} = {n}" for n, s in SHORT.items() if s in table.columns and n not in ("tp",)]
    print(_wrapped(f"value = {ds.attrs['objective']}; " + ", ".join(legend)))
    with pd.option_context("display.width", 100, "display.max_rows", 1000, "display.max_colwidth", 30,
                           "display.float_format", FLOAT_FORMAT):
        print(table.to_string(index=False, na_rep="-"))
    infeasible = full[~full["feasible"].astype(bool)]
    for _, row in infeasible.iterrows():
        where = ", ".join(f"{d} {row[d]}" for d in dims if d not in constant) or "the scenario"
        print(_wrapped(f"infeasible: {where}: {row['reason']}"))
    write_csv(full, csv, overwrite, "scenarios")


def _one_scenario(args: argparse.Namespace) -> int:
    args.sense = args.sense or best_sense(args.objective)  # the direction taken, for the search and the print
    kwargs = scenario_kwargs(args)
    for option in ("method", "solver"):
        if getattr(args, option):
            kwargs[option] = getattr(args, option)
    if args.gpu_budget is not None:
        if args.top < 1:
            raise JaxparetoError("--top", f"must be at least 1, got {args.top}")
        return _budget(args, kwargs)
    for flag, given in (("--serving", args.serving is not None), ("--top", args.top != 5),
                        ("--local-prefill-tokens", args.local_prefill_tokens is not None),
                        ("--kv-link-gbs", args.kv_link_gbs is not None),
                        ("--expert-imbalance", args.expert_imbalance is not None),
                        ("--dp-prefill", args.dp_prefill is not None)):
        if given:
            raise JaxparetoError(flag, "compares the layouts of a GPU budget: give --gpu-budget with it")
    result = optimize(objective=args.objective, sense=args.sense, **kwargs)
    print(_wrapped(describe_scenario(args)))
    if not result.feasible:
        print(_wrapped(f"{args.model} on {args.gpu}: nothing meets the SLOs ({result.reason})"))
        write_csv(pd.DataFrame([{"gpu": args.gpu, "model": args.model, "feasible": False, "reason": result.reason}]),
                  args.csv, args.overwrite, "scenario")
        return 1
    metrics = {k: v for k, v in result.metrics.items() if k in SHOWN}
    print(_wrapped(f"{args.model} on {args.gpu}: TP {result.tp}, concurrency {result.concurrency}: "
                   f"{args.sense} {result.objective} {result.value:,.4g}; "
                   + ", ".join(f"{k} {v:,.4g}" for k, v in metrics.items())))
    print(f"binding: {', '.join(result.binding) or 'none'} ({result.method} search)")
    note = prefill_overcommit_note(result.metrics["gpu_utilization"], prefill_model_of(args))
    if note:
        print(_wrapped(note))
    row = pd.DataFrame([{"gpu": args.gpu, "model": args.model, "tp": result.tp, "concurrency": result.concurrency,
                         result.objective: result.value, **result.metrics, "binding": "; ".join(result.binding)}])
    write_csv(row, args.csv, args.overwrite, "scenario")
    return 0


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _budget(args: argparse.Namespace, kwargs: dict) -> int:
    """--gpu-budget: the best layouts of each serving mode filling the budget, best first
    (`jaxpareto.search.budget`)."""
    serving = [mode.strip() for mode in args.serving.split(",")] if args.serving else None
    for name in ("local_prefill_tokens", "kv_link_gbs", "expert_imbalance", "dp_prefill"):
        if getattr(args, name) is not None:
            kwargs[name] = getattr(args, name)
    result = optimize(objective=args.objective, sense=args.sense, gpu_budget=args.gpu_budget, serving=serving,
                      **kwargs)
    print(_wrapped(describe_scenario(args)))
    table = result.layouts
    modes = list(dict.fromkeys(table["serving"]))
    left_out = [t for t in kwargs["tp"] if args.gpu_budget % t]  # the --tp choices scenario_kwargs parsed
    if left_out and "aggregated" in modes:
        print(_wrapped(f"aggregated TP {', '.join(map(str, left_out))} left out: "
                       f"{'they do' if len(left_out) > 1 else 'it does'} not divide {args.gpu_budget} GPUs into whole "
                       "replicas"))
    seed = not kwargs.get("calibration") and args.engine == "seed"
    if seed and modes != ["aggregated"]:
        print(_wrapped("note: under the seed's equations a prefill never delays a decode step, which favours "
                       "aggregated serving; compare the modes with an engine and its calibration (--engine vllm "
                       "--calibration hopper-measured)"))
    shown = ["layout", "replicas", "concurrency", "sessions", args.objective, "ttft_ms", "tpot_ms"]
    shown = [c for c in dict.fromkeys(shown) if c in table]
    print()
    print(_wrapped(f"best layouts of {args.gpu_budget} GPUs per serving mode ({args.sense} {args.objective}). A layout "
                   "is one replica, TP G, S pipeline stages of TP G (TP G x PP S), D attention-DP ranks of TP G "
                   "with the experts over E GPUs (DP D x TP G, EP E; EP 1: each expert split over them), or P "
                   "prefill workers and D decode workers "
                   "(PxTPg P + DxTPg D), repeated "
                   "`replicas` times; C/replica is sessions per replica, sessions (and requests/s, batch, "
                   "concurrency_max in --csv) are over the budget:"))
    for mode in modes:
        rows = table[table["serving"] == mode]
        feasible = rows[rows["feasible"].astype(bool)]
        print(f"\n{mode}: {len(feasible)} of {_plural(len(rows), 'layout')} meet the SLOs"
              + (f", the best {min(args.top, len(feasible))}:" if len(feasible) else ""))
        if mode == "conditional":
            threshold = kwargs.get("local_prefill_tokens", Workload.local_prefill_tokens)
            print(_wrapped(f"  (a turn with at most {threshold:,.0f} tokens to prefill after its prefix hit prefills "
                           "on its decode worker: --local-prefill-tokens)"))
        if len(feasible):
            top = feasible.head(args.top)
            printed = top[shown].rename(columns={**SHORT, "concurrency": "C/replica"})
            with pd.option_context("display.width", 100, "display.float_format", FLOAT_FORMAT):
                print(printed.to_string(index=False))
            for _, row in top.iterrows():
                print(_wrapped(f"  {row['layout']} x {row['replicas']}: binding: {_short(row['binding']) or 'none'}"))
        for reason, count in rows.loc[~rows["feasible"].astype(bool), "reason"].value_counts().items():
            print(_wrapped(f"  {count} infeasible: {reason}"))
    print()
    if result.feasible:
        where = f"TP {result.tp}" if result.serving == "aggregated" else \
            (f"{_plural(result.prefill_workers, 'prefill worker')} of TP {result.prefill_tp} + "
             f"{_plural(result.decode_workers, 'decode worker')} of TP {result.tp}")
        if result.dp_attention is not None:
            where = f"{result.dp_attention} attention-DP ranks of TP {result.tp}, EP {result.ep}" \
                if result.dp_attention > 1 else f"TP {result.tp}"
            if result.pp > 1:
                where += f", {result.pp} pipeline stages"
        print(_wrapped(f"best: {result.serving}, {where}, x {_plural(result.replicas, 'replica')} ({result.gpus_used} "
                       f"GPUs), concurrency {result.concurrency} per replica: {result.objective} {result.value:,.4g}"))
    else:
        print(f"no layout of {args.gpu_budget} GPUs meets the SLOs")
    write_csv(table, args.csv, args.overwrite, "layouts")
    return 0 if result.feasible else 1


def _scenario_defaults() -> dict:
    """The one-scenario flags' defaults (those flags are refused with a spec when changed)."""
    parser = argparse.ArgumentParser()
    add_scenario_options(parser, required=False)
    parser.add_argument("--objective", default="output_tokens_per_s_per_gpu")
    parser.add_argument("--sense", default=None)
    parser.add_argument("--gpu-budget", type=int, default=None)
    parser.add_argument("--serving", default=None)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--local-prefill-tokens", type=float, default=None)
    parser.add_argument("--kv-link-gbs", type=float, default=None)
    parser.add_argument("--expert-imbalance", type=float, default=None)
    parser.add_argument("--dp-prefill", default=None)
    return {k: v for k, v in vars(parser.parse_args([])).items() if k not in ("gpu", "model", "calibration")}


def _cmd_optimize(args: argparse.Namespace) -> int:
    flags = args.gpu is not None or args.model is not None
    if flags == (args.spec is not None):
        raise JaxparetoError("spec", "give a spec (jaxpareto optimize SPEC) or one scenario as --gpu and --model, "
                                     "not both" if flags else "give a spec, or --gpu and --model")
    if args.csv:
        check_file_out(args.csv, "--csv", args.overwrite)
    set_flags = [f"--{name.replace('_', '-')}" for name, default in _scenario_defaults().items()
                 if getattr(args, name) != default]
    if not flags and set_flags:
        verb = "describe" if len(set_flags) > 1 else "describes"
        raise JaxparetoError(set_flags[0], f"{', '.join(set_flags)} {verb} one scenario given by --gpu and --model; "
                                           "a spec's scenarios and SLOs come from the spec")
    if flags:
        if args.gpu is None or args.model is None:
            raise JaxparetoError("--gpu/--model", "one scenario needs both")
        if args.out:
            raise JaxparetoError("--out", "writes a store of a spec's scenarios; for one scenario use --csv")
        return _one_scenario(args)
    spec = load_spec(args.spec)
    kwargs = spec.optimize_kwargs()
    for option in ("method", "solver"):
        if getattr(args, option):
            kwargs[option] = getattr(args, option)
    if args.calibration:
        kwargs["calibration"] = args.calibration
    out = new_output(args)
    start = time.perf_counter()
    ds = optimize(**kwargs)
    elapsed = time.perf_counter() - start
    if out is not None:
        to_zarr(ds, out, overwrite=args.overwrite)
    cells = int(ds.feasible.size)
    print(f"spec: {args.spec}")
    if spec.description:
        print(f"  {spec.description}")
    print(_wrapped(f"{ds.attrs['sense']} {ds.attrs['objective']} subject to {ds.attrs['constraints'] or 'memory only'}"
                   f"; TP in {ds.attrs['tp_choices']}, concurrency in {ds.attrs['concurrency_range']}"))
    print(f"{cells:,} scenarios in {elapsed:.2f} s ({ds.attrs['method']} search), {int(np.sum(ds.feasible)):,} "
          f"feasible{f'; written to {out}' if out else ''}\n")
    _print_table(ds, args.csv, args.overwrite)
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("optimize", help="best TP and concurrency under SLOs: every scenario of a spec, or one "
                                               "given as flags")
    p.add_argument("spec", nargs="?", help="spec TOML with [grid] scenarios and an [optimize] table (or give "
                                           "--gpu and --model)")
    add_scenario_options(p, required=False)
    p.add_argument("--objective", default="output_tokens_per_s_per_gpu", choices=NUMERIC_OUTPUTS, metavar="OUTPUT",
                   help="output to optimise, one scenario (default output_tokens_per_s_per_gpu)")
    p.add_argument("--sense", default=None, choices=("max", "min"),
                   help="maximise or minimise the objective, one scenario (default: minimise a latency *_ms or a "
                        "cost *_usd, maximise any other)")
    p.add_argument("--gpu-budget", type=int, metavar="GPUS",
                   help="one scenario: fill this many GPUs with replicas of each layout (a TP choice dividing it, "
                        "attention-DP ranks for a MoE model, or prefill and decode pools) and rank the layouts (the best concurrency per replica of each)")
    p.add_argument("--serving", metavar="MODES",
                   help="with --gpu-budget: the serving modes compared, comma-separated among "
                        f"{', '.join(SERVING_MODES)} (default aggregated,disaggregated)")
    p.add_argument("--top", type=int, default=5, metavar="N",
                   help="with --gpu-budget: the layouts shown per serving mode (default 5; --csv writes all)")
    p.add_argument("--local-prefill-tokens", type=float, metavar="TOKENS",
                   help="with --serving conditional: a turn with at most this many tokens to prefill prefills on "
                        f"its decode worker (default {Workload.local_prefill_tokens:,.0f})")
    p.add_argument("--kv-link-gbs", type=float, metavar="GBS",
                   help="disaggregated layouts: the KV transfer link per GPU, one way [GB/s] (default: the "
                        "catalog's NVLink within a node, the NIC beyond it)")
    p.add_argument("--expert-imbalance", type=float, metavar="F",
                   help="attention-DP layouts of a MoE model with whole experts (EP > 1): the routed tokens the "
                        "busiest GPU receives over the mean (default 1.0)")
    p.add_argument("--dp-prefill", choices=DP_PREFILLS,
                   help="attention-DP layouts: the ranks schedule their prefills independently (SGLang, vLLM; "
                        "default) or aligned (TensorRT-LLM's attention-DP balancing)")
    add_output_options(p, "zarr store for the optimum per scenario of a spec")
    add_csv_option(p, "the table")
    p.add_argument("--method", action=SearchMethod, metavar="{" + ",".join(SEARCH_METHODS) + "}",
                   help="search method (default: the spec's, or auto)")
    add_solver_option(p)
    p.set_defaults(func=_cmd_optimize)
    return p
