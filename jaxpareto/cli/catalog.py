"""``jaxpareto catalog [--sources]``: the catalog's GPUs and models."""

from __future__ import annotations

import argparse

import pandas as pd

from jaxpareto.cli._common import add_csv_option, check_file_out, write_csv
from jaxpareto.definitions import catalog


def _cmd_catalog(args: argparse.Namespace) -> int:
    if args.csv:
        check_file_out(args.csv, "--csv", args.overwrite)
    gpus = pd.DataFrame([g.model_dump(exclude={"sources", "engine_gemm"}) for g in catalog.gpus().values()])
    gpus = gpus[sorted(gpus.columns, key=lambda c: c.startswith("gemm_"))]  # name first, the measurements last
    kernels = pd.DataFrame(_kernel_rows())
    models = pd.DataFrame([_model_row(m) for m in catalog.models().values()]).convert_dtypes()
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print("GPUs (memory GB as the datasheet states it and as the driver reports it, bandwidth GB/s, dense TFLOPS, "
              "scale-up interconnect GB/s one way within scaleup_domain_gpus, scale-out GB/s one way beyond):")
        print(gpus.to_string(index=False, na_rep="-"))
        print("\nGEMM kernels per engine (the share of the dense peak large GEMMs reach and the offset m_0 in tokens "
              "that each engine's own kernels measured, per precision; the GPU's values above are the medians):")
        print(kernels.to_string(index=False, na_rep="-"))
        print("\nModels (params in billions; active without the untied input table, published: the publisher's "
              "figure; KV bytes per token of context; state MB per session whatever its length; layers by kind):")
        shown = models.dropna(axis=1, how="all")
        print(shown.astype(object).where(shown.notna(), "-").to_string(index=False))
    if args.csv:
        table = pd.concat([gpus.assign(kind="gpu"), kernels.rename(columns={"gpu": "name"}).assign(kind="engine_gemm"),
                           models.assign(kind="model")], ignore_index=True)
        write_csv(table[["kind", *[c for c in table.columns if c != "kind"]]], args.csv, args.overwrite,
                  "catalog entries")
    if args.sources:
        print("\nSources:")
        for kind, entries in (("gpu", catalog.gpus()), ("model", catalog.models())):
            for name, entry in entries.items():
                for field, source in entry.sources.items():
                    print(f"  {kind} {name}.{field}: {source}")
    return 0


def _kernel_rows() -> list[dict]:
    """One row per GPU and engine kernels it has measurements of (`Hardware.engine_gemm`)."""
    return [{"gpu": name, "kernels": kernels, **measured.model_dump()}
            for name, gpu in catalog.gpus().items() for kernels, measured in gpu.engine_gemm.items()]


def _layers(model) -> str:
    """``80 full``, ``36 linear + 12 full``, ``61 mla``: the layers by attention kind."""
    if model.attention == "mla":
        return f"{model.layers} mla"
    counts: dict[str, int] = {}
    for group in model.groups:
        kind = f"{group.attention}({group.window})" if group.window else group.attention
        counts[kind] = counts.get(kind, 0) + group.count
    return " + ".join(f"{n} {kind}" for kind, n in counts.items())


def _model_row(model) -> dict:
    """One row of the model table: the numbers the physics uses, not every field."""
    dtype = model.weight_dtype if model.expert_weight_dtype is None else f"{model.weight_dtype}/{model.expert_dtype}"
    return {
        "name": model.name,
        "params_total_b": round(model.params_total_b, 2),
        "params_active_b": round(model.params_active_b, 2),
        "published_active_b": model.params_active_published_b,
        "weights": dtype,
        "weights_gb": round(model.weight_memory_gb, 1),
        "experts": f"{model.experts_per_token}/{model.experts}" if model.is_moe else None,
        "layers": _layers(model),
        "kv_bytes_per_token": int(model.kv_bytes_per_token),
        "state_mb_per_session": round(model.state_bytes_per_sequence / 1e6, 1),
        "max_context_tokens": model.max_context_tokens,
    }


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("catalog", help="list the catalog's GPUs and models")
    p.add_argument("--sources", action="store_true", help="also print where every value comes from")
    add_csv_option(p, "the GPU, per-engine GEMM and model tables (one row per entry, a kind column: gpu, engine_gemm "
                      "with its kernels, model)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    p.set_defaults(func=_cmd_catalog)
    return p
