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


@pytest.mark.parametrize("arrivals, decoding", [("staggered", 1.0), ("synchronised", 0.5)])
def test_in_the_closed_loop_counting_b_decode_tokens_is_a_budget_b_smaller(arrivals, decoding):
    # Z = 0: every session is in its turn, B = C, so the counting engine with P = 1024 is the
    # non-counting one with P = 1024 - C wherever that stays above P L / (L + OSL) (512 here);
    # a synchronised burst's mixed steps decode half the wave, C / 2
    common = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, think_time_s=0.0, context_tokens=1024, osl=1024,
                  hit_rate=0.0, prefill_model="shared", arrivals=arrivals)
    for concurrency in (64, 256):
        counted = jp.sweep(**common, concurrency=concurrency, engine=[_engine("counted", True)])
        smaller = jp.sweep(**common, concurrency=concurrency,
                           engine=[_engine("smaller", False, int(BUDGET - decoding * concurrency))])
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
    rows.assign(prefill_chunk_tokens="1536").to_csv(given, index=False)
    rows.drop(columns="prefill_chunk_tokens").to_csv(blank, index=False)  # a file may leave it out
    options = jp.ModelOptions(prefill_model="shared")
    small = jp.validate(load_validation_set(given), options=options).set_index("metric")["predicted"]
    default = jp.validate(load_validation_set(blank), options=options).set_index("metric")["predicted"]
    # the engine's default 8192 leaves room beside ~1,000 decoding requests; 1536 caps the
    # decoders near 1536 x 265 / (222 + 265) and so the capacity
    assert small["output_tokens_per_s_total"] < 0.95 * default["output_tokens_per_s_total"]
    for bad in ("0", "1.5", "-8"):
        rows.assign(prefill_chunk_tokens=bad).to_csv(tmp_path / "bad.csv", index=False)
        with pytest.raises(JaxparetoError, match="prefill_chunk_tokens"):
            load_validation_set(tmp_path / "bad.csv")
