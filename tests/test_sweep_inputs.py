"""A sweep's inputs as objects or as flat keywords, one name per concept, and renamed spellings
that say the new one."""

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions.spec import parse_spec

GRID = dict(gpu="h100-sxm", model=["llama-3.1-70b", "qwen3-235b-a22b"], tp=[4, 8], concurrency=[1, 16, 128],
            think_time_s=[0.5, 5.0], context_tokens=[8192, 32768], hit_rate=[0.0, 0.9])


def _same(a, b):
    assert list(a.data_vars) == list(b.data_vars)
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_objects_give_what_their_flat_keywords_give():
    objects = jp.sweep(**GRID, workload=jp.Workload(osl=256, delta_tokens=1000, cache_ttl_s=3.0),
                       efficiency=jp.Efficiency(eta_decode=0.5, decode_overhead_ms=2.0),
                       solver=jp.Solver(tol=1e-7, name="exact"),
                       options=jp.ModelOptions(cache_model="ttl", pause_distribution="deterministic"))
    flat = jp.sweep(**GRID, osl=256, delta_tokens=1000, cache_ttl_s=3.0, eta_decode=0.5, decode_overhead_ms=2.0,
                    tol=1e-7, solver="exact", pause_distribution="deterministic")
    _same(objects, flat)
    assert objects.attrs["solver"] == "exact" and objects.attrs["cache_model"] == "ttl"
    assert objects.attrs["tol"] == pytest.approx(1e-7) and objects.attrs["osl"] == 256


def test_a_flat_keyword_replaces_that_field_of_the_object():
    ds = jp.sweep(**GRID, workload=jp.Workload(osl=256), osl=64, variables=["tpot_ms"])
    assert ds.attrs["osl"] == 64 and ds.attrs["delta_tokens"] == jp.Workload().delta_tokens


def test_the_solver_is_a_name_or_a_solver_object():
    by_name = jp.sweep(**GRID, solver="exact", variables=["batch_eff", "iterations"])
    by_object = jp.sweep(**GRID, solver=jp.Solver(name="exact"), variables=["batch_eff", "iterations"])
    _same(by_name, by_object)
    assert int(by_name.iterations.max()) == 0  # the exact solver iterates no damped updates
    with pytest.raises(jp.JaxparetoError, match=r"solver: unknown solver 'secant' \(allowed: damped, exact, newton\)"):
        jp.sweep(**GRID, solver="secant")
    with pytest.raises(jp.JaxparetoError, match="solver"):
        jp.sweep(**GRID, solver=3)


@pytest.mark.parametrize("call", [
    lambda: jp.sweep(**GRID, method="exact"),
    lambda: jp.sweep_to_zarr("unused.zarr", **GRID, method="exact"),
    lambda: jp.session_sweep("h100-sxm", "llama-3.1-70b", 8, 8, turns=2, method="exact"),
    lambda: jp.pareto_sweep(**GRID, method="exact"),
])
def test_the_old_solver_spelling_names_the_new_one(call):
    with pytest.raises(jp.JaxparetoError, match=r"method: renamed: the fixed-point solver is solver="):
        call()


def test_the_old_spec_solver_key_names_the_new_one():
    with pytest.raises(jp.JaxparetoError, match=r"\[solver\] method is renamed.*\[solver\] name"):
        parse_spec({"grid": {"gpu": "h100-sxm", "model": "llama-3.1-8b"}, "solver": {"method": "exact"}})
    spec = parse_spec({"grid": {"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1, "concurrency": 1},
                       "solver": {"name": "exact", "tol": 1e-7}})
    assert spec.sweep_kwargs()["solver"] == "exact" and spec.sweep_kwargs()["tol"] == 1e-7


def test_unknown_keywords_and_wrong_objects_are_named():
    with pytest.raises(jp.JaxparetoError, match="eta_decoder: unknown argument"):
        jp.sweep(**GRID, eta_decoder=0.5)
    with pytest.raises(jp.JaxparetoError, match="workload: expected a jaxpareto Workload"):
        jp.sweep(**GRID, workload={"osl": 3})
    with pytest.raises(jp.JaxparetoError, match=r"osl: out of range"):
        jp.sweep(**GRID, workload=jp.Workload(osl=0))


def test_axis_defaults_come_from_the_axis_table():
    from jaxpareto.definitions.axes import AXIS_BY_NAME

    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=1, variables=["tpot_ms"])
    for axis in ("think_time_s", "context_tokens", "hit_rate"):
        assert ds[axis].values.tolist() == [AXIS_BY_NAME[axis].default]
        assert ds[axis].attrs["units"] == AXIS_BY_NAME[axis].units


def test_a_grid_point_copies_pickles_and_names_its_axes():
    import copy
    import pickle

    point = jp.GridPoint(tp=8.0, concurrency=4.0)
    assert copy.deepcopy(point).tp == 8.0 and pickle.loads(pickle.dumps(point)).concurrency == 4.0
    assert point.replace(tp=2.0).tp == 2.0 and point.tp == 8.0
    with pytest.raises(AttributeError, match="no axis 'hit_rate'"):
        point.hit_rate


ONE = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=[4])


@pytest.mark.parametrize(("kwargs", "field", "says"), [
    (dict(gpu="h100-sxm", model="llama-3.1-8b"), "tp", "is required"),
    (dict(model="llama-3.1-8b", tp=1, concurrency=1), "gpu", "is required"),
    (dict(**ONE, percentiles="no"), "percentiles", "expected True, False or None"),
    (dict(**ONE, percentiles=False, slo={"p99_ttft_ms": 100}), "percentiles", "drops request_goodput"),
    (dict(**ONE, workload=jp.Workload(slo={"bogus": 1})), "slo", "unknown metric 'bogus'"),
    (dict(**ONE, solver="exact", calibration="hopper-measured"), "solver", "(the calibration's)"),
    (dict(**ONE, solver="exact", cache_model="lru"), "solver", "under cache_model='lru' (it needs"),
    (dict(**ONE, calibration="hopper-measured", eta_decode=0.1), "eta_decode", "set by the calibration too"),
    (dict(**ONE, calibration="hopper-measured", efficiency=jp.Efficiency(eta_decode=0.1)), "eta_decode",
     "set by the calibration too"),
])
def test_review_findings_are_named_before_any_compute(kwargs, field, says):
    """Inputs a review found taken without a word or failing late: each is named up front."""
    with pytest.raises(jp.JaxparetoError) as error:
        jp.plan_sweep(**kwargs)
    assert error.value.field == field and says in str(error.value)


def test_a_workloads_own_slo_gives_the_goodput_as_the_slo_keyword_does():
    by_keyword = jp.sweep(**ONE, slo={"p99_ttft_ms": 100.0}, variables=["request_goodput", "p99_ttft_ms"])
    in_workload = jp.sweep(**ONE, workload=jp.Workload(slo={"p99_ttft_ms": 100.0}),
                           variables=["request_goodput", "p99_ttft_ms"])
    _same(by_keyword, in_workload)
    assert "request_goodput" in jp.sweep(**ONE, workload=jp.Workload(slo={"p99_ttft_ms": 100.0}))


def test_a_definition_named_like_a_catalog_entry_must_be_that_entry():
    """A custom GPU under a catalog name would label its results with the catalog's GPU."""
    h100 = jp.catalog.gpus()["h100-sxm"]
    jp.plan_sweep(gpu=h100, model="llama-3.1-8b", tp=1, concurrency=1)  # the entry itself is fine
    bigger = h100.model_copy(update={"memory_gb": 96.0})
    for kwargs in (dict(gpu=bigger), dict(gpu="h100-sxm", hardware=[bigger])):
        with pytest.raises(jp.JaxparetoError, match="catalog's name for one"):
            jp.plan_sweep(model="llama-3.1-8b", tp=1, concurrency=1, **kwargs)
    renamed = bigger.model_copy(update={"name": "h100-96gb"})
    assert jp.plan_sweep(gpu=renamed, model="llama-3.1-8b", tp=1, concurrency=1).gpus[0].memory_gb == 96.0


def test_an_engine_named_like_a_shipped_one_must_be_that_engine_and_takes_its_calibration():
    """`jp.Engine` under a shipped name is that engine (its results labelled so): with other
    settings it is refused; with the same ones it stands for the name, a calibration's factors
    for that engine included. A definition of its own name, given in ``engines=``, is named in
    the grid like a shipped one."""
    from jaxpareto.definitions.engine import engines

    base = dict(gpu="h200-sxm", model="llama-3.1-70b", tp=2, concurrency=16, context_tokens=1024)
    looser = jp.Engine(name="trtllm", reserve_output_kv=False)
    for kwargs in (dict(engine=looser), dict(engine="trtllm", engines=[looser])):
        with pytest.raises(jp.JaxparetoError, match="shipped engine's name") as error:
            jp.plan_sweep(**base, **kwargs)
        assert error.value.field in ("engine", "engines")
    by_name, by_object = (jp.plan_sweep(**base, engine=item, calibration="hopper-measured").definitions["engine"][0]
                          for item in ("vllm", engines()["vllm"]))
    assert by_object.efficiency == by_name.efficiency and by_name.efficiency["eta_decode"] > 0.8
    mine = looser.model_copy(update={"name": "trt-paged"})
    plan = jp.plan_sweep(**{**base, "engine": ["trt-paged", "trtllm"]}, engines=[mine])
    assert [e.reserve_output_kv for e in plan.definitions["engine"]] == [False, True]


def test_a_spec_defines_engines_of_its_own_for_its_grid():
    spec = parse_spec({"grid": {"gpu": ["h200-sxm"], "model": ["llama-3.1-70b"], "tp": [2], "concurrency": [16],
                                "engine": ["vllm", "my-trt"]},
                       "engine": [{"name": "my-trt", "memory_basis": "after_weights", "reserve_output_kv": True}]})
    plan = jp.plan_sweep(**spec.sweep_kwargs())
    assert [e.name for e in plan.definitions["engine"]] == ["vllm", "my-trt"]
    assert plan.definitions["engine"][1].reserve_output_kv and plan.definitions["engine"][1].memory_basis == "after_weights"


def test_a_session_spec_sweeps_its_layout_axes():
    """A [session] spec's layout axes reach the session sweep (they had been dropped)."""
    spec = parse_spec({"grid": {"gpu": ["h100-sxm"], "model": ["llama-3.1-70b"], "tp": [4], "pp": [1, 2],
                                "concurrency": [8]},
                       "session": {"turns": 2, "initial_context_tokens": 4096, "tool_tokens": 500}})
    assert spec.session_kwargs()["pp"] == [1, 2]


def test_an_in_memory_grid_larger_than_memory_is_refused_before_it_runs(monkeypatch):
    """A grid whose outputs alone pass the machine's memory had computed, then failed to allocate
    with a numpy traceback; it is refused by name, before anything is compiled."""
    import os

    pages, real = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 256}, os.sysconf  # a machine of 1 MB
    monkeypatch.setattr(os, "sysconf", lambda name: pages[name] if name in pages else real(name))
    grid = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=1, concurrency=np.arange(1, 101), think_time_s=np.arange(100))
    with pytest.raises(jp.JaxparetoError, match=r"grid: 10,000 points x 29 variables need about 0.0 GB.*sweep_to_zarr"):
        jp.sweep(**grid)
    assert jp.sweep(**grid, variables=["ttft_ms"]).ttft_ms.size == 10_000  # 40 KB of outputs (and the flags) fit
    with pytest.raises(jp.JaxparetoError, match="num"):  # one axis of ten billion values is refused as written
        parse_spec({"grid": {"gpu": ["h100-sxm"], "model": ["llama-3.1-8b"], "tp": [1],
                             "concurrency": {"start": 1, "stop": 100, "num": 10**10}}})


def test_blocks_of_a_few_points_over_a_large_grid_are_refused_before_compute():
    """A chunk of 7 points cut a 210,000-point sweep into 30,000 launches and 800,000 chunk files;
    under one sub-batch (1,024 points) a grid may be cut into at most 256 blocks, so that small
    blocks stay available to small grids (a test's several blocks)."""
    grid = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2, 4, 8], concurrency=list(range(1, 257)),
                context_tokens=[1000, 2000, 4000, 8000])
    with pytest.raises(jp.JaxparetoError, match=r"chunk_points.*4,096 points into 1,024 blocks.*at least 1,024"):
        jp.sweep(**grid, chunk_points=7)
    assert jp.sweep(**grid, chunk_points=1024).sizes["concurrency"] == 256
    small = jp.sweep(**{**grid, "concurrency": list(range(1, 17)), "context_tokens": 1000}, chunk_points=7)
    assert bool(small.feasible.all())
