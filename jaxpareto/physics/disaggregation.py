"""Disaggregated prefill and decode (docs/model.md, "Disaggregated serving").

A replica is P = ``prefill_workers`` prefill workers of G_p = ``prefill_tp`` GPUs each and
D = ``decode_workers`` decode workers of G = ``tp`` GPUs (DistServe, Zhong et al. 2024; Splitwise,
Patel et al. 2024; NVIDIA Dynamo; SGLang's and vLLM's PD disaggregation). Its C sessions are
spread over the decode workers, which hold their KV; a turn's prefill runs on a prefill worker,
which then sends the KV it computed to the session's decode worker.

- **Where the prefix lives (the policy).** A session's turns return to its decode worker (KV-aware
  routing: Dynamo's KV router, llm-d's prefix-aware scheduler), which keeps the session's KV
  between turns; the prefill worker keeps a prefix cache of its own, to which the same routing
  sends the session (Mooncake's cache-aware prefill scheduling, Qin et al. 2024). So a hit
  (probability h) prefills and sends its new tokens ΔL, a miss the whole context L, as in the
  aggregated model: what disaggregation adds is the transfer, not more prefill.
- **The KV transfer.** After its prefill (vLLM's NIXL connector and DistServe send a finished
  prefill's KV; Mooncake's layer-wise streaming would hide most of it) the decode worker's GPUs
  receive the new tokens' KV as they will hold it (an MLA latent whole on each of them,
  `jaxpareto.physics.memory.session_gb`), which the prefill GPUs send between them, over a link of
  ``kv_link_gbs`` per GPU, one way: t = latency + max(bytes per prefill GPU, bytes per decode
  GPU) / bandwidth.
- **The prefill pool** is a queue of P servers fed by every decode worker's turns: the M/G/P
  wait of `jaxpareto.physics.queueing.mgc_wait_ms` (Erlang C with the Lee-Longton correction
  for the prefill times' spread), the join-the-shortest-queue routing of a prefill router. A
  turn sees the load of the other C - 1 sessions (the arrival theorem of closed networks), so a
  lone session never waits. A worker prefills one prompt at a time; engines also batch several
  short prompts into one step (their token budget), which this model does not have yet.
- **The decode workers** step without prefill chunks (the point of disaggregation), at their
  own decode batch b.
- **Conditional disaggregation** (``serving="conditional"``; Dynamo): a turn with at most
  ``local_prefill_tokens`` to prefill after its decode worker's prefix hit prefills there,
  without a transfer. Those prefills stall the worker's decode steps, a share ρ_l = X q S_l of
  its time, so TPOT is the pure step's / (1 - ρ_l), and they wait for each other (M/G/1).

**The closed loop.** The fixed point is in the decode batch b per decode worker, because
everything else is explicit in it: a worker completes X = b / (OSL x TPOT(b)) turns per unit
time (Little's law over its decoding sessions), which loads the prefill pool, which sets TTFT,
and then R = TTFT + OSL x TPOT. Each of its c = C / D sessions decodes a share OSL x TPOT /
(R + Z) of the time, so b = c OSL TPOT(b) / (R(b) + Z). b - c OSL TPOT / (R + Z) increases
in b (a fuller pool only lengthens R), from < 0 at b = 0 to >= 0 at b = c, so its root is
found by the bracketed solve of `jaxpareto.physics.roots`, which also differentiates it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.hardware import HardwareParams
from jaxpareto.definitions.model import ModelParams
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.units import MS_PER_S
from jaxpareto.physics.communication import link_gbs
from jaxpareto.physics.decode import DecodeCoefficients, DecodeStep, decode_step, seen_batch
from jaxpareto.physics.memory import session_gb
from jaxpareto.physics.queueing import mgc_wait_ms
from jaxpareto.physics.roots import increasing_root

# the decode batch's bracketed solve: halvings of [0, c], then safeguarded Newton steps
BISECTIONS, NEWTON_STEPS = 24, 8


def kv_link_gbs(hw: HardwareParams, replica_gpus: jax.Array, given: jax.Array) -> jax.Array:
    """The KV transfer link's bandwidth per GPU, one way [GB/s]: ``given`` when > 0, else the
    scale-up link (``interconnect_gbs``) for a replica within one scale-up domain and the
    scale-out NIC (``scaleout_gbs``, where the catalog has it) for one beyond it."""
    return jnp.where(given > 0, given, link_gbs(hw, replica_gpus))


def kv_transfer_ms(model: ModelParams, tokens: jax.Array, prefill_tp: jax.Array, decode_tp: jax.Array,
                   link_gbs: jax.Array, latency_us: jax.Array) -> jax.Array:
    """Time to send the KV of ``tokens`` new tokens from a prefill worker of ``prefill_tp`` GPUs
    to a decode worker of ``decode_tp`` GPUs [ms] (module docstring; 0 tokens: the latency).

    The decode worker's GPUs receive the KV as they hold it, copies included (an MLA latent on
    each of them, a KV head on each GPU it is copied to), so the prefill GPUs send all of that
    between them: per prefill GPU 1 / G_p of it, per decode GPU 1 / G."""
    held = session_gb(model, tokens, decode_tp)
    sent, received = held / prefill_tp, held / decode_tp
    return latency_us / 1000.0 + jnp.maximum(sent, received) / link_gbs * MS_PER_S


class Pools(NamedTuple):
    """What a disaggregated turn depends on besides the decode batch (scalars).

    Attributes:
        decode: the decode workers' step coefficients.
        osl: output tokens per turn [tokens].
        sessions: c, sessions per decode worker.
        think_ms: Z [ms].
        decode_workers, prefill_workers: D and P.
        local_share: q, the share of turns prefilled on their decode worker (conditional).
        local_ms, local_scv: those prefills' mean time on the decode worker [ms] and c_S².
        remote_ms, remote_scv: the other turns' mean prefill time on a prefill worker, alone
            [ms], and c_S².
        transfer_ms: their mean KV transfer [ms].
        overhead_ms: the request overhead, in TTFT but occupying no GPU [ms].
    """

    decode: DecodeCoefficients
    osl: jax.Array
    sessions: jax.Array
    think_ms: jax.Array
    decode_workers: jax.Array
    prefill_workers: jax.Array
    local_share: jax.Array
    local_ms: jax.Array
    local_scv: jax.Array
    remote_ms: jax.Array
    remote_scv: jax.Array
    transfer_ms: jax.Array
    overhead_ms: jax.Array = 0.0


class DisaggregatedTurn(NamedTuple):
    """A turn at decode batch b per decode worker (scalars; `disaggregated_turn`).

    Attributes:
        ttft_ms, tpot_ms, latency_ms: the turn's TTFT, TPOT and R [ms].
        step: the decode step at b (no prefill in it).
        turns_per_ms: X, turns a decode worker completes per ms.
        prefill_wait_ms: the mean wait for a prefill worker, over remote turns [ms].
        prefill_busy: ρ_p, the share of the prefill pool's time it prefills (1: saturated).
        local_busy: ρ_l, the share of a decode worker's time in local prefills.
    """

    ttft_ms: jax.Array
    tpot_ms: jax.Array
    latency_ms: jax.Array
    step: DecodeStep
    turns_per_ms: jax.Array
    prefill_wait_ms: jax.Array
    prefill_busy: jax.Array
    local_busy: jax.Array


def disaggregated_turn(pools: Pools, batch: jax.Array, options: ModelOptions = ModelOptions()) -> DisaggregatedTurn:
    """The turn at decode batch ``batch`` per decode worker (module docstring).

    X = b / (OSL TPOT_0(b) + b q S_l) per decode worker (Little's law with the local prefills'
    stalls; TPOT_0 at max(b, 1): a step runs one request at least), ρ_l = X q S_l,
    TPOT = TPOT_0 / (1 - ρ_l); remote turns arrive at the pool at
    λ = D X (1 - q) and wait W_P for a worker (M/G/P, `jaxpareto.physics.queueing.mgc_wait_ms`), seeing the other sessions'
    share (C - 1) / C of the load (the arrival theorem; the local wait likewise); TTFT =
    q (W_l + S_l) + (1 - q) (W_P + S_r + t_KV) + the request overhead. A saturated pool gives W_P = inf, hence
    R = inf. The decode step runs at the batch a session sees (`jaxpareto.physics.decode.seen_batch`
    over the worker's c sessions; the seed's: max(b, 1), a step runs one request at least), under
    ``options`` (static: their ``expert_routing`` and ``seen_batch``).
    """
    seen, law = seen_batch(batch, pools.sessions, options)
    step = decode_step(pools.decode, seen, options.expert_routing, law)
    q = pools.local_share
    turns_per_ms = batch / (pools.osl * step.tpot_ms + batch * q * pools.local_ms)
    local_busy = turns_per_ms * q * pools.local_ms
    tpot = step.tpot_ms / (1.0 - local_busy)
    # an arriving turn queues behind the other sessions' prefills, not its own: by the arrival
    # theorem of closed networks (Lavenberg and Reiser 1980) it sees the load of the other
    # sessions, a share 1 - 1 / n of it, as the aggregated engine does (`jaxpareto.physics.engine`)
    worker_others = 1.0 - 1.0 / jnp.maximum(pools.sessions, 1.0)
    replica_others = 1.0 - 1.0 / jnp.maximum(pools.sessions * pools.decode_workers, 1.0)
    local_wait = mgc_wait_ms(1.0, local_busy * worker_others, local_busy, pools.local_ms, pools.local_scv)
    remote_rate = turns_per_ms * pools.decode_workers * (1.0 - q)
    offered = remote_rate * pools.remote_ms
    remote_wait = mgc_wait_ms(pools.prefill_workers, offered * replica_others, offered, pools.remote_ms, pools.remote_scv)
    prefill_busy = offered / pools.prefill_workers
    local = jnp.where(q > 0, q * (local_wait + pools.local_ms), 0.0)
    remote = jnp.where(q < 1, (1.0 - q) * (remote_wait + pools.remote_ms + pools.transfer_ms), 0.0)
    ttft = local + remote + pools.overhead_ms
    return DisaggregatedTurn(ttft, tpot, ttft + pools.osl * tpot, step, turns_per_ms, remote_wait, prefill_busy,
                             local_busy)


def _decoding(pools: Pools, batch: jax.Array, options: ModelOptions) -> jax.Array:
    """c OSL TPOT(b) / (R(b) + Z): the decode batch the sessions make at decode batch b."""
    turn = disaggregated_turn(pools, batch, options)
    return pools.sessions * pools.osl * turn.tpot_ms / (turn.latency_ms + pools.think_ms)


class DecodeBatch(NamedTuple):
    """The closed loop's decode batch per decode worker (scalars; `solve_decode_batch`).

    Attributes:
        batch: b.
        converged: b is within ``tol`` x b of the root: the residual |c OSL TPOT / (R + Z) - b|
            is at most ``tol`` x b, or the residual changes sign within b (1 ± ``tol``). The
            latter is how a saturated prefill pool converges: there R rises so steeply in b
            that no float32 b makes the residual small.
        turn: the turn at b, its TTFT and R from the latency model where the residual is small,
            else R from the fixed point's own relation R = c OSL TPOT / b - Z (Little's law), which
            a saturated pool's steep R(b) cannot give to the dtype's precision, and TTFT = R -
            OSL TPOT.
    """

    batch: jax.Array
    converged: jax.Array
    turn: "DisaggregatedTurn"


def solve_decode_batch(pools: Pools, tol: jax.Array, options: ModelOptions = ModelOptions()) -> DecodeBatch:
    """The closed loop's decode batch per decode worker (module docstring; `DecodeBatch`), under
    ``options`` (static)."""
    def excess(b):
        return b - _decoding(pools, b, options)

    batch = increasing_root(excess, 0.0 * pools.sessions, pools.sessions, BISECTIONS, NEWTON_STEPS)
    small = jnp.abs(excess(batch)) <= tol * batch
    bracketed = (excess(batch * (1.0 - tol)) <= 0.0) & (excess(batch * (1.0 + tol)) >= 0.0)
    turn = disaggregated_turn(pools, batch, options)
    little = pools.sessions * pools.osl * turn.tpot_ms / batch - pools.think_ms
    latency = jnp.where(small, turn.latency_ms, little)
    turn = turn._replace(ttft_ms=latency - pools.osl * turn.tpot_ms, latency_ms=latency)
    return DecodeBatch(batch, small | bracketed, turn)


__all__ = ["DecodeBatch", "DisaggregatedTurn", "Pools", "disaggregated_turn", "kv_link_gbs", "kv_transfer_ms", "solve_decode_batch"]
