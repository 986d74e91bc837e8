"""The bracketing search of `jaxpareto.optimize` (``method="bracket"``): per scenario and TP
choice, the best integer concurrency in tens of evaluations instead of one per concurrency, for
every lane of a batch in one compiled program.

Why it works. Over C the constraints are monotone or nearly so: latencies rise with C,
per-user speed falls, throughput and memory use rise, so the concurrencies meeting every SLO
and the KV-memory cap form an interval, and the objective over it has one peak (often at the
interval's end). The search per lane (one scenario cell at one TP):

1. **Memory.** One evaluation at C = lo gives ``concurrency_max``; under a memory cap the
   search runs on [lo, min(hi, concurrency_max)].
2. **Coarse grid.** `COARSE_POINTS` concurrencies spread geometrically over that range (every
   integer when it holds fewer), all evaluated; the best one that meets everything, C0, and
   its two grid neighbours bracket the optimum.
3. **A narrow feasible interval** between two grid points, neither feasible (a lower bound such
   as a throughput floor and an upper bound such as a TTFT limit leaving a gap narrower than
   the grid's): the first gap whose two ends violate disjoint sets of conditions is searched by
   bisection for its first point meeting the lower end's conditions; if that point meets
   everything, it is C0 and the gap the bracket.
4. **The interval's top.** Where the grid meets everything somewhere but not at its last
   point, the same bisection finds the last point meeting everything in the grid step above
   the grid's last such point: a second candidate, for an objective that dips and rises again
   up to an SLO's limit (throughput past the LRU cache model's collapse, rising again until
   TTFT reaches its limit) while the grid's best point sits on the first peak.
5. **Direction.** From C0, and from C1, the grid's best other local peak meeting everything
   (C0 where there is none; throughput peaking again before the LRU cache model's collapse),
   start + 1 and start - 1 say which side of each start its peak lies on (none: the start is it).
6. **Bisection toward the peaks.** On that side the last point that still improves on its
   neighbour nearer the start (meets everything, and is not below the start: a plateau past
   the peak, the LRU collapse's, can seem to rise by the solver's rounding) is found by
   bisection over the distance from the start, for both starts at once: the peak of a one-peaked objective, or the
   interval's end where the objective rises up to it. Ties go to the smaller C, as the
   exhaustive search breaks them. The best of the two peaks and the interval's top (4) is the
   answer (a tie: the smaller C).

It returns every lane's outputs at its concurrency; the scenario's best TP is then chosen on the
host like the other searches' candidates (`jaxpareto.search.problem.Problem.select`). Per lane it
evaluates at most 1 + `COARSE_POINTS` + log2(gap) + 4 (log2(gap) + 3) points
(`evaluations_per_lane`), where gap is the grid's widest step (85 for C in [1, 1024], against
1,024 for the exhaustive search).

Where it can differ from the exhaustive search: an objective with two peaks inside one grid
step, or a peak away from the grid's two best local peaks and from the feasible interval's top
(the LRU cache model near its collapse: throughput can dip and spike again within one grid step;
a review's 162 shared + LRU scenarios found 10 such, 0.1-1.2 % below the optimum), or a feasible
set of several pieces; it then returns a feasible configuration that is a local optimum. It never
returns a configuration that violates a constraint: the host checks the one it returns.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.mapper import map_points
from jaxpareto.physics.point import evaluate_point

#: Concurrencies of the coarse grid per lane (a range of at most this many is enumerated).
COARSE_POINTS = 32


def coarse_grid(lo, hi, points: int = COARSE_POINTS):
    """``points`` integer concurrencies from ``lo`` to ``hi`` (traced, hi >= lo >= 1), spread
    geometrically and at least one apart (every integer of [lo, hi], the last repeated, when
    the range holds fewer). Shape (points,), the dtype of ``hi``."""
    j = jnp.arange(points, dtype=jnp.result_type(hi))
    spread = jnp.round(jnp.exp(jnp.log(lo) + j / (points - 1) * (jnp.log(hi) - jnp.log(lo))))
    spaced = jnp.clip(spread, lo + j, hi - (points - 1 - j))
    return jnp.where(hi - lo + 1 >= points, spaced, jnp.minimum(lo + j, hi))


def _met(value, op: str, limit):
    return value <= limit if op == "<=" else value >= limit


@functools.partial(jax.jit, static_argnames=("objective", "sign", "constraints", "capped", "options", "percentiles",
                                             "outputs"))
def _judge(point: GridPoint, workload, efficiency, solver, limits, c, *, objective: str, sign: float,
           constraints: tuple, capped: bool, options: ModelOptions, percentiles: bool, outputs: tuple):
    """One lane at concurrency ``c``: (meets everything, score to maximise, the conditions:
    usable, within memory, each SLO met; the ``outputs``). Jitted on its own so that the
    search's several call sites share one trace of the model."""
    out = evaluate_point(point.replace(concurrency=c), workload, efficiency, solver, options=options,
                         percentiles=percentiles)
    value = getattr(out, objective)
    usable = out.feasible & out.converged & jnp.isfinite(value)
    within = c <= out.concurrency_max if capped else jnp.bool_(True)
    slos = [_met(getattr(out, name), op, limits[k]) for k, (name, op) in enumerate(constraints)]
    conditions = jnp.stack([usable, within, *slos])
    ok = jnp.all(conditions)
    kept = {name: getattr(out, name) for name in outputs}
    return ok, jnp.where(ok, sign * value, -jnp.inf), conditions, kept


# the phases of a lane's last loop (every evaluation in it is of a pair of concurrencies)
_DIRECTION, _CLIMB, _COMPARE, _FINAL, _DONE = 0, 1, 2, 3, 4


def _lane(point: GridPoint, workload, efficiency, solver, limits, *, lo: int, hi: int, outputs: tuple, **model):
    """One lane's search (a scenario cell at one TP; ``point.concurrency`` unused). The model is
    called from three places only (the grid's scan, the narrow interval's loop, the last loop),
    because every call site is traced, batched and lowered anew."""
    judge = functools.partial(_judge, point, workload, efficiency, solver, limits, outputs=outputs, **model)
    dtype = point.think_time_s.dtype
    lo_f, hi_f = jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)
    # loop carries start as per-lane values: a carry that turns per-lane inside a loop body makes
    # vmap batch the body twice (and the model with it)
    lane_zero = 0.0 * point.think_time_s

    # 1-2. the coarse grid; its first point, C = lo, gives the memory cap that sets the grid's top
    def coarse(top, j):
        c = coarse_grid(lo_f, top)[j]
        ok, score, conditions, kept = judge(c)
        cap = jnp.clip(jnp.floor(kept["concurrency_max"].astype(dtype)), lo_f, hi_f) if model["capped"] else hi_f
        return jnp.where(j == 0, cap, top), (c, ok, score, conditions)

    _, (grid, ok, score, conditions) = jax.lax.scan(coarse, hi_f + lane_zero, jnp.arange(COARSE_POINTS))
    # each SLO met by some usable grid point (the reason when none meets them all)
    met_any = jnp.any(conditions[:, 2:] & conditions[:, :1], axis=0)
    best = jnp.argmax(score)
    found = ok[best]
    c0, score0 = grid[best], score[best]
    a, b = grid[jnp.maximum(best - 1, 0)], grid[jnp.minimum(best + 1, COARSE_POINTS - 1)]

    # 3. a feasible interval inside one grid step: the first gap whose ends violate disjoint
    # conditions; bisection for the first point meeting the lower end's
    violated = ~conditions
    gaps = ~ok[:-1] & ~ok[1:] & ~jnp.any(violated[:-1] & violated[1:], axis=1)
    gap = jnp.argmax(gaps)
    lower_end = violated[gap]

    # 3'. where the grid meets everything somewhere, the same loop finds instead the last point
    # meeting everything in the grid step above the grid's last such point: the feasible
    # interval's top, a second candidate beside the peak climbed to from C0 (an objective that
    # dips and rises again up to an SLO's limit, as throughput past the LRU collapse)
    last = (COARSE_POINTS - 1) - jnp.argmax(ok[::-1])
    to_top = found & (last < COARSE_POINTS - 1)

    def narrow(state):
        left, right, right_ok, right_score = state
        mid = jnp.floor(0.5 * (left + right))
        mid_ok, mid_score, mid_conditions, _ = judge(mid)
        # the answer lies at or below mid: the gap's first point meeting the lower end's
        # conditions (right), or the top (left) when mid does not meet everything
        below = jnp.where(found, ~mid_ok, jnp.all(mid_conditions | ~lower_end))
        return (jnp.where(below, left, mid), jnp.where(below, mid, right), jnp.where(below, mid_ok, right_ok),
                jnp.where(below, mid_score, right_score))

    right0 = jnp.where(to_top, grid[jnp.minimum(last + 1, COARSE_POINTS - 1)], grid[gap + 1])
    left0 = jnp.where(to_top, grid[last], jnp.where(~found & jnp.any(gaps), grid[gap], right0))  # else no loop
    top, entry, entry_ok, entry_score = jax.lax.while_loop(lambda s: s[1] - s[0] > 1, narrow,
                                                           (left0, right0, lane_zero > 0, -jnp.inf + lane_zero))
    use_gap = ~found & entry_ok
    c0, score0 = jnp.where(use_gap, entry, c0), jnp.where(use_gap, entry_score, score0)
    a, b = jnp.where(use_gap, grid[gap], a), jnp.where(use_gap, right0, b)
    found = found | use_gap

    # 5-6. the climbs, from C0 and from the grid's best other local peak C1 (C0 where there is
    # none): which side of each start its peak is on (start + 1 and start - 1); then the last
    # distance d at which start + step d still improves on its neighbour toward the start (rising
    # strictly; on the lower side level counts: ties go to the smaller C); then the best of the
    # climbs' answers and the interval's top; then the outputs at the answer and at the next C
    peak = ok & (score >= jnp.concatenate([score[:1], score[:-1]])) & (score >= jnp.concatenate([score[1:], score[-1:]]))
    other = peak & (jnp.arange(COARSE_POINTS) != best) & ~use_gap
    second = jnp.argmax(jnp.where(other, score, -jnp.inf))
    has_second = jnp.any(other)
    starts = jnp.stack([c0, jnp.where(has_second, grid[second], c0)])
    start_scores = jnp.stack([score0, jnp.where(has_second, score[second], score0)])
    lows = jnp.stack([a, jnp.where(has_second, grid[jnp.maximum(second - 1, 0)], a)])
    highs = jnp.stack([b, jnp.where(has_second, grid[jnp.minimum(second + 1, COARSE_POINTS - 1)], b)])

    def last_loop(state):
        phase, step, good, bad, chosen, _, _ = state
        mid = jnp.floor(0.5 * (good + bad))
        # four concurrencies a pass: a pair for each start, or the candidates, or the answer and the next C
        points = jnp.where(phase == _DIRECTION, jnp.stack([jnp.minimum(starts + 1, highs),
                                                            jnp.maximum(starts - 1, lows)], axis=1),
                           jnp.where(phase == _CLIMB, jnp.stack([starts + step * mid, starts + step * (mid - 1)], axis=1),
                                     jnp.where(phase == _COMPARE, jnp.stack([chosen, jnp.stack([top, top])], axis=1),
                                               jnp.stack([chosen, jnp.minimum(chosen + 1, hi_f)], axis=1))))
        point_ok, point_score, point_conditions, point_kept = jax.vmap(judge)(points.reshape(4))
        pair_ok, pair_score = point_ok.reshape(2, 2), point_score.reshape(2, 2)
        # after the direction pairs (per start: its higher and lower neighbour)
        up = found & (starts + 1 <= highs) & pair_ok[:, 0] & (pair_score[:, 0] > start_scores)
        down = found & ~up & (starts - 1 >= lows) & pair_ok[:, 1] & (pair_score[:, 1] >= start_scores)
        reach = jnp.where(up, highs - starts, jnp.where(down, starts - lows, 0.0))
        # after a climbing pair
        better = jnp.where(step > 0, pair_score[:, 0] > pair_score[:, 1], pair_score[:, 0] >= pair_score[:, 1])
        # and not below the start: past the peak, where the solver's rounding can make a plateau
        # (the LRU collapse) seem to rise from one concurrency to the next
        rises = pair_ok[:, 0] & better & (pair_score[:, 0] >= start_scores)
        directed = phase == _DIRECTION
        step = jnp.where(directed, jnp.where(up, 1.0, jnp.where(down, -1.0, 0.0)).astype(dtype), step)
        good = jnp.where(directed, 1.0, jnp.where(rises, mid, good)).astype(dtype)
        bad = jnp.where(directed, jnp.maximum(reach + 1.0, 1.0), jnp.where(rises, bad, mid)).astype(dtype)
        searching = phase <= _CLIMB
        answered = searching & (bad - good <= 1)  # per start; a start answered stays so
        climbed = jnp.where(answered, jnp.where(found, starts + step * good, lo_f), chosen[:2])
        # the best of the two climbs' answers and the interval's top (ties: the smaller C)
        candidates = jnp.stack([chosen[0], chosen[1], top])
        scores = jnp.stack([pair_score[0, 0], pair_score[1, 0], jnp.where(to_top, pair_score[0, 1], -jnp.inf)])
        level = scores == jnp.max(scores)
        pick = jnp.min(jnp.where(level, candidates, jnp.inf))
        compared = jnp.where(jnp.isfinite(pick), pick, chosen[0])
        chosen = jnp.where(searching, climbed, jnp.where(phase == _COMPARE, compared, chosen[0]))
        chosen = jnp.broadcast_to(chosen, (2,))
        phase = jnp.where(searching, jnp.where(jnp.all(answered), _COMPARE, _CLIMB), phase + 1).astype(jnp.int32)
        return (phase, step, good, bad, chosen, jax.tree_util.tree_map(lambda v: v[0], point_kept),
                point_conditions[1])

    template = jax.eval_shape(judge, lo_f)
    zeros = jax.tree_util.tree_map(lambda v: jnp.zeros(v.shape, v.dtype) + lane_zero.astype(v.dtype),
                                   (template[3], template[2]))
    pair_zero = jnp.stack([lane_zero, lane_zero])
    state = (_DIRECTION + lane_zero.astype(jnp.int32), pair_zero, pair_zero + 1, pair_zero + 1, lo_f + pair_zero,
             *zeros)
    *_, chosen, kept, after = jax.lax.while_loop(lambda s: s[0] != _DONE, last_loop, state)
    chosen = chosen[0]
    found = {**kept, "concurrency": chosen, "next_conditions": after}
    return {**found, "met_any": met_any} if limits.shape[0] else found  # no SLOs: no empty per-lane array


@functools.partial(jax.jit, static_argnames=("lo", "hi", "objective", "sign", "constraints", "capped", "options",
                                             "percentiles", "outputs"))
def bracket_search(points: GridPoint, workload, efficiency, solver, limits, *, lo: int, hi: int, objective: str,
                   sign: float, constraints: tuple, capped: bool, options: ModelOptions = ModelOptions(),
                   percentiles: bool = False, outputs: tuple = ()) -> dict:
    """The best concurrency of every lane and the outputs there, as one compiled program.

    Args:
        points: lanes, a `GridPoint` whose leaves have shape (lanes,) (a scenario cell at one TP;
            ``concurrency`` is ignored).
        workload, efficiency, solver: shared scalars (`jaxpareto.mapper.shared_scalars`).
        limits: the constraints' limits, shape (n,) (traced: new SLO values do not recompile).
        lo, hi: the inclusive integer concurrency range. objective, sign: the output and +1
            (maximise) or -1 (minimise). constraints: (name, op) pairs, ``op`` "<=" or ">=".
        capped: C <= concurrency_max applies (the memory cap of every cache model but LRU).
        options: which equations. percentiles: compute the latency percentiles (an output or
            constraint needs them). outputs: the output names returned.

    Returns:
        Output name -> shape (lanes,) at each lane's concurrency, plus ``concurrency`` (lanes,)
        (``lo`` where nothing was found) and ``met_any`` (lanes, n): each SLO met by some usable
        point of the lane's coarse grid.
    """
    outputs = tuple(dict.fromkeys(("concurrency_max", *outputs)))
    lane = functools.partial(_lane, lo=lo, hi=hi, objective=objective, sign=sign, constraints=constraints,
                             capped=capped, options=options, percentiles=percentiles, outputs=outputs)
    return map_points(lane, points, (workload, efficiency, solver, limits))


def evaluations_per_lane(lo: int, hi: int, points: int = COARSE_POINTS) -> int:
    """An upper bound on the evaluations of one lane: the memory point, the grid, the bisection
    for the feasible interval's top (or a narrow interval), and the last loop's passes of four
    (the direction pairs, the two climbs' bisections, the comparison and the final point)."""
    with jax.ensure_compile_time_eval():
        grid = np.asarray(coarse_grid(jnp.float32(lo), jnp.float32(hi), points))
    widest = float(np.diff(grid).max()) if len(grid) > 1 else 1.0
    halvings = int(np.ceil(np.log2(widest + 1)))
    return 1 + points + halvings + 4 * (1 + halvings + 2)