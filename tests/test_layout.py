"""Attention data parallelism and expert parallelism (jaxpareto.physics.layout): memory by layout
against hand counts, a dense replica of D ranks as D TP groups, and the experts a replica reads."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
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
