"""Tensor-parallel all-reduce time (opt-in; the seed has none).

With tensor parallelism over G GPUs every transformer layer all-reduces its activations twice,
after attention and after the MLP (Megatron-LM, Shoeybi et al. 2019). A ring all-reduce sends
and receives 2 (G - 1) / G of the message per GPU (Patarasuk and Yuan 2009), so a step that
carries T tokens spends

    t = 2 layers x [scale x 2 (G - 1) / G x T x hidden x 2 B / interconnect + latency]

on communication (16-bit activations; ``interconnect_gbs`` is the GPU's one-way scale-up
bandwidth from the catalog). A group larger than the scale-up domain (``scaleup_domain_gpus``:
TP 16 over 8-GPU nodes) runs its ring over the nodes' NICs, so its slowest hop, and the ring's
bandwidth, is ``scaleout_gbs`` (nccl-tests' bus bandwidth of a multi-node all-reduce is that of
the NIC per GPU; AIConfigurator's ``inter_node_bw``). ``scale`` (`Efficiency.allreduce_scale`, 0 by default) switches the
bandwidth term on (1 = the link's peak) and absorbs achieved-bandwidth losses when calibrated;
``latency`` (`Efficiency.allreduce_latency_us`) is the fixed cost of one all-reduce. G = 1 has
neither. GPUs without interconnect data, and models without ``hidden_size``, get no bandwidth
term.

Latency growing with TP (``latency_per_peer=True``, the measured profile): the small-message
all-reduce of decode and chunked prefill is the one-shot kind (vLLM's custom all-reduce,
TensorRT-LLM's one-shot kernel, NCCL's LL protocol), in which each GPU reads the other G - 1
GPUs' buffers, so its latency is (G - 1) x ``latency`` (a ring would take 2 (G - 1) steps:
Thakur, Rabenseifner and Gropp 2005).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpareto.definitions.hardware import HardwareParams
from jaxpareto.definitions.model import ModelParams
from jaxpareto.definitions.units import BYTES_PER_GB, MS_PER_S

ALLREDUCES_PER_LAYER = 2
ACTIVATION_BYTES = 2.0


class AllReduce(NamedTuple):
    """All-reduce time of one forward pass (scalars, ms).

    Attributes:
        per_token_ms: transfer time per token the pass carries.
        fixed_ms: latency of the pass's all-reduces, whatever it carries.
    """

    per_token_ms: jax.Array
    fixed_ms: jax.Array


def link_gbs(hw: HardwareParams, gpus: jax.Array) -> jax.Array:
    """The per-GPU, one-way bandwidth [GB/s] among ``gpus`` GPUs: the scale-up link
    (``interconnect_gbs``) within one scale-up domain, the slower scale-out NIC (``scaleout_gbs``)
    beyond it (unknown scale-out: the scale-up link)."""
    across = (gpus > hw.scaleup_domain_gpus) & jnp.isfinite(hw.scaleout_gbs)
    return jnp.where(across, jnp.minimum(hw.interconnect_gbs, jnp.where(across, hw.scaleout_gbs, 1.0)),
                     hw.interconnect_gbs)


def allreduce_time(hw: HardwareParams, model: ModelParams, tp: jax.Array, scale: jax.Array,
                   latency_us: jax.Array, latency_per_peer: bool = False) -> AllReduce:
    """The module docstring's t for one forward pass, split into per-token and fixed parts.

    Args:
        hw: one GPU; ``interconnect_gbs`` [GB/s one way] (NaN when unknown), and beyond
            ``scaleup_domain_gpus`` GPUs ``scaleout_gbs`` [GB/s one way].
        model: one model; ``layers``, ``hidden_size`` (NaN when unknown).
        tp: G [GPUs].
        scale: multiplier on the bandwidth term (0: off).
        latency_us: one all-reduce's fixed latency [µs]; per peer GPU with ``latency_per_peer``.
        latency_per_peer: the latency grows as G - 1 (static; the measured profile).
    """
    known = jnp.isfinite(hw.interconnect_gbs) & jnp.isfinite(model.hidden_size) & (tp > 1)
    link = jnp.where(known, link_gbs(hw, tp), 1.0)  # double where: no NaN in gradients
    hidden = jnp.where(known, model.hidden_size, 0.0)
    passes = ALLREDUCES_PER_LAYER * model.layers
    ring = 2.0 * (tp - 1.0) / tp
    per_token = scale * passes * ring * hidden * ACTIVATION_BYTES / (link * BYTES_PER_GB) * MS_PER_S
    peers = tp - 1.0 if latency_per_peer else 1.0
    fixed = jnp.where(tp > 1, passes * latency_us * peers / 1000.0, 0.0)
    return AllReduce(jnp.where(known, per_token, 0.0), fixed)
