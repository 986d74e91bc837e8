"""The joint solve (jaxpareto.physics.joint, ``solver="newton"``) against the default one.

Where R(B) holds inner roots (the shared engine's prefill load, the LRU time of lognormal
pauses), ``solver="newton"`` runs Newton's method on B and those roots together; the default
"damped" solver is the damped iteration with the inner roots solved afresh at every step
("nested" below). Both must find the same fixed point on random grids that include the LRU
model's collapse past the knee (the joint one may not where two fixed points lie close
together, about 1 point in 10^4: none on these grids), and the joint one must be at least as
close to a float64 reference.
"""

import zlib

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.mapper import shared_scalars
from jaxpareto.physics.joint import MAX_ITERATIONS, _solve_small
from jaxpareto.physics.point import PREFILL_LOAD_FOLLOW, inner_unknowns, joint_system

OUTPUTS = ("batch_eff", "ttft_ms", "tpot_ms", "turns_per_s", "hit_rate_eff", "memory_wait_ms")


def _random_grid(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return dict(gpu=["h100-sxm", "b200"], model=["llama-3.1-70b", "qwen3-235b-a22b"], tp=[2, 8],
                # every session count up to past the knee, where the LRU caches collapse
                concurrency=np.unique(np.round(np.geomspace(1, 1024, 10) * rng.uniform(0.8, 1.2, 10))).astype(int),
                think_time_s=[0.0, float(rng.uniform(1, 5)), 30.0],
                context_tokens=[int(rng.integers(2048, 8192)), int(rng.integers(16384, 65536))],
                hit_rate=[0.0, float(rng.uniform(0.5, 0.97))])


OPTIONS = {
    "shared": dict(prefill_model="shared", prefill_chunk_tokens=512),
    "shared + lru": dict(prefill_model="shared", cache_model="lru"),
    "lru, lognormal": dict(cache_model="lru", pause_distribution="lognormal"),
    "shared + lru, lognormal + tier": dict(prefill_model="shared", cache_model="lru", pause_distribution="lognormal",
                                          tier_capacity_gb=512.0, tier_bandwidth_gbs=64.0),
    "measured shared": dict(prefill_model="shared", profile="measured"),
}


def _relative(a, b):
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-9)


def _error(ds, reference, variable):
    """|ds - reference| of an output relative to the reference's; the memory wait (B / M - 1
    turns, vanishing at B = M) against the TTFT it is part of."""
    scale = reference["ttft_ms" if variable == "memory_wait_ms" else variable].values
    return np.abs(ds[variable].values - reference[variable].values) / np.maximum(np.abs(scale), 1e-9)


# the lognormal and measured grids compile long (about 30-45 s each with a cold cache): slow
SLOW = {"lru, lognormal", "shared + lru, lognormal + tier", "measured shared"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
                                  for name in sorted(OPTIONS)])
def test_joint_solve_finds_the_nested_fixed_point(name):
    grid = _random_grid(zlib.crc32(name.encode()))
    options = OPTIONS[name]
    joint = jp.sweep(**grid, **options, solver="newton", variables=OUTPUTS + ("iterations",))
    nested = jp.sweep(**grid, **options, variables=OUTPUTS + ("iterations",))
    feasible = joint.feasible.values
    assert (feasible == nested.feasible.values).all()
    assert joint.converged.values[feasible].all() and nested.converged.values[feasible].all()
    # Newton's steps, not the damped iteration's: a few, and never the cap
    iterations = joint.iterations.values[feasible]
    assert np.median(iterations) <= 8 and iterations.max() < MAX_ITERATIONS
    assert np.median(iterations) < np.median(nested.iterations.values[feasible]) / 3
    for variable in OUTPUTS:
        # both stop within the tolerance (7.6e-6 in float32) of a fixed point whose outputs
        # amplify it where the hit rate or the prefill load is steep
        error = _error(joint, nested, variable)
        assert np.nanmax(error) < 5e-3, variable
        assert np.nanpercentile(error, 99) < 2e-4, variable


@pytest.mark.slow  # a float64 program of its own and a tight nested reference: about 50 s cold
def test_joint_solve_is_as_close_to_float64_as_the_nested_one():
    grid = _random_grid(7)
    options = OPTIONS["shared + lru"]
    reference = jp.sweep(**grid, **options, solver=jp.Solver(tol=1e-11), dtype="float64", variables=OUTPUTS)
    joint = jp.sweep(**grid, **options, solver="newton", variables=OUTPUTS)
    nested = jp.sweep(**grid, **options, variables=OUTPUTS)
    for variable in OUTPUTS:
        joint_error, nested_error = _error(joint, reference, variable), _error(nested, reference, variable)
        # the typical point (P99) as close as the nested solve's, and none far off; the largest
        # errors can sit where B is pinned at the KV slots, the same B in both solves (956 of
        # 1,011 sessions: turns/s 3.1e-5 off against 1.2e-5, the float32 rounding of R there)
        assert np.nanmax(joint_error) < 2e-4, (variable, np.nanmax(joint_error))
        typical = [np.nanpercentile(e, 99) for e in (joint_error, nested_error)]
        assert typical[0] <= typical[1] * 1.5 + 1e-6, (variable, typical)
    # in float64 the joint solve meets the default tolerance 1e-6
    joint64 = jp.sweep(**grid, **options, solver="newton", dtype="float64", variables=OUTPUTS)
    assert np.nanmax(_relative(joint64.batch_eff.values, reference.batch_eff.values)) < 2e-5


def test_the_solve_starts_from_the_first_undamped_step_with_the_prefill_load_solved_there():
    # from B = 1 the first step goes to the undamped B_target(1) (106 sessions for the first
    # point); the prefill load's tangent there put s = -ln(1 - ρ) at 25 where its root is 1.85,
    # and Newton took 7 steps; following B by at most PREFILL_LOAD_FOLLOW, 5. Started at that
    # step with the load solved there, 3; the second point (Z = 0) starts at its fixed point C.
    kwargs = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=4, concurrency=[256, 64], think_time_s=[10.0, 0.0],
                  context_tokens=[32768, 8192], hit_rate=[0.9, 0.5], prefill_model="shared", cache_model="lru",
                  variables=("batch_eff", "iterations"))
    joint, nested = jp.sweep(**kwargs, solver="newton"), jp.sweep(**kwargs)

    def pick(ds, i):  # the two points: (256 sessions, 10 s, 32K tokens, 90 % hits) and (64, 0 s, 8K, 50 %)
        return ds.isel(concurrency=i, think_time_s=i, context_tokens=i, hit_rate=i).squeeze()

    assert int(pick(joint, 0).iterations) <= 3 and int(pick(joint, 1).iterations) == 0
    for i in (0, 1):
        assert bool(pick(joint, i).converged)
        assert float(pick(joint, i).batch_eff) == pytest.approx(float(pick(nested, i).batch_eff), rel=1e-5)
    # the limit belongs to the prefill load alone: the LRU lifetimes follow B unlimited (and their
    # solve starts at B = 1: a second inner solve at the first step cost the lognormal LRU more
    # than the steps it saved)
    limits = {u.name: u.follow_limit for u in inner_unknowns(ModelOptions(
        prefill_model="shared", cache_model="lru", pause_distribution="lognormal"))}
    assert limits == {"gpu_log_lifetime": np.inf, "tier_log_lifetime": np.inf, "prefill_load": PREFILL_LOAD_FOLLOW}


def test_a_point_newton_left_unconverged_finds_the_damped_fixed_point():
    # started at B = 1 Newton crawled on this point to its 64-step cap at 19 sessions, flagged
    # unconverged; from the first undamped step it finds the damped iteration's 45.34 sessions
    kwargs = dict(gpu="b200", model="llama-3.1-70b", tp=8, concurrency=91, think_time_s=10.0, context_tokens=48693,
                  hit_rate=0.95, prefill_model="shared", cache_model="lru", variables=("batch_eff", "iterations"))
    joint, nested = jp.sweep(**kwargs, solver="newton"), jp.sweep(**kwargs)
    assert bool(joint.converged.squeeze()) and int(joint.iterations.squeeze()) < 20
    assert float(joint.batch_eff.squeeze()) == pytest.approx(float(nested.batch_eff.squeeze()), rel=5e-5)


def test_the_collapse_stays_on_the_nested_branch():
    # past the knee the LRU map has a state with caches kept and one with caches lost; the
    # damped iteration from B = 1 stops at the first, and so must Newton's method
    c = np.arange(1, 400, 3)
    kwargs = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=8, think_time_s=2.0, context_tokens=35536, hit_rate=0.9,
                  osl=128, delta_tokens=2128, concurrency=c, prefill_model="shared", cache_model="lru")
    joint = jp.sweep(**kwargs, solver="newton", variables=OUTPUTS).squeeze()
    nested = jp.sweep(**kwargs, variables=OUTPUTS).squeeze()
    np.testing.assert_allclose(joint.hit_rate_eff.values, nested.hit_rate_eff.values, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(joint.turns_per_s.values, nested.turns_per_s.values, rtol=1e-4)


def test_a_small_downward_fixed_point_is_not_lost_at_zero():
    # B_target(1) < 1 (two sessions, long pauses): the bracket is (0, 1], and a Newton step
    # past its open end at 0 must not stop the solve at B = 0 (a review's finding)
    kwargs = dict(gpu="h200-sxm", model="minimax-m2.5", tp=4, concurrency=2, think_time_s=27.6, context_tokens=107668,
                  hit_rate=0.0, prefill_model="shared", prefill_chunk_tokens=256, variables=OUTPUTS)
    joint, nested = jp.sweep(**kwargs, solver="newton").squeeze(), jp.sweep(**kwargs).squeeze()
    assert bool(joint.converged) and float(joint.batch_eff) == pytest.approx(float(nested.batch_eff), rel=1e-4)
    assert 0 < float(joint.batch_eff) < 1


def test_inner_unknowns_follow_the_options():
    assert inner_unknowns(ModelOptions()) == ()
    assert joint_system(ModelOptions(cache_model="lru")) is None  # exponential pauses: closed form
    assert [u.name for u in inner_unknowns(ModelOptions(prefill_model="shared", cache_model="lru",
                                                        pause_distribution="lognormal"))] == \
        ["gpu_log_lifetime", "tier_log_lifetime", "prefill_load"]
    # without a host tier (a turn's tier_slots None) the tier's LRU time is not an unknown
    assert [u.name for u in inner_unknowns(ModelOptions(cache_model="lru", pause_distribution="lognormal"),
                                           host_tier=False)] == ["gpu_log_lifetime"]
    assert len(joint_system(ModelOptions(cache_model="lru", pause_distribution="lognormal"), False).unknowns) == 1
    assert joint_system(ModelOptions(prefill_model="shared", arrivals="poisson")) is None  # the open loop
    assert joint_system(ModelOptions(prefill_model="shared")) is joint_system(ModelOptions(prefill_model="shared"))


def test_small_solve_is_forward_substitution():
    rng = np.random.default_rng(0)
    for k in (1, 2, 3):
        matrix = np.tril(rng.uniform(-1, 1, (k, k))) + np.diag(rng.uniform(1, 2, k))
        rhs = rng.uniform(-1, 1, k)
        np.testing.assert_allclose(np.asarray(_solve_small(matrix, rhs)), np.linalg.solve(matrix, rhs), rtol=1e-5)


# the damped solver's lognormal programs compile for about 12 s each: slow
@pytest.mark.parametrize("solver", ["newton", pytest.param("damped", marks=pytest.mark.slow)])
def test_an_empty_host_tier_is_left_out_of_the_program(solver):
    # a sweep without a host tier (0 GB, the default) leaves the tier's terms out of its program:
    # under lognormal pauses one inner root fewer, for either solver. The numbers are those of a
    # tier too small to hold anything, whose program keeps the tier's root
    assert shared_scalars(Workload(), Efficiency(), Solver())[0].tier_capacity_gb is None
    assert shared_scalars(Workload(tier_capacity_gb=1.0), Efficiency(), Solver())[0].tier_capacity_gb == 1.0
    grid = dict(_random_grid(11), gpu="h100-sxm", model="llama-3.1-70b")
    options = dict(cache_model="lru", pause_distribution="lognormal", variables=OUTPUTS + ("iterations",))
    without = jp.sweep(**grid, **options, solver=solver)
    tiny = jp.sweep(**grid, **options, solver=solver, tier_capacity_gb=1e-9, tier_bandwidth_gbs=64.0)
    feasible = without.feasible.values
    assert (feasible == tiny.feasible.values).all() and feasible.sum() > 50
    assert (without.converged.values == tiny.converged.values).all()
    assert np.abs(without.iterations.values - tiny.iterations.values).max() <= 1
    for variable in OUTPUTS:
        assert np.nanmax(_error(without, tiny, variable)) < 1e-4, variable
