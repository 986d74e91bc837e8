"""The validation-set schema's serving-run columns (engine, mode, parallel layout, `unsupported`)
and the AIConfigurator converter (scripts/import_aiconfigurator.py) with the set it wrote."""

import csv
import importlib.util
import sys
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from jaxpareto.definitions import catalog
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.measure.predict import predict
from jaxpareto.measure.row_inputs import row_inputs
from jaxpareto.measure.validation_set import COLUMNS, ENGINES, default_path, load_validation_set, unsupported_reason

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the scripts import their shared helpers (_common) as `python scripts/X.py` does
spec = importlib.util.spec_from_file_location("import_aiconfigurator", ROOT / "scripts" / "import_aiconfigurator.py")
importer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(importer)

AIC = ROOT / "jaxpareto" / "data" / "aiconfigurator_silicon.csv"
SOURCE_COLUMNS = (
    "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
    "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,"
    "prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
    "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,"
    "decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms").split(",")
AGG = dict(pp_size="1", attention_dp_size="1", mode="agg")
# Six source rows in silicon_sample.csv's layout: TensorRT-LLM FP8 Llama (KV fp8), vLLM Qwen3-32B with
# no quant mode (bf16), SGLang DeepSeek-R1 NVFP4 with expert parallelism, a GLM-5 row (not in the
# catalog), a disaggregated TensorRT-LLM Kimi K2.5 run and vLLM serving an NVIDIA FP8 checkpoint.
SOURCE = [
    dict(AGG, id="llama70", silicon_data_source="db; silicon_concurrency=8", backend="trtllm", backend_version="1.0",
         model_path="meta-llama/Llama-3.1-70B", system="h100_sxm", precision="fp8", isl="1024", osl="128",
         gemm_quant_mode="fp8", moe_quant_mode="fp8", batch_size="8", tp_size="2", moe_tp_size="2", moe_ep_size="1",
         silicon_ttft_ms="100.5", silicon_tpot_ms="20.25"),
    dict(AGG, id="qwen32", silicon_data_source="db; silicon_concurrency=4", backend="vllm", backend_version="0.12.0",
         model_path="Qwen/Qwen3-32B", system="h200_sxm", isl="4000", osl="1000", batch_size="4", tp_size="1",
         moe_tp_size="0", moe_ep_size="0", silicon_ttft_ms="300", silicon_tpot_ms="15"),
    dict(AGG, id="dsr1", silicon_data_source="db; silicon_concurrency=64", backend="sglang", backend_version="0.5.9",
         model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", precision="fp4", isl="1024", osl="1024",
         gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", batch_size="64", tp_size="8", moe_tp_size="1",
         moe_ep_size="8", silicon_ttft_ms="900", silicon_tpot_ms="12"),
    dict(AGG, id="minimax", silicon_data_source="db; silicon_concurrency=8", backend="vllm", backend_version="0.19.0",
         model_path="zhipuai/GLM-5", system="b300_sxm", precision="fp8", isl="1024", osl="1024",
         gemm_quant_mode="fp8", moe_quant_mode="fp8", batch_size="8", tp_size="4", moe_tp_size="4", moe_ep_size="1",
         silicon_ttft_ms="200", silicon_tpot_ms="17"),
    dict(id="kimi", silicon_data_source="db; silicon_concurrency=32", backend="trtllm", backend_version="1.1.0",
         model_path="moonshotai/Kimi-K2.5", system="gb200", precision="fp4", mode="disagg", isl="8192", osl="1024",
         gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", prefill_num_workers="2", prefill_tp_size="4",
         prefill_pp_size="1", prefill_attention_dp_size="1", prefill_moe_tp_size="1", prefill_moe_ep_size="4",
         decode_num_workers="1", decode_tp_size="4", decode_pp_size="1", decode_attention_dp_size="1",
         decode_moe_tp_size="1", decode_moe_ep_size="4", silicon_ttft_ms="700", silicon_tpot_ms="9.5"),
    dict(AGG, id="llama8nv", silicon_data_source="db; silicon_concurrency=1", backend="vllm", backend_version="0.11",
         model_path="nvidia/Llama-3.1-8B-Instruct-FP8", system="h200_sxm", precision="fp8", isl="1024", osl="1024",
         gemm_quant_mode="fp8", moe_quant_mode="fp8", batch_size="1", tp_size="1", moe_tp_size="1", moe_ep_size="1",
         silicon_ttft_ms="20", silicon_tpot_ms="4"),
]


def test_shipped_validation_csv_loads_with_layout_defaults():
    rows = load_validation_set()
    assert len(rows) == 106
    assert list(rows.columns) == [*COLUMNS, "unsupported"]
    # DeepSeek-R1's MLPerf rows give a layout: NVIDIA's attention DP over 8 GPUs, 8-way EP; three
    # offline rows pipeline over 2 stages as their submissions' configurations do
    laid_out = rows["id"].str.startswith("mlperf51-dsr1")
    assert laid_out.sum() == 6
    assert (rows.loc[laid_out, ["tp", "attention_dp", "moe_tp", "moe_ep"]] == [1, 8, 1, 8]).all().all()
    pipelined = {"mlperf51-l405-b200-nvidia-offline": 2, "mlperf51-l405-h200-nebius-offline": 4,
                 "mlperf51-llama2-h100-cisco-offline": 1}  # id -> TP, each with PP 2
    staged = rows["id"].isin(pipelined)
    assert (rows.loc[staged, "pp"] == 2).all() and (rows.loc[~staged, "pp"] == 1).all()
    assert rows.loc[staged].set_index("id")["tp"].to_dict() == pipelined
    others = rows[~laid_out]
    assert (others["attention_dp"] == 1).all() and (others["moe_ep"] == 1).all()
    assert (others["moe_tp"] == others["tp"]).all() and rows["moe_tp"].dtype == "int64"
    assert (rows["mode"] == "agg").all() and (rows["unsupported"] == "").all()
    # only the KV-capacity row names its engine: vLLM's memory share decides what it measures
    assert set(rows.loc[rows["engine"] != "", "id"]) == {"vllm-kvcap-l70b-h100-tp4"}


def _shipped_with(tmp_path, field, value):
    frame = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    frame.loc[0, field] = value
    path = tmp_path / "validation.csv"
    frame.to_csv(path, index=False)
    return path


def test_unknown_engine_is_refused_naming_the_field(tmp_path):
    with pytest.raises(JaxparetoError, match=r"\.engine.*unknown value 'tgi'") as error:
        load_validation_set(_shipped_with(tmp_path, "engine", "tgi"))
    assert all(engine in str(error.value) for engine in ENGINES)
    with pytest.raises(JaxparetoError, match=r"\.mode.*unknown value"):
        load_validation_set(_shipped_with(tmp_path, "mode", "split"))
    with pytest.raises(JaxparetoError, match=r"\.pp.*whole number"):
        load_validation_set(_shipped_with(tmp_path, "pp", "1.5"))


def test_computed_unsupported_column_is_not_a_csv_column(tmp_path):
    frame = pd.read_csv(default_path(), dtype=str, keep_default_na=False).assign(unsupported="")
    frame.to_csv(tmp_path / "v.csv", index=False)
    with pytest.raises(JaxparetoError, match="unknown.*unsupported"):
        load_validation_set(tmp_path / "v.csv")


def test_unsupported_reason_names_each_layout():
    row = dict(model="deepseek-v3", tp=8, pp=1, attention_dp=1, moe_tp=8, moe_ep=1, mode="agg")
    assert unsupported_reason(row) == ""
    assert unsupported_reason(dict(model="llama-3.1-70b", tp=4)) == ""  # blank layout: plain TP
    assert unsupported_reason(row | dict(mode="disagg")).startswith("disaggregated prefill/decode without its "
                                                                     "prefill pool")
    assert unsupported_reason(row | dict(mode="disagg", prefill_workers=2, prefill_tp=4, decode_workers=1)) == ""
    assert unsupported_reason(row | dict(pp=2)) == ""  # pipeline parallelism (physics/layout.py)
    assert unsupported_reason(row | dict(pp=2, moe_tp=4)) == "MoE split moe_tp 4 x moe_ep 1 over tp 8 x " \
                                                               "attention_dp 1 GPUs"
    # expert parallelism is expressed (physics/layout.py) when the experts fill the replica
    assert unsupported_reason(row | dict(moe_tp=1, moe_ep=8)) == ""
    # ... and attention DP with it, the ranks in lockstep (physics/layout.py)
    assert unsupported_reason(row | dict(tp=1, attention_dp=8, moe_tp=1, moe_ep=8)) == ""
    assert unsupported_reason(row | dict(tp=1, attention_dp=8, moe_tp=1, moe_ep=8, mode="disagg", prefill_workers=1,
                                         prefill_tp=8, decode_workers=1)) == \
        "attention data parallelism (attention_dp 8) or pipeline parallelism (pp 1) in a disaggregated pool"
    assert unsupported_reason(row | dict(tp=2, attention_dp=4, moe_tp=1, moe_ep=4)).endswith(
        "MoE split moe_tp 1 x moe_ep 4 over tp 2 x attention_dp 4 GPUs")


def test_converter_on_a_small_source(tmp_path, capsys):
    source = tmp_path / "silicon_sample.csv"
    with open(source, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SOURCE_COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(SOURCE)
    out = tmp_path / "aic.csv"
    assert importer.main(["--source", str(source), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "source rows read: 6" in printed and "5 source rows, 10 validation rows" in printed
    assert f"dropped     1: {importer.DROP_MODEL}" in printed
    with pytest.raises(SystemExit):  # no silent overwrite
        importer.main(["--source", str(source), "--out", str(out)])

    rows = load_validation_set(out)
    assert list(pd.read_csv(out).columns) == list(COLUMNS)
    assert list(rows["id"]) == sorted(rows["id"]) and len(rows) == 10
    by_id = rows.set_index("id")
    llama = by_id.loc["aic-llama70-ttft"]
    assert (llama["value"], by_id.loc["aic-llama70-tpot", "value"]) == (100.5, 20.25)
    assert (llama["model"], llama["gpu"], llama["engine"], llama["engine_version"]) == (
        "llama-3.1-70b", "h100-sxm", "trtllm", "1.0")
    assert (llama["gpus"], llama["tp"], llama["concurrency"], llama["load"], llama["statistic"]) == (
        2, 2, 8.0, "concurrency", "mean")
    assert (llama["weight_dtype"], llama["expert_weight_dtype"], llama["kv_dtype"]) == ("fp8", "", "fp8")
    assert "row id llama70; db; silicon_concurrency=8" in llama["reference"]
    qwen = by_id.loc["aic-qwen32-tpot"]
    assert (qwen["weight_dtype"], qwen["kv_dtype"], qwen["engine"], qwen["unsupported"]) == ("bf16", "bf16", "vllm", "")
    dsr1 = by_id.loc["aic-dsr1-ttft"]
    assert (dsr1["model"], dsr1["weight_dtype"], dsr1["expert_weight_dtype"], dsr1["kv_dtype"]) == (
        "deepseek-v3", "fp4", "fp4", "bf16")  # SGLang: KV in the activation dtype
    assert "DeepSeek-V3's architecture" in dsr1["notes"] and dsr1["unsupported"] == ""  # EP 8: expressed
    assert not by_id.index.str.contains("minimax").any()
    kimi = by_id.loc["aic-kimi-tpot"]
    assert (kimi["mode"], kimi["gpus"], kimi["tp"], kimi["concurrency"]) == ("disagg", 12, 4, 32.0)
    assert (kimi["weight_dtype"], kimi["expert_weight_dtype"], kimi["kv_dtype"]) == ("bf16", "fp4", "fp8")
    # its pools are plain TP workers: expressed (physics/disaggregation.py)
    assert (kimi["prefill_workers"], kimi["prefill_tp"], kimi["decode_workers"], kimi["unsupported"]) == (2, 4, 1, "")
    assert by_id.loc["aic-llama8nv-ttft", "kv_dtype"] == "fp8"  # NVIDIA ModelOpt checkpoint, even on vLLM


@pytest.fixture(scope="module")
def aic():
    return load_validation_set(AIC)


def test_shipped_aiconfigurator_set(aic):
    assert set(aic["source"]) == {"AIConfigurator silicon"} and len(aic) > 5000
    assert set(aic["model"]) <= set(catalog.models()) and set(aic["gpu"]) <= set(catalog.gpus())
    metrics = aic.groupby(aic["id"].str.rsplit("-", n=1).str[0])["metric"].agg(frozenset)
    assert (metrics == frozenset({"ttft_ms", "tpot_ms"})).all()
    assert (aic["unit"] == "ms").all() and (aic["load"] == "concurrency").all()
    assert aic["unsupported"].eq("").any() and aic["unsupported"].ne("").any()
    blackwell = {"b200", "b300", "gb200"}
    assert blackwell <= set(aic["gpu"])
    for engine in ENGINES:
        gpus = set(aic.loc[aic["engine"] == engine, "gpu"])
        assert {"h100-sxm", "h200-sxm"} <= gpus and gpus & blackwell, engine


def test_length_spreads_are_optional_and_checked(tmp_path):
    """A file without ``isl_cv``/``osl_cv`` loads with them blank (fixed lengths) and predicts as
    with them blank; 0 is fixed lengths too; a spread outside Workload's 0-10 or not a number is
    refused naming the row and the column."""
    frame = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    plain = frame[~frame["id"].str.startswith("mlperf")].head(6)
    older = tmp_path / "older.csv"
    plain.drop(columns=["isl_cv", "osl_cv"]).to_csv(older, index=False)
    rows = load_validation_set(older)
    assert rows["isl_cv"].isna().all() and rows["osl_cv"].isna().all()
    zero = plain.copy()
    zero[["isl_cv", "osl_cv"]] = "0"
    zeroed = tmp_path / "zero.csv"
    zero.to_csv(zeroed, index=False)
    with jax.enable_x64(True):
        np.testing.assert_array_equal(predict(rows), predict(load_validation_set(zeroed)))
    for value, message in (("10.5", r"out of range"), ("-0.1", r"out of range"), ("wide", r"not a number")):
        with pytest.raises(JaxparetoError, match=rf"\(line 2\)\.osl_cv: {message}"):
            load_validation_set(_shipped_with(tmp_path, "osl_cv", value))


def test_expert_imbalance_is_optional_checked_and_slows_the_busiest_gpu(tmp_path):
    """``expert_imbalance`` sets the rows' `Workload.expert_imbalance`: a file without it, or with it
    blank or 1, predicts as balanced routing; the DeepSeek-R1 rows' estimate slows their experts
    (offline throughput falls, server TPOT rises, the more the larger f); a value below 1, not a
    number, or on a run without expert parallelism is refused naming the row and the column."""
    frame = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    moe = frame[frame["id"].str.startswith("mlperf51-dsr1-b200")].reset_index(drop=True)
    assert set(moe["expert_imbalance"]) == {"1.34"} and moe["notes"].str.contains("no EPLB").all()
    versions = {}
    for name, column in (("absent", None), ("blank", ""), ("one", "1"), ("shipped", "1.34"), ("more", "2")):
        version = moe.drop(columns="expert_imbalance") if column is None else moe.assign(expert_imbalance=column)
        path = tmp_path / f"{name}.csv"
        version.to_csv(path, index=False)
        rows = load_validation_set(path)
        assert row_inputs(rows).workload.expert_imbalance.tolist() == [float(column or 1)] * len(rows)
        with jax.enable_x64(True):
            versions[name] = predict(rows)
    np.testing.assert_array_equal(versions["absent"], versions["blank"])
    np.testing.assert_array_equal(versions["absent"], versions["one"])
    metric = moe["metric"].to_numpy()
    offline, tpot = metric == "output_tokens_per_s_total", metric == "tpot_ms"
    assert (versions["one"][offline] > versions["shipped"][offline]).all()
    assert (versions["shipped"][offline] > versions["more"][offline]).all()
    assert (versions["one"][tpot] < versions["shipped"][tpot]).all()
    assert (versions["shipped"][tpot] < versions["more"][tpot]).all()
    for value, message in (("0.9", r"out of range"), ("hot", r"not a number")):
        with pytest.raises(JaxparetoError, match=rf"\(line 2\)\.expert_imbalance: {message}"):
            load_validation_set(_shipped_with(tmp_path, "expert_imbalance", value))
    with pytest.raises(JaxparetoError, match=r"\(line 2\)\.expert_imbalance: .*moe_ep > 1"):  # a dense Llama row
        load_validation_set(_shipped_with(tmp_path, "expert_imbalance", "1.2"))
