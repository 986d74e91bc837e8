"""The engine's scheduler delay (``Engine.scheduler_delay_steps``): a request's first token waits
d engine steps for the scheduler (an overlap scheduler: one; multi-step scheduling of k steps:
(k - 1) / 2), so TTFT gains d x TPOT, in both loops and in the validation rows that publish it."""

import numpy as np
import pandas as pd
import pydantic
import pytest

import jaxpareto as jp
from jaxpareto.definitions.engine import engines
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.measure.validation_set import default_path, load_validation_set

VLLM = engines()["vllm"]
DELAYED = VLLM.model_copy(update={"name": "vllm-delayed", "scheduler_delay_steps": 3.0})
SCENARIO = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, context_tokens=4096, osl=128, engine=[VLLM, DELAYED])


def _pair(**kwargs):
    ds = jp.sweep(**SCENARIO, **kwargs)
    return ds.sel(engine="vllm"), ds.sel(engine="vllm-delayed")


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan"), 1e300])  # 1e300 had given TTFT 1e301 ms
def test_a_delay_below_zero_or_not_finite_is_refused_by_name(bad):
    with pytest.raises(pydantic.ValidationError, match="scheduler_delay_steps"):
        VLLM.model_validate({**VLLM.model_dump(), "scheduler_delay_steps": bad})
    assert all(engine.scheduler_delay_steps == 0 for engine in engines().values())  # none by default


@pytest.mark.parametrize("prefill_model", ["isolated", "shared"])
def test_under_poisson_arrivals_ttft_gains_d_steps_and_nothing_else_moves(prefill_model):
    plain, delayed = _pair(arrivals="poisson", request_rate=[1.0, 4.0], prefill_model=prefill_model,
                           percentiles=True, isl_cv=1.0, hit_rate=0.5)
    np.testing.assert_allclose(delayed.tpot_ms, plain.tpot_ms, rtol=1e-6)
    shift = 3.0 * delayed.tpot_ms
    np.testing.assert_allclose(delayed.ttft_ms - plain.ttft_ms, shift, rtol=1e-5)
    # every request waits alike: the TTFT and E2E quantiles move by the same d x TPOT, TPOT's not,
    # but for the batch's spread: a request holds its KV slot through the delay, so the slots'
    # holding time gains d (TPOT(M) - TPOT(B)) from B to the full batch M, and the occupancy's
    # over-dispersion with it (T_hold's secant, docs/model.md "The wait for a KV slot")
    for p in (50, 90, 99):
        np.testing.assert_allclose(delayed[f"p{p}_ttft_ms"] - plain[f"p{p}_ttft_ms"], shift, rtol=1e-4)
        np.testing.assert_allclose(delayed[f"p{p}_e2el_ms"], plain[f"p{p}_e2el_ms"] + shift, rtol=1e-3)
        np.testing.assert_allclose(delayed[f"p{p}_tpot_ms"], plain[f"p{p}_tpot_ms"], rtol=5e-3)


def test_in_the_closed_loop_the_delay_is_part_of_the_turn():
    # Z = 0: every session is in its turn, B = C, the step is the same: TTFT + 3 TPOT exactly
    plain, delayed = _pair(concurrency=[4, 64], think_time_s=0.0)
    np.testing.assert_allclose(delayed.tpot_ms, plain.tpot_ms, rtol=1e-6)
    np.testing.assert_allclose(delayed.ttft_ms - plain.ttft_ms, 3.0 * delayed.tpot_ms, rtol=1e-5)
    # with pauses the longer turn keeps more sessions in it, and the exact solver's lines carry it
    damped = jp.sweep(**SCENARIO, concurrency=[4, 64, 512], think_time_s=[2.0, 10.0])
    exact = jp.sweep(**SCENARIO, concurrency=[4, 64, 512], think_time_s=[2.0, 10.0], solver="exact")
    np.testing.assert_allclose(exact.batch_eff, damped.batch_eff, rtol=1e-4)
    np.testing.assert_allclose(exact.ttft_ms, damped.ttft_ms, rtol=1e-4)
    longer = damped.sel(engine="vllm-delayed").batch_eff > damped.sel(engine="vllm").batch_eff
    assert bool(longer.all())


def test_a_validation_row_publishing_its_delay_overrides_its_engine(tmp_path):
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    rows = raw[raw["id"].str.startswith("mlperf51-llama2-mi300x-amd-server")]
    assert (rows["scheduler_delay_steps"] == "5").all()  # AMD's multi-step scheduling, 11 steps
    given, blank = tmp_path / "given.csv", tmp_path / "blank.csv"
    rows.to_csv(given, index=False)
    rows.drop(columns="scheduler_delay_steps").to_csv(blank, index=False)  # a file may leave it out
    options = jp.ModelOptions(prefill_model="shared", arrivals="poisson")
    with_delay = jp.validate(load_validation_set(given), options=options).set_index("metric")["predicted"]
    without = jp.validate(load_validation_set(blank), options=options).set_index("metric")["predicted"]
    # the server row runs at its share of the model's capacity, which the delay lowers a little
    # (a closed-loop session holds its slot through it): the rate, and so the step, move slightly
    assert with_delay["tpot_ms"] == pytest.approx(without["tpot_ms"], rel=0.05)
    gained = (with_delay["ttft_ms"] - without["ttft_ms"]) / with_delay["tpot_ms"]
    assert gained == pytest.approx(5.0, rel=0.1)
    bad = rows.assign(scheduler_delay_steps="-1")
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(JaxparetoError, match=r"scheduler_delay_steps: must be a number of engine steps in \[0, 1000"):
        load_validation_set(tmp_path / "bad.csv")


def test_engines_without_a_delay_carry_no_term_and_keep_their_numbers_beside_one_with():
    assert VLLM.to_params().scheduler_delay_steps is None  # no term in the program
    assert DELAYED.to_params().scheduler_delay_steps == 3.0
    alone = jp.sweep(**{**SCENARIO, "engine": [VLLM]}, concurrency=[4, 64], think_time_s=[0.0, 5.0])
    beside, _ = _pair(concurrency=[4, 64], think_time_s=[0.0, 5.0])  # the table fills 0 for it
    for name in ("ttft_ms", "tpot_ms", "batch_eff"):
        np.testing.assert_allclose(beside[name], alone[name].sel(engine="vllm"), rtol=1e-6)
