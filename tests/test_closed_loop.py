"""Closed-loop invariants (seed eq. 4) on every converged point of a sweep."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxpareto as jp


def _converged(ds):
    return ds.where(ds.converged)


def test_fixed_point_equation_holds_to_tol(small_grid):
    ds = _converged(small_grid)
    tol = small_grid.attrs["tol"]
    b = ds.batch_eff.values
    target = ds.concurrency_eff.values * ds.gpu_active_ratio.values
    ok = np.isfinite(b)
    assert ok.sum() > 500
    # |B_target - B| <= tol x B at the B kept, plus float32 rounding of the stored outputs.
    assert np.all(np.abs(target[ok] - b[ok]) <= (tol + 4e-7) * b[ok] + 1e-6)


def test_zero_think_time_gives_batch_equal_to_admitted_sessions(small_grid):
    ds = _converged(small_grid).sel(think_time_s=0.0)
    ok = np.isfinite(ds.batch_eff.values)
    np.testing.assert_allclose(ds.batch_eff.values[ok], ds.concurrency_eff.values[ok], rtol=2e-6)
    np.testing.assert_allclose(ds.gpu_active_ratio.values[ok], 1.0)


def test_littles_law(small_grid):
    ds = _converged(small_grid)
    z_ms = ds.think_time_s * 1e3
    sessions = ds.turns_per_s * (ds.latency_ms + z_ms) / 1e3
    ok = np.isfinite(sessions.values)
    np.testing.assert_allclose(sessions.values[ok], ds.concurrency_eff.broadcast_like(sessions).values[ok], rtol=1e-5)


def test_infeasible_points_carry_nan_and_flags(small_grid):
    raw = small_grid
    mask = ~raw.feasible.values
    assert mask.sum() > 50
    for name in ("ttft_ms", "tpot_ms", "latency_ms", "batch_eff", "turns_per_s", "output_tokens_per_s_per_gpu"):
        assert np.isnan(raw[name].values[mask]).all(), name
    assert not raw.converged.values[mask].any()
    assert (raw.decode_bound.values[mask] == -1).all()
    assert (raw.iterations.values[mask] == 0).all()
    # and the reason is visible: no memory for KV, or not one session fits
    assert (raw.concurrency_eff.values[mask] < 1).all()


def test_unconverged_points_are_flagged_not_hidden():
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=64, think_time_s=1.0,
                  context_tokens=16384, max_iter=2)
    assert not bool(ds.converged.squeeze())
    assert bool(ds.feasible.squeeze())
    assert int(ds.iterations.squeeze()) == 2
    assert not jp.pareto_front(ds).any()


def test_float64_agrees_with_float32():
    kwargs = dict(gpu=["h100-sxm", "mi300x"], model=["llama-3.1-70b", "qwen3-235b-a22b"], tp=[2, 8],
                  concurrency=[1, 30, 300], think_time_s=[0.0, 5.0], context_tokens=[8192, 100000], hit_rate=[0.0, 0.95])
    a = jp.sweep(**kwargs)
    b = jp.sweep(**kwargs, dtype="float64")
    assert a.ttft_ms.dtype == np.float32 and b.ttft_ms.dtype == np.float64
    np.testing.assert_array_equal(a.feasible.values, b.feasible.values)
    both = (a.converged & b.converged).values
    assert both.sum() > 50
    for name in ("ttft_ms", "tpot_ms", "latency_ms", "batch_eff", "turns_per_s", "output_tokens_per_s_per_gpu"):
        np.testing.assert_allclose(a[name].values[both], b[name].values[both], rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("solver", ["damped", "exact"])
def test_a_step_carries_at_least_the_request_that_decodes(solver):
    """One session that pauses most of the time: the closed loop's mean batch B is well below 1,
    but its steps run one request, so TPOT is the step of one whatever the pause (a MoE step at
    B < 1 read a fraction of the K experts a token routes to: Mixtral-8x7B went 7.6 -> 0.88 ms
    from Z = 0 to 30 s, a third of the time its active weights take to read)."""
    from jaxpareto.physics.decode import decode_coefficients, decode_step
    from jaxpareto.definitions.hardware import effective_tflops

    ds = jp.sweep(gpu="h200-sxm", model="mixtral-8x7b", tp=2, concurrency=1, think_time_s=[0.0, 2.0, 10.0, 30.0],
                  context_tokens=8192, hit_rate=0.9, solver=solver)
    batch, tpot = ds.batch_eff.values.ravel(), ds.tpot_ms.values.ravel()
    assert batch[0] == pytest.approx(1.0) and batch[-1] < 0.05
    hw, m = jp.catalog.gpus()["h200-sxm"].to_params(), jp.catalog.models()["mixtral-8x7b"].to_params()
    one = decode_step(decode_coefficients(hw, m, 2, 8192.0, effective_tflops(hw, m.compute_bits), 0.40, 1.10), 1.0)
    np.testing.assert_allclose(tpot, float(one.tpot_ms), rtol=1e-5)
    active_read_ms = m.params_active_b * 2.0 / (2 * hw.bandwidth_gbs) * 1e3  # bf16, at the full bandwidth
    assert tpot.min() > active_read_ms


def _two_fixed_points(latency, b):
    """λ R(B) = B + c (B - 1)(B - b_2): increasing on [0, 5], fixed points 1 (stable, slope
    1 - c (b_2 - 1)) and b_2 (unstable), with λ = 1 (``latency`` holds c and b_2)."""
    c, second = latency
    return b + c * (b - 1.0) * (b - second)


@pytest.mark.parametrize(("c", "second"), [(0.2, 3.0), (0.025, 3.0), (0.4, 1.5)])
def test_the_open_loop_climbs_undamped_to_its_smallest_fixed_point(c, second):
    """B <- λ R(B) from 0, undamped: the iterates stay below the smallest fixed point (1), never
    pass to the unstable one beyond it (3 or 1.5), and reach it within the tolerance in about as
    many steps as its slope s there says, log(tol) / log(s) (s = 0.6, 0.95, 0.8: 27, 270, 62),
    where the seed's damping of 0.4 would take 2.5x to 4x as many."""
    from jaxpareto.physics.closed_loop import LoopInputs, solve_closed_loop

    solver = jp.Solver(tol=1e-6)
    inputs = LoopInputs((jnp.float32(c), jnp.float32(second)), jnp.float32(1.0), jnp.float32(0.0),
                        rate_per_ms=jnp.float32(1.0), batch_cap=jnp.float32(100.0))
    found = solve_closed_loop(_two_fixed_points, inputs, solver, open_loop=True).fixed_point
    assert bool(found.converged)
    slope = 1.0 - c * (second - 1.0)
    # within tol of the map's residual: |B - 1| <= tol B / (1 - slope), from below
    assert 1.0 - 2e-6 / (1.0 - slope) <= float(found.batch) <= 1.0 + 1e-6
    assert int(found.iterations) <= np.log(1e-7) / np.log(slope) + 5


def _falling(latency, b):
    """λ R(B) = 30 - B / 2 below B = 25 and no finite latency beyond: one fixed point, 20, that
    the map falls through (as clusters of prefills shrink with B near the prefill capacity)."""
    return jnp.where(b < latency[0], 30.0 - 0.5 * b, jnp.inf)


@pytest.mark.parametrize("cap", [26.0, 100.0])
def test_the_open_loop_comes_down_damped_where_its_map_falls(cap):
    """Where λ R(B) falls with B an undamped step passes the fixed point (to 30, whose target 15
    lies below it) or the cap (26, whose target is not finite): the step is taken back, the
    iteration goes on damped from 0 and finds the damped iteration's fixed point, 20, converged (the undamped
    iteration alone flagged 10 points of 133,120 of the models benchmark's open-loop grid beyond
    capacity where the damped one found their fixed point)."""
    from jaxpareto.physics.closed_loop import LoopInputs, solve_closed_loop

    inputs = LoopInputs((jnp.float32(25.0),), jnp.float32(1.0), jnp.float32(0.0), rate_per_ms=jnp.float32(1.0),
                        batch_cap=jnp.float32(cap))
    found = solve_closed_loop(_falling, inputs, jp.Solver(tol=1e-6), open_loop=True).fixed_point
    assert bool(found.converged)
    np.testing.assert_allclose(float(found.batch), 20.0, rtol=1e-5)


def _dip(latency, b):
    """λ R(B) falling from 3.6 through a stable fixed point at 1, jumping above B at 1.5 (an
    unstable crossing) and falling through a stable fixed point at 3: an undamped first step
    lands at 3.6, past all three."""
    del latency
    return jnp.where(b < 1.5, 3.6 - 2.6 * b, jnp.where(b < 2.0, b + 0.5, 3.0 + 0.5 * (b - 3.0)))


def test_an_undamped_step_past_a_fixed_point_is_taken_back():
    """A review's case: the first undamped step, from 0 to 3.6, passes the fixed point 1 that
    the damped iteration from 0 finds; its target there (3.3) lies below it. Coming down damped
    from 3.6 had found the other stable fixed point, 3, converged; the step is taken back and
    the damped iteration goes on from 0, to 1."""
    from jaxpareto.physics.closed_loop import LoopInputs, damped_loop, solve_closed_loop

    solver = jp.Solver(tol=1e-6)
    inputs = LoopInputs((jnp.float32(0.0),), jnp.float32(1.0), jnp.float32(0.0), rate_per_ms=jnp.float32(1.0),
                        batch_cap=jnp.float32(100.0))
    found = solve_closed_loop(_dip, inputs, solver, open_loop=True).fixed_point
    damped = damped_loop(lambda b: _dip(None, b), jnp.float32(0.0), solver, jnp.float32(100.0)).run()
    assert bool(found.converged) and bool(damped.converged)
    np.testing.assert_allclose(float(damped.batch), 1.0, rtol=1e-5)
    np.testing.assert_allclose(float(found.batch), float(damped.batch), rtol=1e-5)


@pytest.mark.parametrize("open_loop", [False, True])
def test_an_inactive_point_takes_no_step(open_loop):
    """An infeasible point (``active`` False: its outputs are masked) is not iterated: it stays
    at the solve's start, unconverged, after 0 steps, while the same point active converges."""
    from jaxpareto.physics.closed_loop import LoopInputs, solve_closed_loop

    inputs = LoopInputs((jnp.float32(0.2), jnp.float32(3.0)), jnp.float32(4.0), jnp.float32(10.0),
                        rate_per_ms=jnp.float32(1.0), batch_cap=jnp.float32(100.0))
    solve = lambda i: solve_closed_loop(_two_fixed_points, i, jp.Solver(), open_loop=open_loop).fixed_point  # noqa: E731
    active, idle = solve(inputs), solve(inputs._replace(active=jnp.bool_(False)))
    assert bool(active.converged) and int(active.iterations) > 5
    assert not bool(idle.converged) and int(idle.iterations) == 0
    assert float(idle.batch) == (0.0 if open_loop else 1.0)  # the start: B = 0 open, 1 closed
