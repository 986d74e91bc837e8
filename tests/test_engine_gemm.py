"""Each engine's own GEMM kernels (``Engine.gemm_kernels``, ``Hardware.engine_gemm``): under
``gemm_rate="measured"`` an engine computes at the share and offset its kernels measured on the
GPU, the GPU's own values (the medians over engines) filling what they leave out; at the peak, and
for an engine that names no kernels, nothing changes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import jaxpareto as jp
from jaxpareto.definitions import catalog
from jaxpareto.definitions.engine import engines
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import GEMM_KERNELS, GEMM_PRECISIONS, Hardware, engine_hardware
from jaxpareto.measure.validation_set import default_path, load_validation_set

TRTLLM = engines()["trtllm"]
NAMELESS = TRTLLM.model_copy(update={"name": "trtllm-nameless", "gemm_kernels": None})
GRID = dict(model="llama-3.1-70b-fp8", tp=[1, 2], concurrency=[1, 64, 512], think_time_s=[0.0, 5.0],
            context_tokens=[4096], hit_rate=[0.0])
FIELDS = [f"gemm_{kind}_{p}" for kind in ("fraction", "offset_tokens", "moe_fraction", "moe_offset_tokens")
          for p in GEMM_PRECISIONS]


def _as_own(gpu: str, kernels: str) -> Hardware:
    """The GPU with the engine's measurements as its own values (and none per engine)."""
    hw = catalog.gpus()[gpu]
    own = hw.engine_gemm[kernels]
    fields = {f: getattr(own, f) if getattr(own, f) is not None else getattr(hw, f) for f in FIELDS}
    return Hardware(**{**hw.model_dump(), **fields, "name": f"{gpu}-as-{kernels}", "engine_gemm": {}})


def test_the_shipped_engines_name_their_kernels_and_the_seed_none():
    assert {name: e.gemm_kernels for name, e in engines().items()} == {
        "seed": None, "vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
    assert engines()["seed"].to_params().gemm_kernels is None  # no lookup in its program
    assert [engines()[k].to_params().gemm_kernels for k in GEMM_KERNELS] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("gpu, kernels, field, want", [
    ("h200-sxm", "trtllm", "gemm_offset_tokens_fp8", 62.0),  # the GPU's median over engines: 0
    ("h100-sxm", "trtllm", "gemm_offset_tokens_fp8", 107.0),
    ("h100-sxm", "vllm", "gemm_offset_tokens_fp8", 0.0),  # a negative intercept: no offset
    ("b200", "sglang", "gemm_offset_tokens_fp4", 518.0),
    ("b200", "trtllm", "gemm_fraction_fp4", 0.41),
])
def test_an_engine_computes_at_its_own_kernels_measurements(gpu, kernels, field, want):
    params = catalog.gpus()[gpu].to_params()
    code = GEMM_KERNELS.index(kernels) + 1.0
    assert float(getattr(engine_hardware(params, code), field)) == pytest.approx(want)
    # no kernels named (None: no lookup; 0: a mixed table's filler): the GPU's own values
    for none in (None, 0.0):
        assert float(getattr(engine_hardware(params, none), field)) == pytest.approx(
            float(getattr(params, field)), nan_ok=True)


def test_what_the_kernels_did_not_measure_stays_the_gpus():
    hw = catalog.gpus()["h200-sxm"]  # no FP4 on Hopper: neither the GPU nor its engines have one
    picked = engine_hardware(hw.to_params(), 3.0)
    assert np.isnan(float(picked.gemm_offset_tokens_fp4))
    mine = Hardware(**{**hw.model_dump(), "name": "mine",
                       "engine_gemm": {"trtllm": {"gemm_offset_tokens_fp8": 80.0}}})
    picked = engine_hardware(mine.to_params(), 3.0)
    assert float(picked.gemm_offset_tokens_fp8) == 80.0
    assert float(picked.gemm_fraction_fp8) == pytest.approx(hw.gemm_fraction_fp8)  # its share: the GPU's


@pytest.mark.parametrize("gpu, kernels, model", [("h200-sxm", "trtllm", None), ("b200", "sglang", None),
                                                 ("h100-sxm", "vllm", None), ("h200-sxm", "trtllm", "qwen3-235b-a22b"),
                                                 ("b200", "vllm", "qwen3-235b-a22b")])
def test_a_sweep_equals_the_gpu_carrying_the_engines_values_as_its_own(gpu, kernels, model):
    """Brute force: the engine's kernels on the catalog GPU give the numbers of a nameless engine
    on a copy of the GPU whose own values are those kernels' (the lookup is at the top of every
    point's physics, before either loop: the closed loop's numbers stand for both); a MoE model
    reads the kernels' grouped-GEMM values as well."""
    engine = engines()[kernels]
    nameless = engine.model_copy(update={"name": f"{kernels}-nameless", "gemm_kernels": None})
    grid = GRID if model is None else {**GRID, "model": model, "tp": [8]}
    named = jp.sweep(gpu=gpu, engine=engine, gemm_rate="measured", **grid)
    copied = jp.sweep(gpu=_as_own(gpu, kernels), engine=nameless, gemm_rate="measured", **grid)
    assert np.isfinite(named.tpot_ms.values).any()
    for name in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_gpu"):
        np.testing.assert_allclose(named[name].values, copied[name].values, rtol=1e-6, equal_nan=True)


def test_at_the_peak_the_kernels_change_nothing():
    both = jp.sweep(gpu="h200-sxm", engine=[TRTLLM, NAMELESS], **GRID)
    for name in ("ttft_ms", "tpot_ms", "batch_eff"):
        np.testing.assert_array_equal(both[name].sel(engine="trtllm").values,
                                      both[name].sel(engine="trtllm-nameless").values)


def test_trtllms_offset_on_hopper_keeps_decode_throughput_growing_with_the_batch():
    """H200 FP8: the median offset is 0 (vLLM's and SGLang's intercepts are negative), TensorRT-LLM's
    62 tokens: its compute-bound step costs (B + 62) tokens' matmuls, so the step is longer by 62
    tokens' matmul time at every compute-bound batch."""
    ds = jp.sweep(gpu="h200-sxm", engine=[TRTLLM, NAMELESS], gemm_rate="measured", model="llama-3.1-70b-fp8",
                  tp=1, concurrency=[512, 768], think_time_s=0.0, context_tokens=512, hit_rate=1.0)
    named, nameless = ds.sel(engine="trtllm"), ds.sel(engine="trtllm-nameless")
    assert bool((named.decode_bound == nameless.decode_bound).all())
    extra = (named.tpot_ms - nameless.tpot_ms).values.ravel()
    assert (extra > 0).all()
    np.testing.assert_allclose(extra, extra[0], rtol=2e-3)  # batch-independent: m_0 x t_matmul


@pytest.mark.parametrize("engine_gemm, message", [
    ({"tensorrt": {"gemm_offset_tokens_fp8": 10.0}}, "engine_gemm"),  # unknown kernels
    ({"trtllm": {"gemm_fraction_fp8": 1.5}}, "gemm_fraction_fp8"),
    ({"trtllm": {"gemm_offset_tokens_fp16": -1.0}}, "gemm_offset_tokens_fp16"),
    ({"trtllm": {"gemm_fraction_fp4": 0.4}}, "engine_gemm.trtllm.gemm_fraction_fp4: a measurement of fp4"),
    ({"trtllm": {"gemm_rate": 0.4}}, "gemm_rate"),  # unknown field
])
def test_bad_engine_measurements_are_refused_by_name(engine_gemm, message):
    gpu = catalog.gpus()["h100-sxm"].model_dump()
    gpu.update(name="mine", engine_gemm=engine_gemm)
    with pytest.raises(JaxparetoError, match=message):
        Hardware(**gpu)
    with pytest.raises(Exception, match="gemm_kernels"):
        TRTLLM.model_validate({**TRTLLM.model_dump(), "gemm_kernels": "cublas"})


def test_every_engine_measurement_is_sourced_and_lies_around_the_gpus_median():
    for name, gpu in catalog.gpus().items():
        if gpu.engine_gemm:
            assert "engine_gemm" in gpu.sources, name
            assert set(gpu.engine_gemm) == set(GEMM_KERNELS), name
        for precision in GEMM_PRECISIONS:  # the GPU's value is the median over its engines' tables
            shares = [v for m in gpu.engine_gemm.values() if (v := getattr(m, f"gemm_fraction_{precision}"))]
            if len(shares) == 3:
                own = getattr(gpu, f"gemm_fraction_{precision}")
                assert min(shares) - 0.02 <= own <= max(shares) + 0.02, (name, precision)


def test_a_validation_row_naming_its_kernels_overrides_its_engine(tmp_path):
    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    rows = raw[raw["id"] == "mlperf41-llama2-h200-offline"]
    assert (rows["gemm_kernels"] == "trtllm").all()  # NVIDIA's harness runs TensorRT-LLM
    blank = rows.assign(id=rows["id"] + "-blank", gemm_kernels="")  # the engine's: none (seed)
    pd.concat([rows, blank]).to_csv(tmp_path / "both.csv", index=False)
    options = jp.ModelOptions(prefill_model="shared", gemm_rate="measured")
    out = jp.validate(load_validation_set(tmp_path / "both.csv"), options=options)["predicted"].to_numpy()
    # TensorRT-LLM's offset (62 tokens, the median 0) costs every compute-bound step 62 tokens'
    # matmuls: the offline replica, at its KV memory's batch, serves a little less
    assert 0.9 * out[1] < out[0] < 0.995 * out[1]
    rows.drop(columns="gemm_kernels").to_csv(tmp_path / "without.csv", index=False)  # a file may leave it out
    assert (load_validation_set(tmp_path / "without.csv")["gemm_kernels"] == "").all()
    rows.assign(gemm_kernels="cublas").to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(JaxparetoError, match="gemm_kernels.*cublas"):
        load_validation_set(tmp_path / "bad.csv")
