"""Limits real servers have: heads that split over TP, contexts within the model's maximum; each
infeasible point says why, and a single configuration no server runs is a named error."""

import itertools

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.physics.limits import (CONTEXT_TOO_LONG, FEASIBLE, HEADS_DO_NOT_SPLIT, NO_SESSION_FITS,
                                      WEIGHTS_EXCEED_MEMORY, heads_split)

MODELS = jp.catalog.models()


def test_every_reason_in_one_sweep():
    ds = jp.sweep(gpu="h100-sxm", model=["llama-3.1-8b", "llama-3.1-405b"], tp=[1, 3, 8, 64],
                  concurrency=[1, 4096], context_tokens=[8192, 131072], hit_rate=0.0).squeeze()
    reason = ds.infeasible_reason
    assert int(reason.sel(model="llama-3.1-8b", tp=3, concurrency=1, context_tokens=8192)) == HEADS_DO_NOT_SPLIT
    assert int(reason.sel(model="llama-3.1-8b", tp=64, concurrency=1, context_tokens=8192)) == HEADS_DO_NOT_SPLIT
    # 131,072 + 128 output tokens is beyond Llama-3.1's 131,072
    assert int(reason.sel(model="llama-3.1-8b", tp=8, concurrency=1, context_tokens=131072)) == CONTEXT_TOO_LONG
    assert int(reason.sel(model="llama-3.1-405b", tp=1, concurrency=1, context_tokens=8192)) == WEIGHTS_EXCEED_MEMORY
    assert int(reason.sel(model="llama-3.1-8b", tp=1, concurrency=1, context_tokens=8192)) == FEASIBLE
    # the limits outrank memory, and feasible is exactly reason 0, with every performance output NaN
    np.testing.assert_array_equal(ds.feasible.values, reason.values == FEASIBLE)
    assert np.isnan(ds.tpot_ms.where(~ds.feasible)).all()
    assert reason.attrs["flag_meanings"].split()[reason.attrs["flag_values"].index(CONTEXT_TOO_LONG)] == \
        "context_beyond_model_maximum"


def test_no_session_fits_is_its_own_reason():
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=2, concurrency=1, context_tokens=126_976).squeeze()
    assert int(ds.infeasible_reason) == NO_SESSION_FITS and float(ds.concurrency_max) == 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_rule_in_the_physics_is_the_rule_in_python(name):
    model = MODELS[name]
    params = model.to_params()
    for tp in range(1, 129):
        assert bool(heads_split(params, jnp.float32(tp))) == (model.tp_error(tp) is None), (name, tp)


def test_hybrid_state_heads_split_too():
    model = MODELS["nemotron-3-nano-30b-a3b"]  # 32 attention heads, 2 KV heads, 64 Mamba heads
    assert model.tp_error(8) is None and model.tp_error(64) is not None
    assert "recurrent" in MODELS["qwen3-next-80b-a3b"].model_copy(update={"attention_heads": 32}).tp_error(32)


def test_single_configuration_errors_name_the_field():
    with pytest.raises(jp.JaxparetoError, match=r"tp: no TP choice shards llama-3.1-70b.*allowed: 1, 2, 4, 8"):
        jp.optimize("h100-sxm", "llama-3.1-70b", tp=(3, 5))
    with pytest.raises(jp.JaxparetoError, match="context_tokens: 1000000 .* 131,072"):
        jp.optimize("h100-sxm", "llama-3.1-70b", context_tokens=1_000_000)
    with pytest.raises(jp.JaxparetoError, match="context_tokens"):
        jp.size_deployment("h100-sxm", "llama-3.1-70b", sessions=10, context_tokens=2_000_000)
    best = jp.optimize("h100-sxm", "llama-3.1-70b", tp=(3, 4, 8), concurrency=(1, 64))
    assert best.feasible and best.tp in (4, 8)  # an invalid choice among valid ones is skipped


def test_a_batch_flags_instead_of_raising():
    ds = jp.optimize(["h100-sxm"], ["llama-3.1-8b"], context_tokens=[8192, 1_000_000], tp=(1, 2),
                     concurrency=(1, 16))
    assert bool(ds.feasible.sel(context_tokens=8192).all()) and not bool(ds.feasible.sel(context_tokens=1_000_000).any())


@pytest.mark.parametrize("tp, heads, kv", list(itertools.product([1, 2, 3, 4, 6, 8, 16], [32, 64], [1, 8])))
def test_heads_rule(tp, heads, kv):
    model = jp.Model(name="m", params_total_b=1.0, layers=2, kv_heads=kv, head_dim=64, attention_heads=heads)
    assert (model.tp_error(tp) is None) == (heads % tp == 0 and (kv % tp == 0 or tp % kv == 0))


def test_cli_tables_write_csv_and_share_one_slo_syntax(tmp_path, capsys):
    from jaxpareto.cli import main

    out = tmp_path / "size.csv"
    assert main(["size", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--sessions", "10", "--slo", "ttft_ms=2000",
                 "--max-concurrency", "64", "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "scenario: think time 2 s, context 32,768 tokens, hit rate 0.9, OSL 128" in printed
    assert "SLOs: ttft_ms <= 2000" in printed and out.read_text().startswith("tp,capacity")
    assert main(["optimize", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--slo", "ttft_ms<=2000",
                 "--slo", "output_tokens_per_s_per_user>=20", "--max-concurrency", "64",
                 "--csv", str(tmp_path / "best.csv")]) == 0
    assert "binding:" in capsys.readouterr().out
    assert (tmp_path / "best.csv").read_text().startswith("gpu,model,tp,concurrency")
    assert main(["optimize", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--objective", "ttft_ms",
                 "--sense", "min", "--max-concurrency", "64", "--csv", str(tmp_path / "fastest.csv")]) == 0
    capsys.readouterr()
    best, fastest = (pd.read_csv(tmp_path / name).iloc[0] for name in ("best.csv", "fastest.csv"))
    assert fastest["concurrency"] == 1 and fastest["ttft_ms"] < best["ttft_ms"]
    assert main(["catalog", "--csv", str(tmp_path / "catalog.csv")]) == 0
    assert "qwen3-next-80b-a3b" in (tmp_path / "catalog.csv").read_text()
    assert main(["size", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--sessions", "1",
                 "--slo", "ttft_ms", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "--slo" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


def test_optimize_table_fits_100_columns(capsys):
    from pathlib import Path

    from jaxpareto.cli import main

    spec = Path(__file__).resolve().parents[1] / "sweeps" / "code_agent_slo.toml"
    assert main(["optimize", str(spec)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100 and any(line.lstrip().startswith("gpu") for line in lines)


def test_spec_and_one_scenario_flags_do_not_mix(tmp_path, capsys):
    from pathlib import Path

    from jaxpareto.cli import main

    spec = Path(__file__).resolve().parents[1] / "sweeps" / "code_agent_slo.toml"
    assert main(["optimize", str(spec), "--slo", "ttft_ms<=1"]) == 2
    assert "--slo" in capsys.readouterr().err
    assert main(["optimize", str(spec), "--sense", "min"]) == 2
    assert "--sense" in capsys.readouterr().err
    assert main(["optimize", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--slo", "ttft_ms<=100",
                 "--slo", "ttft_ms>=5"]) == 2
    assert "given twice" in capsys.readouterr().err
    bad = tmp_path / "prices.toml"  # a partial [prices] table is refused before the sweep runs
    bad.write_text('[grid]\ngpu = ["h100-sxm"]\nmodel = ["llama-3.1-8b"]\ntp = [1]\nconcurrency = [1]\n'
                   '[prices]\ninput_per_mtok = 3.0\n')
    assert main(["sweep", str(bad)]) == 2
    assert "prices" in capsys.readouterr().err
