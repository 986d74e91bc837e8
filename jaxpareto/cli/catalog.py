"""``jaxpareto catalog [--sources]``: the catalog's GPUs and models."""

from __future__ import annotations

import argparse

import pandas as pd

from jaxpareto.definitions import catalog


def _cmd_catalog(args: argparse.Namespace) -> int:
    gpus = pd.DataFrame([g.model_dump(exclude={"sources"}) for g in catalog.gpus().values()])
    models = pd.DataFrame(
        [{**m.model_dump(exclude={"sources"}), "kv_bytes_per_token": int(m.kv_bytes_per_token)}
         for m in catalog.models().values()]
    ).convert_dtypes()
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print("GPUs (memory GB, bandwidth GB/s, dense TFLOPS, interconnect GB/s one way):")
        print(gpus.to_string(index=False, na_rep="-"))
        print("\nModels (params in billions, KV bytes per token):")
        shown = models.dropna(axis=1, how="all")
        print(shown.astype(object).where(shown.notna(), "-").to_string(index=False))
    if args.sources:
        print("\nSources:")
        for kind, entries in (("gpu", catalog.gpus()), ("model", catalog.models())):
            for name, entry in entries.items():
                for field, source in entry.sources.items():
                    print(f"  {kind} {name}.{field}: {source}")
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("catalog", help="list the catalog's GPUs and models")
    p.add_argument("--sources", action="store_true", help="also print where every value comes from")
    p.set_defaults(func=_cmd_catalog)
    return p
