"""A step's token budget (``Engine.prefill_chunk_tokens``) and the decode tokens it carries
(``Engine.decode_tokens_in_budget``): vLLM and TensorRT-LLM schedule their running requests
first, one token each, so a step of B decoding requests has P - B tokens left for prefill, at
least the P L / (L + OSL) that keeps its decoders fed; SGLang's chunk is all prefill's."""

import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.definitions.engine import engines
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.measure.validation_set import default_path, load_validation_set
from jaxpareto.physics.engine import MIN_PREFILL_BUDGET_TOKENS, prefill_budget_tokens

VLLM = engines()["vllm"]
BUDGET = 1024


def _engine(name, counts, chunk=BUDGET):
    return VLLM.model_copy(update={"name": name, "prefill_chunk_tokens": chunk, "decode_tokens_in_budget": counts})


def test_the_budget_left_to_prefill_by_hand():
    # P - B while the decoders stay fed, else P L / (L + OSL); 1 token at least; P where not counted
    assert float(prefill_budget_tokens(2048.0, 500.0, 1000.0, 1000.0, 1.0)) == 1548.0
    assert float(prefill_budget_tokens(2048.0, 1500.0, 1000.0, 1000.0, 1.0)) == 1024.0
    assert float(prefill_budget_tokens(2048.0, 1500.0, 1000.0, 1000.0, 0.0)) == 2048.0
    assert float(prefill_budget_tokens(2048.0, 1500.0, 1000.0, 1000.0, None)) == 2048.0
    assert float(prefill_budget_tokens(2048.0, 4000.0, 0.0, 1000.0, 1.0)) == MIN_PREFILL_BUDGET_TOKENS


def test_the_shipped_engines_count_decode_tokens_as_their_schedulers_do():
    shipped = engines()
    assert shipped["vllm"].decode_tokens_in_budget and shipped["trtllm"].decode_tokens_in_budget
    assert not shipped["sglang"].decode_tokens_in_budget and not shipped["seed"].decode_tokens_in_budget
    assert all("decode_tokens_in_budget" in shipped[name].sources for name in ("vllm", "sglang", "trtllm"))


@pytest.mark.parametrize("arrivals, own", [("staggered", 0), ("synchronised", 1)])
def test_in_the_closed_loop_counting_b_decode_tokens_is_a_budget_b_smaller(arrivals, own):
    # Z = 0: every session is in its turn, B = C, so the counting engine with P = 1024 is the
    # non-counting one with P = 1024 - C wherever that stays above P L / (L + OSL) (512 here);
    # in a synchronised train of 1,024-token prompts (longer than the budget) the prompt's own
    # session decodes not in its steps: P = 1024 - C + 1
    common = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, think_time_s=0.0, context_tokens=1024, osl=1024,
                  hit_rate=0.0, prefill_model="shared", arrivals=arrivals)
    for concurrency in (64, 256):
        counted = jp.sweep(**common, concurrency=concurrency, engine=[_engine("counted", True)])
        smaller = jp.sweep(**common, concurrency=concurrency,
                           engine=[_engine("smaller", False, int(BUDGET - concurrency + own))])
        np.testing.assert_allclose(counted.batch_eff.values, concurrency, rtol=2e-5)  # float32 solve
        for name in ("ttft_ms", "tpot_ms", "batch_eff"):
            np.testing.assert_allclose(counted[name].values, smaller[name].values, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("arrivals, load", [("staggered", dict(concurrency=[4, 256], think_time_s=0.0)),
                                            ("poisson", dict(request_rate=[2.0, 9.0]))])
def test_the_decode_tokens_lengthen_the_wait_for_prefill_more_as_the_batch_grows(arrivals, load):
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, context_tokens=2048, osl=256, hit_rate=0.0,
                  prefill_model="shared", arrivals=arrivals, engine=[_engine("counted", True),
                                                                      _engine("apart", False)], **load)
    counted, apart = ds.sel(engine="counted"), ds.sel(engine="apart")
    load_axis = "concurrency" if arrivals == "staggered" else "request_rate"
    gain = (counted.ttft_ms / apart.ttft_ms).squeeze().values
    batch = apart.batch_eff.squeeze().values
    assert bool(counted.feasible.all()) and bool(apart.feasible.all())
    assert np.all(gain >= 1.0 - 1e-6), gain
    assert gain[-1] > gain[0] and gain[-1] > 1.01, (load_axis, batch, gain)


def test_a_validation_row_publishing_its_budget_overrides_its_engine(tmp_path):
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    assert "prefill_chunk_tokens" in raw.columns
    rows = raw[raw["id"].str.startswith("mlperf51-llama2-h200-nebius")].assign(engine="trtllm")
    given, blank = tmp_path / "given.csv", tmp_path / "blank.csv"
    rows.assign(prefill_chunk_tokens="512").to_csv(given, index=False)
    rows.drop(columns="prefill_chunk_tokens").to_csv(blank, index=False)  # a file may leave it out
    options = jp.ModelOptions(prefill_model="shared")
    small = jp.validate(load_validation_set(given), options=options).set_index("metric")["predicted"]
    default = jp.validate(load_validation_set(blank), options=options).set_index("metric")["predicted"]
    # the engine's default 8192 leaves room beside the ~790 requests KV memory holds; 512 keeps
    # at most 512 x 265 / (222 + 265) = 279 of them decoding and 233 tokens a step to prefill:
    # the compute-bound capacity hardly moves, but near it the prompts wait far longer
    np.testing.assert_allclose(small["output_tokens_per_s_total"], default["output_tokens_per_s_total"], rtol=0.03)
    assert small["ttft_ms"] > 5.0 * default["ttft_ms"]
    for bad in ("0", "1.5", "-8"):
        rows.assign(prefill_chunk_tokens=bad).to_csv(tmp_path / "bad.csv", index=False)
        with pytest.raises(JaxparetoError, match="prefill_chunk_tokens"):
            load_validation_set(tmp_path / "bad.csv")


@pytest.mark.parametrize("counted, fed", [(True, 512 * 256 / (2048 + 256)), (False, 512 * 256 / 2048)])
def test_the_closed_loop_levels_off_where_the_budget_keeps_its_decoders_fed(counted, fed):
    # P = 512, L = 2048, OSL = 256: at most P' / L prompts a step start decoding, for OSL steps
    # each, so D = P' OSL / L decode at once, P' = P - D where decode tokens take their share of
    # the budget (D = 56.9), P' = P where not (D = 64); the sessions beyond wait for their
    # prefill. Charging their decode tokens to every step made the throughput fall with C
    # past D instead of levelling off
    concurrency = np.array([16, 32, 48, 96, 128, 160])
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, context_tokens=2048, osl=256, hit_rate=0.0,
                  think_time_s=0.0, concurrency=concurrency, prefill_model="shared",
                  engine=[_engine("budget", counted, 512)], percentiles=True).squeeze()
    throughput, tpot, ttft = ds.output_tokens_per_s_per_gpu.values, ds.tpot_ms.values, ds.ttft_ms.values
    assert bool(ds.feasible.all()) and bool(ds.converged.all()) and int(ds.concurrency_max.min()) > 160
    np.testing.assert_allclose(ds.batch_eff.values, concurrency, rtol=2e-5)  # Z = 0: all in their turn
    assert np.all(np.diff(throughput) > 0.0), throughput
    assert throughput[-1] < 1.01 * throughput[-2]  # levelled off
    # past D a step decodes D requests: TPOT stops growing; below D it grows with the batch
    past = concurrency > 1.3 * fed
    np.testing.assert_allclose(tpot[past], tpot[-1], rtol=1e-5)
    assert tpot[1] < 0.8 * tpot[-1]
    # the requests decoding, X OSL TPOT (Little's law over decoding), tend to D as the prefill
    # saturates (56.9 counted, 64 not: the test tells the two apart)
    decoding = throughput * tpot / 1e3
    assert np.all(np.diff(decoding) > 0.0) and decoding[-1] <= fed
    np.testing.assert_allclose(decoding[-1], fed, rtol=0.01)
    # a prefill adds its own steps to a decoder's turn, not its processor-sharing slowdown: the
    # TPOT tail stays by the mean past saturation (it had grown with the wait, p99 5x the mean)
    assert np.all(ds.p99_tpot_ms.values[past] < 1.1 * tpot[past])
    assert np.all(ds.p50_tpot_ms.values[past] > 0.97 * tpot[past])
    # and the sessions beyond D wait: at a level X, R = C / X grows with C, all of it in TTFT
    np.testing.assert_allclose(ttft[-1] - ttft[-2], (160 - 128) * 256 / throughput[-1] * 1e3, rtol=0.02)


def test_a_validation_row_may_publish_its_request_limit_and_whether_its_budget_counts_decode_tokens(tmp_path):
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    rows = raw[raw["id"].str.startswith("mlperf51-llama2-h200-nebius")].assign(prefill_chunk_tokens="512")
    options = jp.ModelOptions(prefill_model="shared")

    def predicted(**columns):
        rows.assign(**columns).to_csv(tmp_path / "rows.csv", index=False)
        return jp.validate(load_validation_set(tmp_path / "rows.csv"), options=options).set_index("metric")["predicted"]

    absent = predicted()  # the file has neither column
    blank = predicted(max_running_requests="", decode_tokens_in_budget="")
    pd.testing.assert_series_equal(blank, absent)
    pd.testing.assert_series_equal(predicted(decode_tokens_in_budget="0"), absent)  # the seed engine's
    counted = predicted(decode_tokens_in_budget="1")
    # the ~280 decode tokens take their share of the 512: half the prompts a step, a far longer
    # wait near capacity
    assert counted["ttft_ms"] > 5.0 * absent["ttft_ms"]
    # under Poisson arrivals a request limit below the ~790 sessions KV memory holds makes
    # requests wait for a slot (the request limit applies where requests can wait for memory)
    options = jp.ModelOptions(prefill_model="shared", arrivals="poisson")
    unlimited, limited = predicted(max_running_requests=""), predicted(max_running_requests="400")
    assert limited["ttft_ms"] > 1.3 * unlimited["ttft_ms"]
    # TPOT nearly unchanged: only the capacity the load is a share of moves, the closed loop's
    # sessions at KV memory seeing the others among the 400 it runs
    assert limited["tpot_ms"] == pytest.approx(unlimited["tpot_ms"], rel=0.01)
    for column, bad in (("decode_tokens_in_budget", "2"), ("decode_tokens_in_budget", "yes"),
                        ("max_running_requests", "0"), ("max_running_requests", "1.5")):
        rows.assign(**{column: bad}).to_csv(tmp_path / "bad.csv", index=False)
        with pytest.raises(JaxparetoError, match=column):
            load_validation_set(tmp_path / "bad.csv")


def test_an_open_loop_whose_budget_counts_its_decode_tokens_agrees_with_the_simulated_server():
    """Poisson arrivals at 80 % of capacity with a 512-token budget that the decoding requests'
    tokens come off first (as vLLM V1 and TensorRT-LLM schedule; 1,024-token prompts and 256-token
    outputs of CV 0.5, about 68 decoding): means of TTFT and TPOT within 10 % of the simulated
    server (tests/simulator.py with ``decode_in_budget``; TTFT -6 %, where the budget taken as
    all prefill's is 22 % low), their P99 within 20 %, and the decode batch within 10 %; the
    budget's decode tokens cost capacity (16.7 requests/s against 18.8)."""
    from simulator import at_load, model_step, simulate

    gpu, model, context, osl, spread, budget = "h100-sxm", "llama-3.1-8b", 1024, 256, 0.5, 512
    ds = jp.sweep(gpu, model, tp=1, engine=[_engine("counted", True, budget), _engine("apart", False, budget)],
                  request_rate=np.geomspace(0.5, 100.0, 400),
                  arrivals="poisson", prefill_model="shared", context_tokens=context, osl=osl, isl_cv=spread,
                  osl_cv=spread, dtype="float64",
                  variables=["ttft_ms", "tpot_ms", "batch_eff", "concurrency_max", "p99_ttft_ms",
                             "p99_tpot_ms"]).squeeze()
    capacity = {name: float(at_load(ds.sel(engine=name), 1.0).request_rate) for name in ("counted", "apart")}
    assert capacity["counted"] < capacity["apart"]  # the decode tokens cost capacity
    point = at_load(ds.sel(engine="counted"), 0.8)
    sim = simulate(model_step(gpu, model, context), float(point.request_rate), 20_000, context, osl, float(budget),
                   spread, spread, seed=1, slots=int(point.concurrency_max), decode_in_budget=True)
    assert float(point.ttft_ms) == pytest.approx(sim.ttft_ms.mean(), rel=0.10)
    assert float(point.tpot_ms) == pytest.approx(sim.tpot_ms.mean(), rel=0.10)
    assert float(point.p99_ttft_ms) == pytest.approx(np.percentile(sim.ttft_ms, 99), rel=0.20)
    assert float(point.p99_tpot_ms) == pytest.approx(np.percentile(sim.tpot_ms, 99), rel=0.20)
    decoding = float(point.request_rate) / 1000.0 * (sim.e2el_ms - sim.ttft_ms).mean()  # Little's law
    assert float(point.batch_eff) == pytest.approx(decoding, rel=0.10)
