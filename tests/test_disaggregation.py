"""Disaggregated and conditional serving against the float64 reference and the model's own
limits (docs/model.md, "Disaggregated serving")."""

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.physics.disaggregation import kv_transfer_ms
from reference import reference_disaggregated, reference_point

OUTPUTS = ("ttft_ms", "tpot_ms", "latency_ms", "batch_eff", "turns_per_s", "output_tokens_per_s_per_gpu")
GRID = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=[4, 8], prefill_tp=[2, 4], prefill_workers=[1, 3],
            decode_workers=[1, 2], concurrency=[1, 16, 96], think_time_s=[0.0, 5.0], context_tokens=[8192, 32768],
            hit_rate=[0.0, 0.9])


@pytest.fixture(scope="module")
def disaggregated():
    return jp.sweep(**GRID, serving="disaggregated", dtype="float64")


def test_disaggregated_matches_the_float64_reference(disaggregated):
    ds = disaggregated
    gpu, model = jp.catalog.gpus()["h100-sxm"].to_dict(), jp.catalog.models()["llama-3.1-70b"].to_dict()
    checked = 0
    names = ("tp", "prefill_tp", "prefill_workers", "decode_workers", "concurrency", "think_time_s",
             "context_tokens", "hit_rate")
    for values in itertools.product(*(GRID[n] for n in names)):
        c = dict(zip(names, values))
        got = ds.sel(c).squeeze()
        ref = reference_disaggregated(gpu, model, **c)
        assert bool(got.feasible) == ref["feasible"], c
        if not ref["feasible"]:
            continue
        assert bool(got.converged), c
        assert int(got.concurrency_eff) == ref["concurrency_eff"], c
        for name in OUTPUTS:
            np.testing.assert_allclose(float(got[name]), ref[name], rtol=2e-5, err_msg=f"{name} at {c}")
        checked += 1
    assert checked > 200


def test_float32_converges_where_the_prefill_pool_saturates():
    # 32K-token misses prefilled on one TP 2 worker: the pool, not decode, bounds the throughput
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=8, prefill_tp=2, concurrency=[8, 16, 46],
                  think_time_s=5.0, context_tokens=32768, serving="disaggregated").squeeze()
    assert ds.converged.all()
    gpu, model = jp.catalog.gpus()["h100-sxm"].to_dict(), jp.catalog.models()["llama-3.1-70b"].to_dict()
    prefill_s = reference_disaggregated(gpu, model, 8, 2, 1, 1, 1, 5.0, 32768, 0.0)
    one = 32768 * reference_point(gpu, model, 2, 1, 5.0, 32768, 0.0)["_ms_per_token"] / 1e3
    turns = ds.turns_per_s.values
    # at saturation the turns/s approach the prefill worker's rate 1 / S from below
    assert (turns <= 1 / one).all() and turns[-1] > 0.97 / one and prefill_s["ttft_ms"] < ds.ttft_ms.values[-1]
    np.testing.assert_allclose(ds.ttft_ms.values, [reference_disaggregated(gpu, model, 8, 2, 1, 1, c, 5.0, 32768, 0.0)
                                                   ["ttft_ms"] for c in (8, 16, 46)], rtol=1e-3)


def test_kv_transfer_by_hand():
    # Llama-3.1-70B: 327,680 B of KV per token over 8 KV heads; 10,000 tokens from TP 2 to TP 4:
    # each prefill GPU sends half, 1.6384 GB, the slower side, over 450 GB/s plus 20 µs
    model = jp.catalog.models()["llama-3.1-70b"].to_params()
    got = float(kv_transfer_ms(model, 10_000.0, 2.0, 4.0, 450.0, 20.0))
    assert got == pytest.approx(0.02 + 10_000 * 327_680 / 2 / 1e9 / 450 * 1e3, rel=1e-6)


def test_more_prefill_workers_never_lengthen_ttft():
    # over one link (3 workers would otherwise put the replica beyond the node, on the NIC)
    ttft = jp.sweep(**GRID, serving="disaggregated", dtype="float64", kv_link_gbs=450.0).ttft_ms
    one, three = ttft.sel(prefill_workers=1), ttft.sel(prefill_workers=3)
    both = np.isfinite(one) & np.isfinite(three)
    assert (three.values[both.values] <= one.values[both.values] * (1 + 1e-9)).all()
    assert (three.values[both.values] < 0.9 * one.values[both.values]).any()  # where the pool was loaded


def test_a_replica_beyond_the_node_sends_its_kv_over_the_nic():
    # 3 prefill workers of TP 4 and a decode worker of TP 8: 20 GPUs, beyond an 8-GPU node
    common = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=8, prefill_tp=4, concurrency=1, think_time_s=0.0,
                  context_tokens=32768, serving="disaggregated", dtype="float64")
    far = jp.sweep(**common, prefill_workers=3).ttft_ms.item()
    near = jp.sweep(**common, prefill_workers=3, kv_link_gbs=450.0).ttft_ms.item()
    gpu, model = jp.catalog.gpus()["h100-sxm"].to_dict(), jp.catalog.models()["llama-3.1-70b"].to_dict()
    ref = reference_disaggregated(gpu, model, 8, 4, 3, 1, 1, 0.0, 32768, 0.0)
    assert ref["transfer_ms"] == pytest.approx(32768 * 327_680 / 4 / 1e9 / 50 * 1e3)
    assert far == pytest.approx(ref["ttft_ms"], rel=1e-6) and far > near


@pytest.mark.slow
def test_conditional_disaggregation_limits():
    common = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=8, prefill_tp=4, prefill_workers=[1, 2],
                  concurrency=[4, 32], think_time_s=2.0, context_tokens=16384, hit_rate=[0.0, 0.8], dtype="float64")
    remote = jp.sweep(**common, serving="disaggregated")
    never_local = jp.sweep(**common, serving="conditional", local_prefill_tokens=0)
    for name in OUTPUTS:
        np.testing.assert_array_equal(never_local[name].values, remote[name].values)
    # every turn local: no transfer, no prefill pool; the prefill workers change only the GPU count
    all_local = jp.sweep(**common, serving="conditional", local_prefill_tokens=1e6)
    np.testing.assert_allclose(all_local.ttft_ms.sel(prefill_workers=1).values,
                               all_local.ttft_ms.sel(prefill_workers=2).values, rtol=1e-12)
    # hits (2,128 tokens) local, misses remote, against the reference
    mixed = jp.sweep(**common, serving="conditional")
    gpu, model = jp.catalog.gpus()["h100-sxm"].to_dict(), jp.catalog.models()["llama-3.1-70b"].to_dict()
    hits_local = jp.sweep(**common, serving="conditional", local_prefill_tokens=2128)  # the hits' 2,128 tokens
    for workers, c, h in itertools.product([1, 2], [4, 32], [0.0, 0.8]):
        at = dict(prefill_workers=workers, concurrency=c, hit_rate=h)
        ref = reference_disaggregated(gpu, model, 8, 4, workers, 1, c, 2.0, 16384, h, local_prefill_tokens=1000.0)
        ref_local = reference_disaggregated(gpu, model, 8, 4, workers, 1, c, 2.0, 16384, h, local_prefill_tokens=2128.0)
        np.testing.assert_allclose(mixed.ttft_ms.sel(at).item(), ref["ttft_ms"], rtol=2e-5)
        np.testing.assert_allclose(hits_local.tpot_ms.sel(at).item(), ref_local["tpot_ms"], rtol=2e-5)
        np.testing.assert_allclose(hits_local.ttft_ms.sel(at).item(), ref_local["ttft_ms"], rtol=2e-5)


def test_prefill_tp_zero_is_the_decode_tp():
    common = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=2, concurrency=8, context_tokens=8192,
                  serving="disaggregated")
    same = jp.sweep(**common).squeeze()
    explicit = jp.sweep(**common, prefill_tp=2).squeeze()
    for name in OUTPUTS:
        assert same[name].item() == explicit[name].item()


def test_either_pool_that_cannot_hold_the_model_is_infeasible():
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=4, prefill_tp=[1, 4], concurrency=8,
                  serving="disaggregated")
    assert not ds.feasible.sel(prefill_tp=1).item() and ds.feasible.sel(prefill_tp=4).item()
    assert ds.infeasible_reason.sel(prefill_tp=1).item() == 6  # the prefill worker cannot hold the weights
    decode_too_small = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=1, prefill_tp=4, concurrency=8,
                                serving="disaggregated")
    assert decode_too_small.infeasible_reason.item() == 3  # the decode worker's weights


def test_disaggregated_inputs_are_named():
    with pytest.raises(jp.JaxparetoError, match="prefill_tp.*disaggregated serving"):
        jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1, prefill_tp=2)
    with pytest.raises(jp.JaxparetoError, match="serving.*closed loop"):
        jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, request_rate=1.0, arrivals="poisson",
                 serving="disaggregated")
    with pytest.raises(jp.JaxparetoError, match="serving.*percentiles"):
        jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1, serving="disaggregated",
                 slo={"p99_ttft_ms": 1000})
    with pytest.raises(jp.JaxparetoError, match="local_prefill_tokens.*conditional"):
        jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1, serving="disaggregated",
                 local_prefill_tokens=500)
    with pytest.raises(jp.JaxparetoError, match="kv_link_gbs"):
        jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1, kv_link_gbs=100)


def test_a_stored_disaggregated_sweep_reads_back_with_its_axes(tmp_path):
    path = tmp_path / "d.zarr"
    written = jp.sweep_to_zarr(path, gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], prefill_tp=[1, 2],
                               prefill_workers=[1, 2], concurrency=[1, 8], serving="disaggregated", progress=False)
    back = jp.open_sweep(path)
    assert back.sizes["prefill_workers"] == 2 and back.prefill_tp.attrs["units"] == "GPUs"
    np.testing.assert_array_equal(back.ttft_ms.values, written.ttft_ms.values)
    front = jp.pareto_front(back)  # over every layout: tp, the load and the prefill pool
    assert set(front.dims) >= {"tp", "prefill_tp", "prefill_workers", "concurrency"}
    assert front.sum() >= 2 and front.sel(prefill_tp=2).any()


@pytest.mark.slow
def test_budget_search_finds_each_layouts_exhaustive_best():
    slo = {"ttft_ms": ("<=", 3000), "output_tokens_per_s_per_user": (">=", 20)}
    scenario = dict(gpu="h100-sxm", model="llama-3.1-70b", think_time_s=5.0, context_tokens=16384, hit_rate=0.5)
    best = jp.optimize(**scenario, constraints=slo, concurrency=(1, 48), gpu_budget=8, tp=(2, 4, 8))
    table = best.layouts
    assert set(table["serving"]) == {"aggregated", "disaggregated"}
    assert best.value == pytest.approx(table.loc[table["feasible"], "output_tokens_per_s_per_gpu"].max())
    checked = 0
    for _, row in table[table["serving"] != "aggregated"].iterrows():
        ds = jp.sweep(**scenario, tp=int(row.tp), prefill_tp=int(row.prefill_tp), prefill_workers=int(row.prefill_workers),
                      decode_workers=int(row.decode_workers), concurrency=list(range(1, 49)), serving=row.serving
                      ).squeeze()
        ok = (ds.feasible & ds.converged & (ds.concurrency <= ds.concurrency_max) & (ds.ttft_ms <= 3000)
              & (ds.output_tokens_per_s_per_user >= 20)).values
        assert ok.any() == row.feasible, row
        if row.feasible:
            brute = int(ds.concurrency.values[ok][np.argmax(ds.output_tokens_per_s_per_gpu.values[ok])])
            assert row.concurrency == brute and row.sessions == brute * row.replicas
            assert row["turns_per_s"] == pytest.approx(ds.turns_per_s.sel(concurrency=brute).item() * row.replicas,
                                                       rel=1e-6)
            checked += 1
    assert checked >= 2
    if best.serving != "aggregated":
        assert best.prefill_tp is not None and best.gpus_used == 8
    with pytest.raises(jp.JaxparetoError, match="serving.*under a GPU budget"):
        jp.optimize(**scenario, serving="disaggregated")
    with pytest.raises(jp.JaxparetoError, match="serving: unknown 'split'"):
        jp.optimize(**scenario, serving="split", gpu_budget=8)


@pytest.mark.slow
def test_measured_disaggregated_runs_are_predicted_by_the_disaggregated_model():
    from jaxpareto.measure.predict import prediction_fn
    from jaxpareto.measure.validation_set import load_validation_set, row_model

    rows = load_validation_set(Path(jp.__file__).parent / "data" / "aiconfigurator_silicon.csv")
    pooled = rows[rows["mode"].eq("disagg") & rows["unsupported"].eq("")]
    assert len(pooled) >= 100 and rows.loc[rows["mode"].eq("disagg") & rows["prefill_tp"].isna(), "unsupported"].ne("").all()
    # rows of one model, GPU and engine: one compiled sweep each way
    pooled = pooled[(pooled["model"] == pooled["model"].iloc[0]) & (pooled["gpu"] == pooled["gpu"].iloc[0])
                    & (pooled["engine"] == pooled["engine"].iloc[0])]
    aggregated = rows[rows["mode"].eq("agg") & rows["unsupported"].eq("") & (rows["model"] == pooled["model"].iloc[0])]
    sample = pd.concat([pooled.head(4), aggregated.head(2)])
    predicted = np.asarray(prediction_fn(sample, dtype="float32")(jp.Efficiency()))
    for (_, row), got in zip(sample.iterrows(), predicted):
        # the row's checkpoint under a name of its own (the catalog's name is for the catalog's numbers)
        model = row_model(row).model_copy(update={"name": f"{row.model}-row"})
        common = dict(gpu=row.gpu, model=model.name, tp=int(row.tp), concurrency=int(row.concurrency),
                      think_time_s=0.0, context_tokens=float(row.isl + row.osl / 2), hit_rate=1.0, osl=row.osl,
                      delta_tokens=row.isl, engine=row.engine or "seed", models=[model])
        if row["mode"] == "disagg":
            common.update(serving="disaggregated", prefill_tp=int(row.prefill_tp),
                          prefill_workers=int(row.prefill_workers), decode_workers=int(row.decode_workers))
        ds = jp.sweep(**common).squeeze()
        assert got == pytest.approx(ds[row.metric].item(), rel=1e-4), row.id
    # under Poisson arrivals they are unsupported, with the reason
    with_poisson = prediction_fn(sample, dtype="float32", options=jp.ModelOptions(arrivals="poisson"))
    assert "closed loop" in with_poisson.unsupported[0]


def test_a_lone_session_never_waits_for_the_prefill_pool():
    # the arrival theorem: one session queues behind no one, so more prefill workers change nothing
    common = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=4, prefill_tp=2, concurrency=1, think_time_s=0.0,
                  context_tokens=32768, serving="disaggregated", kv_link_gbs=450.0, dtype="float64")
    ttft = [jp.sweep(**common, prefill_workers=p).ttft_ms.item() for p in (1, 2, 3)]
    np.testing.assert_allclose(ttft, ttft[0], rtol=1e-12)
    gpu, model = jp.catalog.gpus()["h100-sxm"].to_dict(), jp.catalog.models()["llama-3.1-70b"].to_dict()
    alone = 32768 * reference_point(gpu, model, 2, 1, 0.0, 32768, 0.0)["_ms_per_token"] + 32768 * 327_680 / 2e9 / 450e-3
    assert ttft[0] == pytest.approx(alone, rel=1e-9)  # the prefill alone and the transfer, no wait


def test_the_disaggregated_spec_plans_its_pools(tmp_path):
    from jaxpareto.dataset.plan import plan_sweep
    from jaxpareto.definitions.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "disaggregated_agent.toml")
    plan = plan_sweep(**spec.sweep_kwargs())
    assert plan.options.serving == "disaggregated" and plan.options.profile == "measured"
    assert plan.dims[:7] == ("gpu", "model", "engine", "tp", "prefill_tp", "prefill_workers", "decode_workers")
    aggregated = tmp_path / "agg.toml"
    aggregated.write_text('[grid]\ngpu = "h100-sxm"\nmodel = "llama-3.1-8b"\ntp = [1]\nconcurrency = [1]\n'
                          'prefill_workers = [1, 2]\n')
    with pytest.raises(jp.JaxparetoError, match="prefill_workers: is an axis of disaggregated serving"):
        plan_sweep(**load_spec(aggregated).sweep_kwargs())


def test_a_replicated_latent_is_sent_to_every_decode_gpu():
    # DeepSeek-V3's MLA latent is whole on each of the 8 decode GPUs: one prefill GPU sends 8 copies
    model = jp.catalog.models()["deepseek-v3"].to_params()
    one_to_eight = float(kv_transfer_ms(model, 10_000.0, 1.0, 8.0, 450.0, 0.0))
    eight_to_eight = float(kv_transfer_ms(model, 10_000.0, 8.0, 8.0, 450.0, 0.0))
    assert one_to_eight == pytest.approx(8 * eight_to_eight, rel=1e-6)


def test_one_prefill_and_one_decode_worker_over_a_free_link_is_aggregated_serving_without_interference():
    common = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=4, think_time_s=30.0, context_tokens=16384, hit_rate=0.9,
                  dtype="float64")
    pools = dict(serving="disaggregated", prefill_tp=4, prefill_workers=1, decode_workers=1, kv_link_gbs=1e12)
    # one session: the same prefill, no wait, a free transfer; decode at the same (tiny) batch
    agg, dis = (jp.sweep(**common, concurrency=1, **extra).squeeze() for extra in ({}, pools))
    assert dis.ttft_ms.item() == pytest.approx(agg.ttft_ms.item(), rel=1e-9)
    assert dis.tpot_ms.item() == pytest.approx(agg.tpot_ms.item(), rel=1e-3)
    # many sessions under the chunked-prefill engine: aggregated decode steps carry prefill chunks,
    # a decode worker's never do
    agg, dis = (jp.sweep(**common, concurrency=32, prefill_model="shared", **extra).squeeze() for extra in ({}, pools))
    decode_only = jp.sweep(**common, concurrency=32).squeeze()  # isolated prefill: no chunk in a step
    assert dis.tpot_ms.item() < agg.tpot_ms.item()
    assert dis.tpot_ms.item() <= decode_only.tpot_ms.item() * (1 + 1e-9)  # b <= B: fewer sessions decode
