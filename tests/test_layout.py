"""Attention data parallelism and expert parallelism (jaxpareto.physics.layout): memory by layout
against hand counts, a dense replica of D ranks as D TP groups, and the experts a replica reads."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpareto.definitions import catalog
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.physics.layout import expert_weights_gb, rank_model
from jaxpareto.physics.point import evaluate_point


@pytest.fixture(autouse=True)
def _float64():
    with jax.enable_x64(True):
        yield


def _f64(tree):
    return jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), tree)


def _evaluate(model, gpu, tp, concurrency, context, ranks=None):
    values = dict(gpu=_f64(catalog.gpus()[gpu].to_params()), model=_f64(catalog.models()[model].to_params()),
                  tp=jnp.float64(tp), concurrency=jnp.float64(concurrency), think_time_s=jnp.float64(2.0),
                  context_tokens=jnp.float64(context), hit_rate=jnp.float64(0.9))
    if ranks is not None:
        values["dp_attention"] = jnp.float64(ranks)
    return evaluate_point(GridPoint(**values), _f64(Workload()), _f64(Efficiency()),
                          _f64(Solver()), percentiles=False)


def test_mla_sessions_by_layout_against_a_hand_count():
    """DeepSeek-V3 on 8 H200 at 32K: TP 8 copies the MLA latent on all 8 GPUs; DP-attention 8 with
    EP 8 keeps one copy per session, on its own rank, and pays with 8 copies of the dense weights."""
    model = catalog.models()["deepseek-v3"]
    memory, context = 141.0, 32768
    latent_gb = context * model.kv_bytes_per_token / 1e9  # one copy of one session's latent
    weights, experts = model.weight_memory_gb, model.experts * model.expert_params_b * model.expert_weight_bytes
    tp8 = math.floor((8 * memory - weights) / (8 * latent_gb))
    rank = math.floor((memory - (weights - experts) - experts / 8) / latent_gb)
    out = _evaluate("deepseek-v3", "h200-sxm", 8, 1, context)
    assert int(out.concurrency_max) == tp8 == 24  # the figure
    out = _evaluate("deepseek-v3", "h200-sxm", 1, 1, context, ranks=8)
    assert int(out.concurrency_max) == 8 * rank
    assert 5.5 < 8 * rank / tp8 < 6.5  # "about 6x as many"


def test_a_dense_replica_of_two_ranks_is_two_tp_groups():
    one = _evaluate("llama-3.1-70b", "h100-sxm", 4, 16, 16384)
    two = _evaluate("llama-3.1-70b", "h100-sxm", 4, 32, 16384, ranks=2)
    for name in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_gpu", "kv_per_session_gb"):
        assert float(getattr(two, name)) == pytest.approx(float(getattr(one, name)), rel=1e-12), name
    for name in ("turns_per_s", "batch_eff"):
        assert float(getattr(two, name)) == pytest.approx(2 * float(getattr(one, name)), rel=1e-12), name
    assert int(two.concurrency_max) == 2 * int(one.concurrency_max) and int(two.concurrency_eff) == 32


def test_rank_model_reads_the_experts_of_the_whole_replica():
    from jaxpareto.physics.decode import experts_touched

    model = catalog.models()["deepseek-v3"].to_params()
    for ranks, batch in ((1, 5.0), (4, 3.0), (8, 40.0), (8, 2.0)):  # the seed's routing: min(D b K, E) / D
        rank = rank_model(model, jnp.float64(ranks), "seed")
        touched = experts_touched(jnp.float64(batch), rank.experts, rank.experts_per_token, "seed")
        assert float(touched) == pytest.approx(min(ranks * batch * model.experts_per_token, model.experts) / ranks)
    for ranks, batch in ((1, 5.0), (4, 3.0), (8, 40.0)):
        rank = rank_model(model, jnp.float64(ranks), "uniform")
        e, k = model.experts, model.experts_per_token
        touched_replica = e * (1 - (1 - k / e) ** (ranks * batch))  # the whole replica's batch
        touched_rank = float(rank.experts * (1 - (1 - rank.experts_per_token / rank.experts) ** batch))
        assert touched_rank == pytest.approx(touched_replica / ranks, rel=1e-12)
        dense = model.weights_gb - float(expert_weights_gb(model))
        assert float(rank.weights_gb) == pytest.approx(dense + float(expert_weights_gb(model)) / ranks, rel=1e-12)
    same = rank_model(model, jnp.float64(1.0), "uniform")
    assert float(same.experts_per_token) == model.experts_per_token and float(same.weights_gb) == model.weights_gb


@pytest.mark.parametrize("gpu, tp, link_gbs", [("h100-sxm", 8, 450.0), ("h100-sxm", 16, 50.0), ("b200", 16, 100.0),
                                               ("gb200", 16, 900.0), ("gb200", 72, 900.0), ("gb200", 144, 50.0)])
def test_a_tp_group_beyond_the_scaleup_domain_all_reduces_over_the_nics(gpu, tp, link_gbs):
    from jaxpareto.physics.communication import allreduce_time

    hw, model = _f64(catalog.gpus()[gpu].to_params()), _f64(catalog.models()["llama-3.1-70b"].to_params())
    got = allreduce_time(hw, model, jnp.float64(tp), jnp.float64(1.0), jnp.float64(0.0))
    ring = 2 * (tp - 1) / tp  # of the message per GPU, two all-reduces per layer, 16-bit activations
    want = 2 * float(model.layers) * ring * float(model.hidden_size) * 2 / (link_gbs * 1e9) * 1000
    assert float(got.per_token_ms) == pytest.approx(want, rel=1e-12)


# --- the layout axes (ep, dp_attention): exchange, imbalance, lockstep, limits --------------------

def _layout(ranks, ep):
    from jaxpareto.physics.layout import ReplicaLayout

    return ReplicaLayout(jnp.float64(ranks), jnp.float64(ep))


@pytest.mark.parametrize("routing", ["seed", "uniform"])
@pytest.mark.parametrize("tp, ranks, ep, link_gbs", [(1, 8, 8, 450.0), (1, 8, 1, 450.0), (2, 4, 8, 450.0),
                                                     (8, 8, 64, 50.0)])
def test_the_token_exchange_against_a_hand_count(routing, tp, ranks, ep, link_gbs):
    """DeepSeek-V3 on H200: each rank token reaches a GPU's expert group with probability q, twice
    per MoE layer (dispatch, combine), from the other D - 1 ranks; over NVLink within an 8-GPU
    node, the NIC beyond it."""
    from jaxpareto.physics.layout import expert_exchange

    model = catalog.models()["deepseek-v3"]
    hw = _f64(catalog.gpus()["h200-sxm"].to_params())
    k = model.experts_per_token
    q = min(k, ep) / ep if routing == "seed" else 1 - (1 - 1 / ep) ** k
    got = expert_exchange(hw, _f64(model.to_params()), jnp.float64(tp), _layout(ranks, ep), jnp.float64(1.0),
                          jnp.float64(7.0), jnp.float64(989.0), routing)
    want = model.layers * 2 * (ranks - 1) * q * model.hidden_size * 2 / (link_gbs * 1e9) * 1e3
    assert float(got.per_token_ms) == pytest.approx(want, rel=1e-12)
    assert float(got.fixed_ms) == pytest.approx(2 * model.layers * 7.0 / 1000, rel=1e-12)
    assert float(got.imbalance_compute_ms) == 0.0 and float(got.imbalance) == 1.0


def test_no_exchange_within_one_tp_group_or_for_a_dense_model_and_imbalance_only_with_whole_experts():
    from jaxpareto.physics.layout import expert_exchange

    hw = _f64(catalog.gpus()["h200-sxm"].to_params())
    moe, dense = _f64(catalog.models()["deepseek-v3"].to_params()), _f64(catalog.models()["llama-3.1-70b"].to_params())
    args = (jnp.float64(1.5), jnp.float64(7.0), jnp.float64(989.0))
    for model, tp, layout in ((moe, 8, _layout(1, 8)), (dense, 1, _layout(8, 1))):
        got = expert_exchange(hw, model, jnp.float64(tp), layout, *args)
        assert float(got.per_token_ms) == 0.0 and float(got.fixed_ms) == 0.0
    assert float(expert_exchange(hw, moe, jnp.float64(8), _layout(1, 1), *args).imbalance) == 1.0  # split experts
    got = expert_exchange(hw, moe, jnp.float64(8), _layout(1, 8), *args)
    model = catalog.models()["deepseek-v3"]
    flops = 2 * model.experts_per_token * model.expert_params_b * 1e9
    assert float(got.imbalance) == 1.5
    assert float(got.imbalance_compute_ms) == pytest.approx(0.5 * flops / (8 * 989e12) * 1e3, rel=1e-12)


def test_the_ranks_lockstep_in_the_shared_engine():
    """A rank decodes in prefill-length steps while its own or any other rank prefills:
    1 - (1 - ρ')(1 - ρ)^(D - 1) of the time; D = 1 is one TP group."""
    from jaxpareto.physics.decode import DecodeStep
    from jaxpareto.physics.engine import shared_turn

    step = DecodeStep(*(jnp.float64(v) for v in (10.0, 4.0, 3.0, 15.4, False)))
    args = (jnp.float64(20.0), jnp.float64(40.0), jnp.float64(3000.0), jnp.float64(256.0), jnp.float64(2048.0),
            jnp.float64(0.05), jnp.float64(0.4), jnp.float64(1.1))
    alone = shared_turn(step, *args)
    tpots = []
    for ranks in (1.0, 2.0, 8.0, 32.0):
        turn = shared_turn(step, *args, lockstep_ranks=jnp.float64(ranks))
        seen, rho = float(turn.seen_load), float(turn.prefill_load)
        mixed = 1 - (1 - seen) * (1 - rho) ** (ranks - 1)
        assert float(turn.mixed_share) == pytest.approx(mixed, rel=1e-12)
        t0, tf = float(turn.decode_step_ms), float(turn.mixed_step_ms)
        assert float(turn.tpot_ms) == pytest.approx(t0 * tf / (mixed * t0 + (1 - mixed) * tf), rel=1e-12)
        tpots.append(float(turn.tpot_ms))
    assert tpots[0] == pytest.approx(float(alone.tpot_ms), rel=1e-12)
    assert tpots == sorted(tpots) and tpots[-1] > 1.2 * tpots[0]


@pytest.mark.slow
def test_layout_axes_at_their_defaults_change_nothing():
    import jaxpareto as jp

    kw = dict(gpu="h200-sxm", model=["deepseek-v3", "llama-3.1-70b"], tp=[4, 8], concurrency=[1, 16, 128],
              context_tokens=[8192, 32768], hit_rate=[0.0, 0.9], think_time_s=2.0, profile="measured",
              prefill_model="shared", engine="sglang")
    base = jp.sweep(**kw)
    layout = ["pp", "ep", "dp_attention", "gpu_budget"]
    ones = jp.sweep(**kw, pp=1, ep=1, dp_attention=1, gpu_budget=8).squeeze(layout, drop=True)
    for name in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_gpu", "concurrency_max", "infeasible_reason"):
        assert float(abs(ones[name] / base[name] - 1).max()) < 2e-6, name  # float32 rounding of x / 1 + 0 ...
    assert "expert_imbalance" not in base.attrs and "dp_prefill" not in base.attrs
    assert ones.attrs["expert_imbalance"] == 1.0 and ones.attrs["dp_prefill"] == "independent"
    assert list(jp.plan_sweep(**kw, dp_attention=[1, 2]).dims)[:8] == ["gpu", "model", "engine", "tp", "pp", "ep",
                                                                       "dp_attention", "gpu_budget"]


def test_layouts_the_experts_or_gpus_cannot_take_are_infeasible_with_a_reason():
    import jaxpareto as jp
    from jaxpareto.physics.limits import LAYOUT_DOES_NOT_SPLIT, HEADS_DO_NOT_SPLIT, REASONS

    ds = jp.sweep(gpu="h200-sxm", model="deepseek-v3", tp=1, dp_attention=8, ep=[3, 8, 16], concurrency=64)
    assert ds.infeasible_reason.squeeze().values.tolist() == [LAYOUT_DOES_NOT_SPLIT, 0, LAYOUT_DOES_NOT_SPLIT]
    dense = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[3, 4], dp_attention=2, ep=[1, 2], concurrency=8)
    assert dense.infeasible_reason.squeeze().values.tolist() == [[HEADS_DO_NOT_SPLIT] * 2, [0, LAYOUT_DOES_NOT_SPLIT]]
    assert REASONS[LAYOUT_DOES_NOT_SPLIT] == "layout_does_not_split_model"
    labels = ds.infeasible_reason.attrs["flag_meanings"].split()
    assert labels[ds.infeasible_reason.attrs["flag_values"].index(LAYOUT_DOES_NOT_SPLIT)] == REASONS[LAYOUT_DOES_NOT_SPLIT]


def test_layout_settings_without_the_layout_axes_or_under_disaggregation_are_refused():
    import jaxpareto as jp
    from jaxpareto.definitions.errors import JaxparetoError

    kw = dict(gpu="h200-sxm", model="deepseek-v3", tp=8, concurrency=8)
    with pytest.raises(JaxparetoError, match="dp_attention"):
        jp.plan_sweep(**kw, dp_attention=[1, 8], serving="disaggregated")
    with pytest.raises(JaxparetoError, match="expert_imbalance.*layout axes"):
        jp.plan_sweep(**kw, expert_imbalance=1.3)
    with pytest.raises(JaxparetoError, match="dp_prefill.*dp_attention"):
        jp.plan_sweep(**kw, dp_prefill="aligned")
    with pytest.raises(JaxparetoError, match="dp_prefill"):
        jp.plan_sweep(**kw, dp_attention=8, dp_prefill="balanced")
    with pytest.raises(JaxparetoError, match="expert_imbalance"):
        jp.plan_sweep(**kw, ep=8, expert_imbalance=0.5)


def test_moe_memory_by_layout_against_a_hand_count():
    """Qwen3-235B (GQA, 4 KV heads) on H100: four attention-DP ranks of TP 2, the experts over all
    eight GPUs; each rank holds its dense weights whole, a quarter of the experts, its sessions."""
    model = catalog.models()["qwen3-235b-a22b"]
    context = 16384
    experts = model.experts * model.expert_params_b * model.expert_weight_bytes
    rank_weights = model.weight_memory_gb - experts + experts / 4
    per_session = context * model.kv_bytes_per_token / 1e9  # 2 GPUs <= 4 KV heads: no copy
    rank = math.floor((2 * 80.0 - rank_weights) / per_session)
    out = _evaluate("qwen3-235b-a22b", "h100-sxm", 2, 1, context, ranks=4)
    assert int(out.concurrency_max) == 4 * rank
    tp8 = math.floor((8 * 80.0 - model.weight_memory_gb) / (context * model.kv_bytes_per_token * 2 / 1e9))
    assert int(_evaluate("qwen3-235b-a22b", "h100-sxm", 8, 1, context).concurrency_max) == tp8  # r_kv = 8 / 4


@pytest.mark.slow
def test_expert_imbalance_slows_the_busiest_gpu():
    import jaxpareto as jp

    kw = dict(gpu="h200-sxm", model="deepseek-v3", tp=1, dp_attention=8, ep=8, concurrency=[8, 256],
              context_tokens=8192, hit_rate=0.9, profile="measured", prefill_model="shared", engine="sglang")
    even, skewed = jp.sweep(**kw), jp.sweep(**kw, expert_imbalance=1.5)
    assert bool((skewed.tpot_ms > even.tpot_ms).all()) and bool((skewed.ttft_ms > even.ttft_ms).all())
    assert skewed.concurrency_max.identical(even.concurrency_max)  # memory is not imbalanced


def test_deepseek_attention_dp_with_expert_parallelism_beats_tp8_at_high_concurrency():
    """The issue's goal on 8 H200: TP 8 admits 24 sessions of 32K (the latent on every GPU), DP 8
    with EP 8 about six times as many, and for a cached agent (h = 0.9, OSL 1,000) its throughput
    per GPU at high concurrency beats TP 8's (SGLang's DP attention: larger batches at high QPS),
    while TP 8 stays ahead at low concurrency (interactivity)."""
    import jaxpareto as jp

    ds = jp.sweep(gpu="h200-sxm", model="deepseek-v3", tp=[1, 8], dp_attention=[1, 8], ep=8,
                  concurrency=[4, 32, 128, 512], context_tokens=32768, hit_rate=0.9, think_time_s=0.0, osl=1000,
                  profile="measured", prefill_model="shared", engine="sglang", expert_routing="uniform")
    tp8, dp8 = ds.sel(tp=8, dp_attention=1).squeeze(), ds.sel(tp=1, dp_attention=8).squeeze()
    assert 5 < int(dp8.concurrency_max[0]) / int(tp8.concurrency_max[0]) < 6.5
    assert float(dp8.output_tokens_per_s_per_gpu.max()) > 1.3 * float(tp8.output_tokens_per_s_per_gpu.max())
    assert float(tp8.output_tokens_per_s_per_user[0]) > float(dp8.output_tokens_per_s_per_user[0])
    # without prefix hits every turn prefills 32K, and the ranks' lockstep spreads each prefill
    # over all eight ranks' decode steps: TP 8 leads
    cold = jp.sweep(gpu="h200-sxm", model="deepseek-v3", tp=[1, 8], dp_attention=[1, 8], ep=8,
                    concurrency=[4, 32, 128, 512], context_tokens=32768, hit_rate=0.0, think_time_s=0.0, osl=1000,
                    profile="measured", prefill_model="shared", engine="sglang", expert_routing="uniform")
    assert float(cold.sel(tp=8, dp_attention=1).output_tokens_per_s_per_gpu.max()) > \
        float(cold.sel(tp=1, dp_attention=8).output_tokens_per_s_per_gpu.max())


@pytest.mark.slow
def test_budget_search_ranks_attention_dp_layouts_at_their_exhaustive_best():
    """A MoE model's budget: each attention-DP layout's best concurrency is the brute-force best of
    a sweep of that layout, every layout fills the budget with whole replicas, and the optimum
    carries its ranks and expert parallelism."""
    import numpy as np
    import pandas as pd

    import jaxpareto as jp
    from jaxpareto.search.parallel import ParallelLayout, data_parallel_layouts

    assert data_parallel_layouts(8, (4, 8)) == [ParallelLayout(4, 1, 8, 2), ParallelLayout(4, 1, 1, 2)]
    scenario = dict(gpu="h200-sxm", model="deepseek-v3", think_time_s=2.0, context_tokens=32768, hit_rate=0.9,
                    osl=1000, profile="measured", prefill_model="shared", engine="sglang", expert_routing="uniform")
    best = jp.optimize(**scenario, concurrency=(1, 96), gpu_budget=8, tp=(2, 4, 8), serving="aggregated",
                       constraints={"tpot_ms": ("<=", 80)}, expert_imbalance=1.2)
    table = best.layouts
    ranked = table[table["dp_attention"].gt(1)]
    assert sorted(ranked["layout"]) == ["DP 2 x TP 2, EP 1", "DP 2 x TP 2, EP 4", "DP 2 x TP 4, EP 1",
                                        "DP 2 x TP 4, EP 8", "DP 4 x TP 2, EP 1", "DP 4 x TP 2, EP 8"]
    gpus = table["tp"] * table["dp_attention"].fillna(1) * table["pp"].fillna(1)
    assert (8 % gpus == 0).all() and (table["gpus_used"] <= 8).all()
    assert sorted(table.loc[table["pp"].gt(1), "layout"]) == ["TP 2 x PP 2", "TP 2 x PP 4", "TP 4 x PP 2"]
    assert ranked["feasible"].sum() >= 3
    for _, row in ranked.iterrows():
        skew = {"expert_imbalance": 1.2} if row.ep > 1 else {}  # whole experts only
        ds = jp.sweep(**scenario, tp=int(row.tp), dp_attention=int(row.dp_attention), ep=int(row.ep),
                      pp=int(row.pp), concurrency=list(range(1, 97)), **skew).squeeze()
        ok = (ds.feasible & ds.converged & (ds.concurrency <= ds.concurrency_max) & (ds.tpot_ms <= 80)).values
        assert ok.any() == row.feasible, row
        if row.feasible:
            brute = int(ds.concurrency.values[ok][np.argmax(ds.output_tokens_per_s_per_gpu.values[ok])])
            assert row.concurrency == brute
    top = table.iloc[0]
    assert best.value == pytest.approx(table.loc[table["feasible"], "output_tokens_per_s_per_gpu"].max())
    if pd.notna(top["dp_attention"]):
        assert (best.pp, best.dp_attention, best.ep, best.gpus_used) == \
            (int(top["pp"]), int(top["dp_attention"]), int(top["ep"]), 8)
    with pytest.raises(jp.JaxparetoError, match="expert_imbalance.*MoE model"):
        jp.optimize(gpu="h100-sxm", model="llama-3.1-70b", gpu_budget=8, serving="aggregated", expert_imbalance=1.2)
    with pytest.raises(jp.JaxparetoError, match="dp_prefill.*GPU budget"):
        jp.optimize(gpu="h200-sxm", model="deepseek-v3", dp_prefill="aligned")


# --- pipeline parallelism (pp) -------------------------------------------------------------------

def _pipeline(model_name, tp, stages, routing="seed", chunk=8192.0, tokens=20000.0, latency_us=0.0, overhead_ms=0.0):
    from jaxpareto.definitions.hardware import effective_tflops
    from jaxpareto.physics.costs import TurnTokens, tp_costs
    from jaxpareto.physics.layout import pipeline_costs

    hw, model = _f64(catalog.gpus()["h100-sxm"].to_params()), _f64(catalog.models()[model_name].to_params())
    options = __import__("jaxpareto").ModelOptions(expert_routing=routing)
    turn = TurnTokens(jnp.float64(0.0), jnp.float64(tokens), jnp.float64(tokens), jnp.float64(chunk))
    costs = tp_costs(hw, model, jnp.float64(tp), turn, jnp.float64(32768.0), jnp.float64(32768.0), _f64(Efficiency()),
                     options)
    layout = _layout(1, 1)._replace(stages=jnp.float64(stages))
    piped = pipeline_costs(costs, hw, model, jnp.float64(tp), layout, jnp.float64(latency_us),
                           jnp.float64(overhead_ms), jnp.float64(chunk), jnp.float64(tokens), routing)
    hop = float(model.hidden_size) * 2 / (450.0 * 1e9) * 1e3  # one token's activations over NVLink [ms]
    return costs, piped, hop, effective_tflops


@pytest.mark.parametrize("routing", ["seed", "uniform"])
@pytest.mark.parametrize("model_name", ["llama-3.1-70b", "qwen3-235b-a22b"])
def test_a_pipelined_token_is_the_tp_groups_step_at_a_micro_batch(model_name, routing):
    """S stages, S micro-batches of b / S: a token's time is the TP group's step at b / S, at least
    one session (the weights read S times at 1/S each), plus S - 1 hops of b / S activations and
    S - 1 more steps' fixed overhead; the experts a micro-batch touches, under either routing."""
    from jaxpareto.physics.decode import decode_step

    for stages in (2, 4):
        costs, piped, hop, _ = _pipeline(model_name, 2, stages, routing, latency_us=5.0, overhead_ms=2.0)
        for batch in (1.0, 6.0, 64.0, 1000.0):
            got = decode_step(piped.costs.decode, jnp.float64(batch), routing)
            want = decode_step(costs.decode, jnp.float64(max(batch / stages, 1.0)), routing)  # the bubble below S
            # hops of a micro-batch (one session at least) and one step's overhead each
            extra = (stages - 1) * (5.0 / 1000 + 2.0 + max(batch / stages, 1.0) * hop)
            assert float(got.tpot_ms) == pytest.approx(float(want.tpot_ms) + extra, rel=1e-12)
            assert float(got.t_weight_ms) == pytest.approx(float(want.t_weight_ms), rel=1e-12)


def test_a_pipelined_prompt_streams_its_chunks_after_the_fill():
    """A prompt of n chunks alone: (n + S - 1) stage steps of a chunk, each 1/S of the chunk's
    time on the TP group (the seed's prefill, compute only); S chunks per cycle under load."""
    chunk, n = 4096.0, 6
    for stages in (1, 2, 4):
        costs, piped, hop, _ = _pipeline("llama-3.1-70b", 2, stages, chunk=chunk, tokens=n * chunk)  # one node
        c_p = float(costs.prefill_ms_per_token)
        alone = n * chunk * float(piped.costs.prefill_ms_per_token) + float(piped.fill_ms)
        want = (n + stages - 1) * chunk * c_p / stages + (stages - 1) / stages * n * chunk * hop
        assert alone == pytest.approx(want, rel=1e-12)
        assert float(piped.chunk_tokens) == stages * chunk


def test_pipeline_memory_and_limits_against_hand_counts():
    """Llama-3.1-70B (8 KV heads, FP8) on H100: TP 2 x PP 2 holds the weights over 4 GPUs and each
    session's KV once over them, as TP 4 does; more stages than layers is no layout."""
    import jaxpareto as jp
    from jaxpareto.physics.limits import LAYOUT_DOES_NOT_SPLIT

    model = catalog.models()["llama-3.1-70b"]
    context = 16384
    want = math.floor((4 * 80.0 - model.weight_memory_gb) / (context * model.kv_bytes_per_token / 1e9))
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[2, 4], pp=[1, 2, 81], concurrency=8,
                  context_tokens=context, dtype="float64").squeeze()
    assert int(ds.concurrency_max.sel(tp=2, pp=2)) == want == int(ds.concurrency_max.sel(tp=4, pp=1))
    two = math.floor((2 * 80.0 - model.weight_memory_gb) / (context * model.kv_bytes_per_token / 1e9))
    assert int(ds.concurrency_max.sel(tp=2, pp=1)) == two < want  # the second stage's GPUs hold sessions too
    assert (ds.infeasible_reason.sel(pp=81) == LAYOUT_DOES_NOT_SPLIT).all()  # 80 layers
    # per GPU over the stages' GPUs: at one session TP 2 x PP 2 makes TP 2's tokens per GPU-second
    # of a 4-GPU replica, a little slower per token than TP 4 (half the bandwidth per token)
    tp4, pp2 = ds.sel(tp=4, pp=1), ds.sel(tp=2, pp=2)
    assert float(pp2.tpot_ms) > float(tp4.tpot_ms)
    assert float(pp2.output_tokens_per_s_per_gpu) == pytest.approx(
        float(pp2.turns_per_s) * Workload().osl / 4, rel=1e-12)


def test_a_gpu_budget_in_a_sweep_flags_replicas_that_do_not_fill_it():
    """gpu_budget = 8: TP 4 x PP 2 and DP 2 x TP 2 fill it with whole replicas, TP 3 x PP 1 of a
    dense model (heads first) and TP 2 x PP 3 do not; 0 is no budget."""
    import jaxpareto as jp
    from jaxpareto.physics.limits import HEADS_DO_NOT_SPLIT, REPLICA_DOES_NOT_DIVIDE_BUDGET

    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[2, 3, 4], pp=[1, 2, 3], gpu_budget=[0, 8],
                  concurrency=8).squeeze()
    reason = ds.infeasible_reason
    assert (reason.sel(tp=3) == HEADS_DO_NOT_SPLIT).all()
    assert int(reason.sel(tp=4, pp=2, gpu_budget=8)) == 0 and int(reason.sel(tp=2, pp=1, gpu_budget=8)) == 0
    assert int(reason.sel(tp=2, pp=3, gpu_budget=8)) == REPLICA_DOES_NOT_DIVIDE_BUDGET
    assert int(reason.sel(tp=4, pp=3, gpu_budget=8)) == REPLICA_DOES_NOT_DIVIDE_BUDGET
    assert (reason.sel(gpu_budget=0, tp=[2, 4]) == 0).all()
    from jaxpareto.dataset.pareto import default_dims

    assert default_dims(ds.dims) == ("tp", "concurrency", "pp")  # a front per budget, over the layouts
    front = jp.pareto_front(jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[2, 4], pp=[1, 2], gpu_budget=[0, 8],
                                     concurrency=[1, 8, 64]))
    assert front.sel(gpu_budget=0).sum() >= 1 and front.sel(gpu_budget=8).sum() >= 1
    both = ds.sel(tp=4, pp=2)  # the budget changes nothing else: per GPU and per replica figures
    assert float(both.output_tokens_per_s_per_gpu.sel(gpu_budget=8)) == \
        float(both.output_tokens_per_s_per_gpu.sel(gpu_budget=0))


def test_layout_review_findings_stay_fixed():
    """Fewer sessions than ranks is a replica with idle ranks, not an infeasible one; a pipeline
    with fewer sessions than stages decodes no faster than its TP group (the bubble), and the exact
    solver has the bubble's piece; what a grid would ignore is refused; optimize takes no layout
    axis but a budget; a budget of one GPU."""
    import jaxpareto as jp

    ds = jp.sweep(gpu="h200-sxm", model="deepseek-v3", tp=1, dp_attention=8, ep=8, concurrency=[1, 4, 8],
                  context_tokens=8192, hit_rate=0.5).squeeze()
    assert ds.feasible.all() and ds.concurrency_eff.values.tolist() == [1, 4, 8]
    piped = jp.sweep(gpu="h200-sxm", model=["deepseek-v3", "llama-3.1-70b"], tp=8, pp=[1, 2, 4, 8],
                     concurrency=[1, 4], context_tokens=8192).squeeze()
    lone = piped.tpot_ms.sel(concurrency=1).transpose("model", "pp").values  # one session: the bubble
    assert (lone[:, 1:] >= lone[:, :1] * (1 - 1e-6)).all()  # never below pp = 1's
    # four sessions fill two micro-batches: the second stage's GPUs add bandwidth for the KV (and
    # each micro-batch loads only its own tokens' experts), so the token is faster on 16 GPUs
    assert float(piped.tpot_ms.sel(concurrency=4, pp=2, model="deepseek-v3")) < \
        float(piped.tpot_ms.sel(concurrency=4, pp=1, model="deepseek-v3"))
    kw = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=4, concurrency=8)
    with pytest.raises(jp.JaxparetoError, match="expert_imbalance.*MoE model"):
        jp.plan_sweep(**kw, pp=[1, 2], expert_imbalance=1.2)
    with pytest.raises(jp.JaxparetoError, match="dp_prefill.*dp_attention > 1"):
        jp.plan_sweep(**kw, gpu_budget=8, dp_prefill="aligned")
    # the bubble is one more linear piece of R(B) (flat below S sessions): the exact solver has it
    damped, exact = (jp.sweep(**{**kw, "concurrency": [1, 2, 3, 8, 64]}, pp=[1, 2, 4], solver=s) for s in ("damped", "exact"))
    assert exact.converged.all()
    np.testing.assert_allclose(exact.tpot_ms, damped.tpot_ms, rtol=1e-4)
    with pytest.raises(jp.JaxparetoError, match="dp_attention: is a layout axis of sweeps"):
        jp.optimize(gpu="h200-sxm", model="deepseek-v3", tp=[8], dp_attention=8)
    one = jp.optimize(gpu="h200-sxm", model="llama-3.1-8b", gpu_budget=1, concurrency=(1, 16))
    assert one.feasible and one.tp == 1 and set(one.layouts["serving"]) == {"aggregated"}


def test_lockstep_ranks_converge_in_float32():
    """The other ranks' lockstep share (1 - ρ)^(D - 1) carries D - 1 times the inner root's
    rounding, so the fixed point's tolerance floor grows with it: DeepSeek-V3 over 8 attention
    ranks in the shared engine (measured profile) converges in float32 where a floor of 64 eps
    left points cycling to max_iter, and agrees with float64."""
    import jaxpareto as jp

    grid = dict(gpu=["b200"], model=["deepseek-v3"], tp=[1], dp_attention=[8], ep=[8], concurrency=[8, 16, 64],
                think_time_s=[5.0, 30.0], context_tokens=[4096], hit_rate=[0.5, 0.9], prefill_model="shared",
                profile="measured")
    single = jp.sweep(**grid)
    assert bool(single.converged.all()) and int(single.iterations.max()) < 1000
    double = jp.sweep(**grid, dtype="float64")
    np.testing.assert_allclose(single.tpot_ms.values, double.tpot_ms.values, rtol=1e-3)
    np.testing.assert_allclose(single.ttft_ms.values, double.ttft_ms.values, rtol=1e-3)
