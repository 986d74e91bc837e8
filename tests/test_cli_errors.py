"""The CLI refuses bad input with one line naming the problem, before computing or writing."""

import re
from pathlib import Path

import pytest

import jaxpareto as jp
from jaxpareto.cli import main
from jaxpareto.mapper import evaluate_block
from jaxpareto.definitions.spec import parse_spec, presets

REPO = Path(__file__).resolve().parents[1]
SMALL = """
[grid]
gpu = ["h100-sxm"]
model = ["llama-3.1-8b"]
tp = [1, 2]
concurrency = [1, 8, 64]
context_tokens = [4096]
hit_rate = { start = 0.0, stop = 1.0, num = 11 }
"""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def spec(tmp_path):
    def write(text, name="s.toml"):
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


@pytest.mark.parametrize("extra, message", [
    ('[report]\nheadline = { hitrate = 0.9 }\n', "report.headline.hitrate: unknown axis"),
    ('[report]\nheadline = { tp = 2 }\n', "is a dimension of the front"),
    ('[report]\nheadline = { context_tokens = 9999 }\n', "9999 is not on the grid"),
    ('[report]\nx = "ttft"\n', "unknown or unselected variable 'ttft'"),
    ('[report]\ndims = ["tp", "foo"]\n', "unknown dimension 'foo'"),
    ('[report]\nminimize = ["tpot_ms"]\n', "neither objective"),
    ('[[hardware]]\nname = "g"\nmemory_gb = 80\nbandwidth_gbs = 1\ntflops_fp16 = 1\n'
     '[[hardware]]\nname = "g"\nmemory_gb = 90\nbandwidth_gbs = 1\ntflops_fp16 = 1\n', "two definitions named 'g'"),
    ('[report]\ndims = []\n', "report.dims: List should have at least 1 item"),  # had taken the default
    ('[output]\nvariables = []\n', "output.variables: List should have at least 1 item"),  # had blamed the report
    # a definition named like a catalog GPU had replaced it silently, under its name
    ('[[hardware]]\nname = "h100-sxm"\nmemory_gb = 10\nbandwidth_gbs = 1\ntflops_fp16 = 1\n',
     "[[hardware]] 'h100-sxm' is the catalog's name for one"),
    ('[[engine]]\nname = "vllm"\ngpu_memory_utilization = 0.5\n', "[[engine]] 'vllm' is the catalog's name for one"),
    ('[[engine]]\nname = "e"\nreserve_output_kv = "sometimes"\n', "engine.0: Engine.reserve_output_kv: Input should be a valid boolean"),
])
def test_report_and_definitions_checked_before_compute(capsys, spec, tmp_path, extra, message):
    before = evaluate_block._cache_size()
    out = tmp_path / "never.zarr"
    code, _, err = run(capsys, "sweep", spec(SMALL + extra), "--out", out)
    assert code == 2 and message in err and "Traceback" not in err
    assert not out.exists()
    assert evaluate_block._cache_size() == before


@pytest.mark.parametrize("load, workload, message", [
    ("request_rate = [1.0]", "", "request_rate: is not a load of arrivals='staggered'"),
    ("concurrency = [2]", '[workload]\narrivals = "poisson"\n', "concurrency: is not a load of arrivals='poisson'"),
])
def test_the_other_loops_load_is_named_with_the_fix(capsys, spec, load, workload, message):
    # not "grid.concurrency: is required": the load given belongs to the other loop
    code, _, err = run(capsys, "sweep", spec(SMALL.replace("concurrency = [1, 8, 64]", load) + workload))
    assert code == 2 and message in err, err


@pytest.mark.parametrize(("value", "message"), [
    ('{ start = 1, stop = 100, num = 1 }', "num = 1 gives start alone"),  # had dropped stop silently
    ('{ start = 2, stop = 2, num = 4 }', "start equals stop"),  # had named a duplicate no one typed
    ('{ start = 1, stop = 1, num = 1 }', "num = 1 gives start alone"),  # had been accepted, against the README
])
def test_a_range_of_one_value_is_refused_with_the_fix(capsys, spec, value, message):
    code, _, err = run(capsys, "sweep", spec(SMALL.replace("concurrency = [1, 8, 64]", f"concurrency = {value}")))
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(("line", "message"), [
    ("concurrency = [1, -2]", "grid.concurrency: out of range: -2 (allowed: [1, 16777216])"),  # had read -2.0
    ("tp = [1, 3.5]", "grid.tp: must be a whole number, got 3.5"),
    ("hit_rate = [0.0, 1.5]", "grid.hit_rate: out of range: 1.5 (allowed: [0, 1])"),
])
def test_a_bad_grid_value_is_named_by_its_spec_field(capsys, spec, line, message):
    axis = line.split(" =")[0]
    text = "\n".join(line if row.startswith(axis + " =") else row for row in SMALL.splitlines())
    code, _, err = run(capsys, "sweep", spec(text))
    assert code == 2 and message in err and "Traceback" not in err, err


def test_optimize_names_the_flag_of_a_bad_max_concurrency(capsys):
    code, _, err = run(capsys, "optimize", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--max-concurrency", "-3")
    assert code == 2 and "--max-concurrency: out of range: -3" in err, err


def test_a_missing_store_is_said_to_be_missing(capsys, tmp_path):
    for argv in (["pareto", tmp_path / "nosuch.zarr"], ["plot", tmp_path / "nosuch.zarr", "--out", tmp_path / "p"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "does not exist" in err and "not a zarr store" not in err, err


def test_bad_range_is_a_spec_error(capsys, spec):
    text = SMALL.replace("concurrency = [1, 8, 64]", 'concurrency = { start = 0, stop = 64, num = 8, scale = "log" }')
    code, _, err = run(capsys, "sweep", spec(text))
    assert code == 2 and "start > 0" in err


def test_output_paths(capsys, spec, tmp_path):
    s = spec(SMALL)
    code, _, err = run(capsys, "sweep", s, "--out", tmp_path / "nodir" / "x.zarr")
    assert code == 2 and "does not exist" in err
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    code, _, err = run(capsys, "sweep", s, "--out", precious, "--overwrite")
    assert code == 2 and "not a zarr store" in err
    assert (precious / "notes.txt").read_text() == "keep me"
    afile = tmp_path / "f"
    afile.write_text("x")
    code, _, err = run(capsys, "sweep", s, "--out", afile, "--overwrite")
    assert code == 2 and "not a zarr store" in err
    # a path under a file: the file is named (it had said its folder does not exist)
    for argv in (("--out", afile / "x.zarr"), ("--out", afile / "deeper" / "x.zarr"),
                 ("--out", tmp_path / "y.zarr", "--csv", afile / "t.csv")):
        code, _, err = run(capsys, "sweep", s, *argv)
        assert code == 2 and f"{afile} is a file, not a folder" in err, err


def test_pareto_errors_and_selection(capsys, spec, tmp_path):
    store = tmp_path / "s.zarr"
    assert run(capsys, "sweep", spec(SMALL), "--out", store)[0] == 0
    code, out, _ = run(capsys, "pareto", store, "--sel", "hit_rate=0.3", "--sel", "context_tokens=4096.0")
    assert code == 0 and "hit_rate=0.3" in out  # range values are rounded: 0.3, not 0.30000000000000004
    code, out, _ = run(capsys, "pareto", store, "--x", "ttft_ms", "--minimize", "ttft_ms")
    assert code == 0 and "min ttft_ms" in out
    code, out, _ = run(capsys, "pareto", store, "--x", "ttft_ms")  # a latency is minimised unless told
    assert code == 0 and "(min ttft_ms and max output_tokens_per_s_per_gpu)" in out
    # an objective not given keeps the report's, with its direction (it had reset to the default)
    reported = tmp_path / "r.zarr"
    report = '\n[report]\nx = "output_tokens_per_s_per_user"\ny = "turns_per_s"\nminimize = []\n'
    assert run(capsys, "sweep", spec(SMALL + report), "--out", reported)[0] == 0
    code, out, _ = run(capsys, "pareto", reported, "--x", "tpot_ms", "--minimize", "tpot_ms")
    assert code == 0 and "(min tpot_ms and max turns_per_s)" in out
    for argv, message in [
        (("pareto", tmp_path), "not a zarr store"),
        (("pareto", store, "--sel", "tp=2"), "is a dimension of the front"),
        (("pareto", store, "--sel", "gpu=b200"), "'b200' is not on the grid"),
        (("pareto", store, "--dims", "tp,foo"), "unknown dimension 'foo'"),
        (("pareto", store, "--dims", ""), "need one or more distinct dimensions"),  # had fallen back silently
        (("pareto", store, "--sel", "foo=1"), "unknown axis 'foo' in 'foo=1'"),
        (("pareto", store, "--sel", "hit_rate"), "expected AXIS=VALUE, got 'hit_rate'"),
        (("pareto", store, "--csv", tmp_path / "nodir" / "f.csv"), "does not exist"),
        # what had been accepted silently: the last --sel winning, one objective against itself
        (("pareto", store, "--sel", "hit_rate=0.3", "--sel", "hit_rate=0.0"), "--sel hit_rate: selected twice"),
        (("pareto", store, "--x", "ttft_ms", "--y", "ttft_ms"), "report y: is x too"),
        (("pareto", store, "--x", "ttft_ms", "--minimize", "ttft_ms", "--minimize", "ttft_ms"), "names an objective twice"),
        (("sweep", spec(SMALL), "--max-front-points", "3"), "--max-front-points: applies with --reduce only"),
        (("calibrate", "--train", "gpu=h100-sxm", "--test-fraction", "0.5", "--out", tmp_path / "c.toml"),
         "--test-fraction: applies without --train only"),
    ]:
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err and "Traceback" not in err, (argv, err)


def test_sweep_method_is_renamed_solver(capsys, spec):
    s = spec(SMALL)
    for argv in (("sweep", s, "--method", "exact"), ("sweep", "--method=damped"), ("sweep", s, "--method")):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == ""
        assert err == "jaxpareto: error: --method: renamed: the fixed-point solver is --solver (damped, exact, newton)\n"
    code, out, err = run(capsys, "sweep", s, "--solver", "exact")
    assert code == 0 and "solver exact" in out, err
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", str(s), "--solver", "secant"])
    assert exit_.value.code == 2 and "invalid choice: 'secant'" in capsys.readouterr().err


def test_unknown_preset_names_field_and_lists_presets(capsys):
    code, out, err = run(capsys, "presets", "--show", "chatt")
    assert code == 2 and out == ""
    assert err.startswith("jaxpareto: error: --show: no preset named 'chatt' (allowed: ") and err.count("\n") == 1
    shipped = presets()
    assert {"chat", "code_agent", "tracelab_claude_code"} <= set(shipped)
    for name in shipped:
        assert name in err


def test_non_utf8_spec(capsys, tmp_path):
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe\x00grid")
    code, _, err = run(capsys, "sweep", path)
    assert code == 2 and "UTF-8" in err


def test_readme_spec_example_is_valid():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", readme, re.S).group(1)
    import tomllib

    spec = parse_spec(tomllib.loads(block))
    plan_kwargs = spec.sweep_kwargs()
    from jaxpareto.cli._common import Report
    from jaxpareto.dataset.pareto import default_dims
    from jaxpareto.dataset.plan import plan_sweep

    plan = plan_sweep(**plan_kwargs)
    dims = spec.report.dims or list(default_dims(plan.dims))  # as `jaxpareto sweep` resolves them
    Report(spec.report.x, spec.report.y, dims, spec.report.minimize, plan.variables).cell(
        plan.coords, spec.report.headline, "report.headline")


def test_numpy_scalars_accepted():
    import numpy as np

    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=np.int64(1), concurrency=np.arange(1, 4),
                  context_tokens=np.int32(4096), osl=np.int64(128), max_iter=np.int64(500), eta_decode=np.float32(0.4))
    assert ds.feasible.all()
    m = jp.Model(name="m", params_total_b=np.float32(7.0), layers=np.int64(32), kv_heads=np.int64(8), head_dim=128)
    assert m.layers == 32


def test_an_unknown_output_in_variables_is_named(capsys):
    assert main(["sweep", "--variables", "tpot,ttft_ms"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxpareto: error: variables: unknown output 'tpot'") and "Traceback" not in err


def test_every_output_option_refuses_an_existing_file_unless_overwrite(tmp_path, capsys):
    import jaxpareto as jp

    store = tmp_path / "s.zarr"
    jp.sweep_to_zarr(store, gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 8], progress=False)
    csv = tmp_path / "front.csv"
    assert main(["pareto", str(store), "--csv", str(csv)]) == 0
    capsys.readouterr()
    assert main(["pareto", str(store), "--csv", str(csv)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert main(["pareto", str(store), "--csv", str(csv), "--overwrite"]) == 0
    assert main(["sweep", "chat", "--out", str(store)]) == 2  # a store of other inputs
    err = capsys.readouterr().err
    assert "--overwrite" in err and "overwrite=True" not in err


def test_a_calibration_or_an_optimize_spec_given_to_sweep_is_named(capsys):
    """Files of the project given to the wrong command: the error says which command takes them."""
    code, _, err = run(capsys, "sweep", REPO / "sweeps" / "calibration.toml")
    assert code == 2 and "a [fit] table is a calibration file's: give it as --calibration FILE" in err
    code, _, err = run(capsys, "sweep", REPO / "sweeps" / "code_agent_slo.toml")
    assert code == 2 and "grid.tp: is required for a sweep; this spec's [optimize] table searches tp" in err
    assert "`jaxpareto optimize SPEC`" in err
