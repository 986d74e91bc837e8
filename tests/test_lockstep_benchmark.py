"""``arrivals="synchronised"``: a benchmark at fixed concurrency and fixed lengths, whose requests
keep the lockstep groups of its first burst (`jaxpareto.physics.engine.synchronised_turn`), or
in an engine that prefills first one wave (`jaxpareto.physics.engine.wave_turn`), against the
simulated benchmark of `tests/simulator.py` (`simulate_closed`, fed the model's own step times)."""

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions.engine import engines
from simulator import model_step, simulate_closed

GPU, MODEL = "h100-sxm", "llama-3.1-8b"


def _model(context, osl, chunk, counted, concurrency, arrivals="synchronised", base="vllm"):
    engine = engines()[base].model_copy(update={"name": "bench", "prefill_chunk_tokens": chunk,
                                                 "decode_tokens_in_budget": counted})
    ds = jp.sweep(GPU, MODEL, tp=1, concurrency=concurrency, think_time_s=0.0, context_tokens=context, osl=osl,
                  hit_rate=0.0, prefill_model="shared", arrivals=arrivals, engine=[engine], dtype="float64")
    return ds.squeeze([d for d in ds.dims if d != "concurrency"])


@pytest.mark.parametrize(("context", "osl", "chunk", "counted", "concurrency", "tpot_rel"), [
    (512, 512, 8192, False, [4, 64], 0.03),  # 16 prompts a step: groups of 4, then of 16
    (1024, 1024, 8192, True, [16], 0.03),  # the decode tokens counted: groups of 7, 7 and 2
    (2048, 256, 8192, True, [4], 0.03),  # a group of 4 fills the step its own sessions leave undecoded
    (256, 1024, 2048, True, [64, 256], 0.03),
    (16384, 512, 8192, True, [16], 0.03),  # a train: two whole steps and a last one the next prompt fills
    (8193, 128, 8192, False, [1, 4], 0.07),  # a train of one: its last step alone (one token); of four
    (1000, 32, 4096, True, [104, 200], 0.07),  # prefill-bound: only the groups decoding spend the counted budget
])
def test_lockstep_groups_agree_with_the_simulated_benchmark(context, osl, chunk, counted, concurrency, tpot_rel):
    """Mean TTFT within 10 % and TPOT within 3 % (7 % for trains and prefill-bound runs) where the
    groups fit their steps. On these
    cases the spread steady state (``arrivals="staggered"``) puts TTFT 1.1-11x low, and the
    single wave per turn that "synchronised" meant before (every session of a turn in one burst)
    up to 17x high."""
    ds = _model(context, osl, chunk, counted, concurrency)
    step = model_step(GPU, MODEL, context)
    for i, c in enumerate(concurrency):
        sim = simulate_closed(step, c, context, osl, float(chunk), decode_in_budget=counted)
        model = ds.isel(concurrency=i)
        assert float(model.ttft_ms) == pytest.approx(sim.ttft_ms.mean(), rel=0.10), c
        assert float(model.tpot_ms) == pytest.approx(sim.tpot_ms.mean(), rel=tpot_rel), c


def test_spread_outputs_break_the_groups_up():
    """With output lengths spread (CV 0.3) the simulated groups dissolve within a few turns and
    TTFT falls to the spread steady state (``arrivals="staggered"``), 6x below the lockstep one."""
    step = model_step(GPU, MODEL, 512)
    fixed = simulate_closed(step, 16, 512, 512, 8192.0)
    spread = simulate_closed(step, 16, 512, 512, 8192.0, osl_cv=0.3)
    staggered = float(_model(512, 512, 8192, False, [16], arrivals="staggered").ttft_ms[0])
    assert fixed.ttft_ms.mean() > 6 * spread.ttft_ms.mean()
    assert spread.ttft_ms.mean() == pytest.approx(staggered, rel=0.15)


def test_one_output_token_has_a_decode_steps_tpot():
    """With OSL 1 a request decodes no step after its first token: TPOT is then a decode step's, as
    the other engines give it (it had been 0, an infinite rate per user and NaN percentiles)."""
    kwargs = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=[1, 16], think_time_s=5.0,
                  context_tokens=8192, osl=1, prefill_model="shared", percentiles=True)
    lockstep = jp.sweep(**kwargs, arrivals="synchronised").squeeze()
    alone = jp.sweep(**{**kwargs, "concurrency": 1}).squeeze()  # one session: a step of one request
    assert lockstep.tpot_ms.values == pytest.approx(float(alone.tpot_ms), rel=1e-6)
    for name in ("output_tokens_per_s_per_user", "p50_tpot_ms", "p99_tpot_ms", "p99_e2el_ms"):
        assert (lockstep[name] > 0).all() and bool(lockstep[name].notnull().all()), name
        assert bool(((lockstep[name] < float("inf"))).all()), name


@pytest.mark.parametrize(("context", "osl", "chunk", "concurrency", "ttft_rel", "tpot_rel"), [
    (512, 512, 8192, [1, 4, 16, 64, 128], 1e-3, 1e-3),  # one batch up to 16 prompts, then trains of them
    (512, 512, 8192, [17, 20, 24], 1e-3, 1e-3),  # a last batch partly filled: its prompts end at S
    (512, 2, 8192, [20, 64], 1e-3, 1e-3),  # one decode step: TPOT is nearly all the rest of the train
    (1024, 128, 8192, [8, 128], 1e-3, 1e-3),
    (2048, 256, 4096, [4, 32], 1e-3, 1e-3),  # two prompts a batch
    (3000, 128, 8192, [5], 1e-3, 1e-3),
    (16384, 512, 8192, [1, 4, 16], 1e-3, 1e-3),  # each prompt two whole batches
    (8193, 128, 8192, [1, 4], 1e-3, 1e-3),  # a train whose last batch is a few tokens
    (1000, 32, 4096, [16, 104], 0.01, 0.01),  # prefill-bound: most of a turn in the wave's prefill
    (6000, 64, 8192, [3, 5], 0.09, 0.04),  # uneven: at C = 5 two prompts end in the third batch, one in each before
])
def test_a_prefill_first_engine_keeps_the_burst_one_wave(context, osl, chunk, concurrency, ttft_rel, tpot_rel):
    """An engine that runs waiting prefills first (SGLang's scheduler, ``prefill_first``) prefills
    the whole burst while decoding waits, and the wave comes back whole: TTFT and TPOT as the
    simulated benchmark with the same scheduler gives them (exactly where as many prompts end in
    each full batch; within 9 % and 4 % where they do not), TTFT rising in proportion to C where
    the groups of an engine that decodes beside its prompts stay at one step's."""
    ds = _model(context, osl, chunk, False, concurrency, base="sglang")
    step = model_step(GPU, MODEL, context)
    for i, c in enumerate(concurrency):
        sim = simulate_closed(step, c, context, osl, float(chunk), prefill_first=True)
        model = ds.isel(concurrency=i)
        assert float(model.ttft_ms) == pytest.approx(sim.ttft_ms.mean(), rel=ttft_rel), c
        assert float(model.tpot_ms) == pytest.approx(sim.tpot_ms.mean(), rel=tpot_rel), c


def test_the_wave_grows_with_the_burst_where_the_groups_do_not():
    """512-token prompts, 16 a batch: from 16 to 128 sessions the wave's TTFT grows about as the
    burst (its mean position in a train of C / 16 batches, (C / 16 + 1) / 2 of them: 4.5x), the
    groups' stays within a step's growth; a table of both engines gives each its own turn."""
    concurrency = [16, 128]
    wave = _model(512, 512, 8192, False, concurrency, base="sglang")
    groups = _model(512, 512, 8192, False, concurrency, base="vllm")
    ratio = float(wave.ttft_ms[1] / wave.ttft_ms[0])
    assert 4.0 < ratio < 5.0
    assert float(groups.ttft_ms[1] / groups.ttft_ms[0]) < 1.5
    both = jp.sweep(GPU, MODEL, tp=1, concurrency=concurrency, think_time_s=0.0, context_tokens=512, osl=512,
                    hit_rate=0.0, prefill_model="shared", arrivals="synchronised", dtype="float64",
                    engine=[engines()[name].model_copy(update={"name": f"{name}-8k", "prefill_chunk_tokens": 8192,
                                                                "decode_tokens_in_budget": False})
                            for name in ("sglang", "vllm")])
    for name, alone in (("sglang-8k", wave), ("vllm-8k", groups)):
        np.testing.assert_allclose(both.sel(engine=name).squeeze().ttft_ms, alone.ttft_ms, rtol=1e-9)
        np.testing.assert_allclose(both.sel(engine=name).squeeze().tpot_ms, alone.tpot_ms, rtol=1e-9)


def test_sglang_alone_of_the_shipped_engines_prefills_first():
    """The shipped engines' schedulers, each with its source: SGLang's runs a prefill batch before
    the next decode step whenever requests wait; vLLM V1's and TensorRT-LLM's decode beside them."""
    shipped = engines()
    assert shipped["sglang"].prefill_first and "prefill_first" in shipped["sglang"].sources
    assert not any(shipped[name].prefill_first for name in ("vllm", "trtllm", "seed"))


@pytest.mark.parametrize("base", ["vllm", "sglang"])
def test_a_lone_session_prefills_its_whole_prompt_whatever_its_pauses(base):
    """One session with a pause between its turns is active a share of the time (B < 1), but its
    prompt is prefilled whole: TTFT as without the pause (it had been B x the prompt's)."""
    engine = engines()[base].model_copy(update={"name": "bench"})
    kwargs = dict(gpu=GPU, model=MODEL, tp=1, concurrency=1, context_tokens=4096, osl=256, hit_rate=0.0,
                  prefill_model="shared", arrivals="synchronised", engine=[engine], dtype="float64")
    paused = jp.sweep(**kwargs, think_time_s=5.0).squeeze()
    busy = jp.sweep(**kwargs, think_time_s=0.0).squeeze()
    assert float(paused.batch_eff) < 0.5
    assert float(paused.ttft_ms) == pytest.approx(float(busy.ttft_ms), rel=1e-6)
