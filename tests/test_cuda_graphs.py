"""Decode steps padded to an engine's CUDA graphs (``Engine.cuda_graph_batch_step``,
`jaxpareto.physics.cuda_graphs`): the expected graph batch against brute force, its limits and
gradient, what the padded requests cost in a step, and the engines and validation rows that pad."""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.definitions import catalog
from jaxpareto.definitions.engine import engines
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.measure.predict import predict
from jaxpareto.measure.validation_set import default_path, load_validation_set
from jaxpareto.physics.cuda_graphs import padded_batch
from jaxpareto.physics.decode import decode_coefficients, decode_step

TRTLLM = engines()["trtllm"]
PADDED = TRTLLM.model_copy(update={"name": "padded", "cuda_graph_batch_step": 128})


@pytest.mark.parametrize("batch, step, ranks, sessions, most", [
    (155.0, 128.0, 8.0, np.inf, 512.0),    # MLPerf's DeepSeek-R1 server: a rank's mean batch, 8 ranks, Poisson
    (155.0, 128.0, 1.0, np.inf, np.inf),
    (120.0, 128.0, 4.0, np.inf, np.inf),   # near a graph's size: the largest rank passes it often
    (400.0, 128.0, 8.0, 1000.0, np.inf),   # closed loop: binomial over a rank's sessions
    (511.9997, 128.0, 8.0, 512.0, 512.0),  # every session in its turn: never a graph beyond them
    (506.0, 128.0, 8.0, 512.0, 512.0),
    (0.01, 128.0, 8.0, np.inf, np.inf),    # a step that runs runs one graph at least
    (60.0, 8.0, 1.0, np.inf, np.inf),      # vLLM's and SGLang's spacing
    (3000.0, 8.0, 64.0, np.inf, np.inf),   # many ranks: the largest sits far above the mean
    (20000.0, 8.0, 8.0, np.inf, np.inf),   # a spread of many graphs
])
def test_the_expected_graph_batch_matches_brute_force(batch, step, ranks, sessions, most):
    # Poisson (open loop) or binomial (closed loop) batches on each of D ranks, at most `most`,
    # the graph that of the largest (one at least), averaged over steps
    rng = np.random.default_rng(7)
    shape = (200_000, int(ranks))
    drawn = rng.binomial(int(sessions), batch / sessions, shape) if np.isfinite(sessions) else rng.poisson(batch, shape)
    largest = np.maximum(np.minimum(drawn, most).max(axis=1), 1)
    brute = float(np.mean(np.ceil(largest / step) * step))
    with jax.enable_x64(True):
        fast = float(padded_batch(batch, step, ranks, sessions, most))
    assert fast == pytest.approx(brute, rel=5e-3)  # a normal for the count: its skew near a graph's size
    assert fast >= batch


def test_without_spread_the_graph_is_the_next_multiple_and_without_graphs_the_batch():
    with jax.enable_x64(True):
        for batch in (1.0, 100.0, 128.0, 129.0, 480.0, 512.0):  # every session in its turn: no spread
            assert float(padded_batch(batch, 128.0, 8.0, batch)) == pytest.approx(np.ceil(batch / 128.0) * 128.0)
        assert float(padded_batch(100.0, 0.0, 8.0)) == 100.0  # no graphs (a table's engine without them)
        assert float(jax.grad(lambda b: padded_batch(b, 0.0, 8.0))(0.0)) == 1.0
        grid = jnp.linspace(0.0, 700.0, 701)
        for sessions, most in ((np.inf, np.inf), (512.0, 512.0)):
            padded = jax.vmap(lambda b: padded_batch(b, 128.0, 8.0, sessions, most))(grid)
            assert bool(jnp.all(jnp.diff(padded) >= -1e-9)) and bool(jnp.all(padded >= grid))
    # float32, a batch next to nothing: a finite tangent (the graph of one request)
    value, tangent = jax.jvp(lambda b: padded_batch(b, jnp.float32(128.0), jnp.float32(8.0)),
                             (jnp.float32(1e-30),), (jnp.float32(1.0),))
    assert float(value) == 128.0 and np.isfinite(float(tangent))


def test_its_gradient_matches_central_differences():
    with jax.enable_x64(True):
        f = lambda b: padded_batch(b, 128.0, 8.0, 2000.0)  # noqa: E731
        for b in (110.0, 120.0, 240.0):
            h = 1e-4
            fd = (f(b + h) - f(b - h)) / (2 * h)
            assert float(jax.grad(f)(b)) == pytest.approx(float(fd), rel=1e-5, abs=1e-9)


def test_a_padded_step_pays_the_padded_requests_matmuls_and_all_reduces_not_their_kv():
    hw, model = catalog.gpus()["h100-sxm"].to_params(), catalog.models()["llama-3.1-70b"].to_params()
    plain = decode_coefficients(hw, model, 4.0, 4096.0, 900.0, 0.8, 1.1, attention_tflops=600.0,
                                roofline="operator")._replace(allreduce_ms=0.01)
    padded = plain._replace(graph_step=128.0, graph_ranks=1.0, graph_sessions=300.0)
    for batch in (200.0, 300.0):
        a, b = decode_step(plain, batch), decode_step(padded, batch)
        extra = float(padded_batch(batch, 128.0, 1.0, 300.0)) - batch
        assert extra > 0
        assert float(b.t_kv_ms) == float(a.t_kv_ms) and float(b.t_weight_ms) == float(a.t_weight_ms)
        assert float(b.t_compute_ms - a.t_compute_ms) == pytest.approx(extra * float(plain.padding_compute_ms),
                                                                       rel=1e-5)
        assert float(b.t_fixed_ms - a.t_fixed_ms) == pytest.approx(extra * 0.01, rel=1e-5)
        # the padded requests compute no attention: their matmuls are the step's without it
        assert float(plain.padding_compute_ms) == pytest.approx(float(plain.compute_ms - plain.attention_ms), rel=1e-6)


def test_an_engine_that_pads_slows_compute_bound_steps_and_a_sweep_refuses_exact():
    common = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, think_time_s=0.0, context_tokens=1024, osl=256,
                  hit_rate=0.0, prefill_model="shared", roofline="operator", gemm_rate="measured", attention="flops")
    ds = jp.sweep(**common, concurrency=[300], engine=[TRTLLM, PADDED])
    tpot = ds.tpot_ms.squeeze()
    assert bool(ds.converged.all())
    # 300 sessions in their turns run the graph of 384: the projections' matmuls bound the step
    assert float(tpot.sel(engine="padded")) > 1.03 * float(tpot.sel(engine="trtllm"))
    # under the seed's one roofline the KV reads bound these steps: the padded matmuls run under them
    seed = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, think_time_s=0.0, context_tokens=1024, osl=256,
                    hit_rate=0.0, concurrency=[300], engine=[TRTLLM, PADDED])
    assert int(seed.decode_bound.max()) == 0
    np.testing.assert_array_equal(seed.tpot_ms.sel(engine="padded").values, seed.tpot_ms.sel(engine="trtllm").values)
    with pytest.raises(JaxparetoError, match=r"solver.*'padded'.*cuda_graph_batch_step"):
        jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=[64], engine=[PADDED], solver="exact")
    with pytest.raises(JaxparetoError, match=r"engine: .*'padded'.*'disaggregated' serving does not model"):
        jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=[64], engine=[PADDED],
                 serving="disaggregated", prefill_tp=[1], prefill_workers=[1], decode_workers=[1])
    assert engines()["trtllm"].to_params().cuda_graph_batch_step is None  # the shipped engines pad nothing
    assert all("cuda_graph_batch_step" in engines()[name].sources for name in ("vllm", "sglang", "trtllm"))


def test_a_pipeline_pads_each_micro_batch_and_optimize_compares_aggregated_serving_alone():
    # S micro-batches of B / S requests, each run at its own graph: S (padded(B / S) - B / S) padded requests
    hw, model = catalog.gpus()["h100-sxm"].to_params(), catalog.models()["llama-3.1-70b"].to_params()
    plain = decode_coefficients(hw, model, 4.0, 4096.0, 900.0, 0.8, 1.1)
    piped = plain._replace(graph_step=128.0, graph_sessions=300.0, graph_microbatches=2.0)
    extra = 2.0 * float(padded_batch(150.0, 128.0, 1.0, 150.0)) - 300.0
    assert extra == pytest.approx(2.0 * (256.0 - 150.0), rel=1e-6)  # every session in its turn: no spread
    assert float(decode_step(piped, 300.0).t_compute_ms - decode_step(plain, 300.0).t_compute_ms) == \
        pytest.approx(extra * float(plain.padding_compute_ms), rel=1e-5)
    result = jp.optimize(gpu="h100-sxm", model="llama-3.1-8b", gpu_budget=4, engine=PADDED, think_time_s=0.0,
                         context_tokens=2048)
    assert bool(result.feasible) and set(result.layouts["serving"]) == {"aggregated"}


def test_deepseek_r1_rows_pad_to_their_configurations_graphs(tmp_path):
    frame = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    dsr1 = frame["id"].str.startswith("mlperf51-dsr1")
    assert set(frame.loc[dsr1, "cuda_graph_batch_step"]) == {"128"}
    assert set(frame.loc[~dsr1, "cuda_graph_batch_step"]) == {""}
    assert frame.loc[dsr1, "notes"].str.contains("cuda_graph_padding_enabled True").all()
    rows = frame[dsr1].reset_index(drop=True)
    blank, absent = tmp_path / "blank.csv", tmp_path / "absent.csv"
    rows.assign(cuda_graph_batch_step="").to_csv(blank, index=False)
    rows.drop(columns="cuda_graph_batch_step").to_csv(absent, index=False)
    shipped = tmp_path / "shipped.csv"
    rows.to_csv(shipped, index=False)
    tpot = (rows["metric"] == "tpot_ms").to_numpy()
    with jax.enable_x64(True):
        without = predict(load_validation_set(absent))
        np.testing.assert_array_equal(without, predict(load_validation_set(blank)))
        padded = predict(load_validation_set(shipped))  # the seed's options: the exact solver gives way
    assert np.isfinite(padded).all() and (padded[tpot] > without[tpot]).all()
    for column, value, message in (("cuda_graph_batch_step", "0", "must be a finite number > 0"),
                                   ("mode", "disagg", "a disaggregated run's CUDA-graph padding is not modelled")):
        rows.assign(**{column: value}).to_csv(tmp_path / "bad.csv", index=False)
        with pytest.raises(JaxparetoError, match=rf"\(line 2\)\.cuda_graph_batch_step: {message}"):
            load_validation_set(tmp_path / "bad.csv")


def test_only_the_padded_rows_leave_the_exact_solver():
    """The validation evaluates the rows that pad as a program of their own: the others keep the
    exact solver, to the bit, whether or not the set holds padded rows."""
    rows = load_validation_set()
    padded = rows["cuda_graph_batch_step"].notna().to_numpy()
    with jax.enable_x64(True):
        all_rows = predict(rows)
        others = predict(rows[~padded])
    np.testing.assert_array_equal(all_rows[~padded], others)
