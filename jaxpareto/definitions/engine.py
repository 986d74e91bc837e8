"""Serving engines (vLLM, SGLang, TensorRT-LLM): what each reserves of GPU memory, how many
tokens a step carries, and its own calibrated efficiency factors.

`Engine` is the validated definition (``jaxpareto/data/engines.toml`` or user input);
`EngineParams` the pytree of floats the physics receives at each grid point. The ``seed``
engine changes nothing: all of HBM beyond the weights holds KV (seed eq. 5), the workload's
chunk size, and the shared `Efficiency` factors.

KV memory of one TP group of G GPUs with M_gpu each (`jaxpareto.physics.memory`):

- ``memory_basis="total"`` (vLLM ``gpu_memory_utilization``, SGLang ``mem_fraction_static``):
  u x G x M_gpu - weights - G x reserve;
- ``memory_basis="after_weights"`` (TensorRT-LLM ``free_gpu_memory_fraction``):
  u x (G x M_gpu - weights - G x reserve).

M_gpu is the total the driver reports (``memory_total="reported"``, what engines read from
``cudaMemGetInfo``; the GPU's ``memory_reported_gb``), or the datasheet size (``"datasheet"``,
the seed's eq. 5).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import tomllib
from collections.abc import Mapping
from typing import Literal

import jax
import pydantic

from jaxpareto.definitions.base import Definition
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import GEMM_KERNELS, GemmKernels
from jaxpareto.definitions.settings import Efficiency

MEMORY_BASES = ("total", "after_weights")
SEED_ENGINE = "seed"


class Engine(Definition):
    """One serving engine as the model sees it.

    Attributes:
        name: the dataset's ``engine`` coordinate.
        gpu_memory_utilization: u in (0, 1], the share of memory the engine may use (module
            docstring for what it is a share of).
        memory_basis: "total" or "after_weights".
        memory_total: which size of each GPU u is a share of: "reported" (default; the driver's
            total, `jaxpareto.definitions.hardware.Hardware.memory_reported_gb`, as real engines
            read it) or "datasheet" (``memory_gb``, the seed's eq. 5).
        activation_reserve_gb: memory per GPU kept for activations, CUDA graphs and workspace
            besides the weights and KV [GB], >= 0.
        prefill_chunk_tokens: tokens one engine step carries at most (vLLM
            ``max_num_batched_tokens``, SGLang ``chunked_prefill_size``, TensorRT-LLM
            ``max_num_tokens``); 0: the workload's ``prefill_chunk_tokens``.
        decode_tokens_in_budget: whether a step's decode tokens count against that budget, so
            that a step of B decoding requests has P - B tokens left for prefill (vLLM V1 and
            TensorRT-LLM schedule their running requests first, one token each, then prompts
            in what is left); False (default): all P go to prefill (SGLang's chunked prefill,
            whose prefill batches run as steps of their own by default). Under the shared engine only
            (`jaxpareto.physics.engine.prefill_budget_tokens`).
        prefill_first: whether the engine runs waiting prompts' prefill batches before any decode
            step, its prefill batches carrying no decode tokens (SGLang's scheduler: "Run prefill
            first if possible", ``Scheduler.get_next_batch_to_run``; mixed steps only with
            ``--enable-mixed-chunk``); False (default): decode tokens ride in every step and
            prompts fill the budget beside them (vLLM V1, TensorRT-LLM). It decides how a burst
            of turns that start together evolves (``arrivals="synchronised"``): one wave,
            prefilled while decoding waits (`jaxpareto.physics.engine.wave_turn`), or the lockstep
            groups of a step's budget (`jaxpareto.physics.engine.synchronised_turn`).
        max_running_requests: requests one engine instance (a TP group, an attention-DP rank
            or a pipeline) runs at once at most (vLLM ``max_num_seqs``, TensorRT-LLM
            ``max_batch_size``, SGLang ``max_running_requests``); 0: only KV memory limits
            them. The others wait where the model lets requests wait for a slot: the measured
            profile and the LRU cache model in the closed loop, and Poisson arrivals
            (`jaxpareto.physics.point.turn_state`); the seed profile's closed loop and the
            conditional and disaggregated models do not apply it.
        scheduler_delay_steps: engine steps a request's first token waits beyond the model's own
            prefill and queueing, d >= 0 (TTFT += d x the mean step, `jaxpareto.physics.point`):
            an overlap scheduler, which launches step n + 1 before step n's outputs are
            processed, 1 (TensorRT-LLM's PyTorch backend, on by default: "one extra decoding
            step", its overlap-scheduler documentation; SGLang's zero-overhead scheduler the
            same way); multi-step scheduling of k steps per scheduler call (vLLM V0
            ``num_scheduler_steps``), (k - 1) / 2 on average, a request arriving anywhere in
            a window; TensorRT-LLM's attention-DP balancing, which releases context requests
            every ``timeout_iters``-th step unless every rank holds one, (``timeout_iters`` - 1) / 2.
            0 (default): none (the shipped engines' fitted TTFT overheads hold their mean). The
            disaggregated and conditional serving models do not apply it.
        gemm_kernels: whose GEMM kernels the engine runs, one of
            `jaxpareto.definitions.hardware.GEMM_KERNELS` ("vllm", "sglang", "trtllm"): under
            ``gemm_rate="measured"`` its matmuls reach the share and take the offset that a GPU
            measured for those kernels (`jaxpareto.definitions.hardware.Hardware.engine_gemm`),
            where it has them. None (default): the GPU's own values, the medians over engines.
        cuda_graph_batch_step: g >= 0, the step between the batch sizes of the CUDA graphs the
            engine captured for its decode steps, where it pads a step to the next of them
            (TensorRT-LLM's ``cuda_graph_config`` with ``enable_padding``: "batches are rounded up
            to the nearest cuda_graph_batch_size"; MLPerf's DeepSeek-R1 configurations capture
            128, 256, 384 and 512): the padded requests cost their matmuls and all-reduces
            (`jaxpareto.physics.cuda_graphs`). 0 (default): no padding modelled. With it, TPOT
            is no longer piecewise linear in B: the damped solver runs where the exact one was
            asked for by the gradient searches and the validation, and a sweep refuses "exact"
            and disaggregated serving (not modelled) with it.
        reserve_output_kv: whether a request starts only once KV memory for its whole turn, its
            prompt and its output to come, is free and holds it until done (TensorRT-LLM's default
            capacity scheduler, GUARANTEED_NO_EVICT: "a started request is never paused"), so that
            KV memory runs as many requests as hold the turn's final context, L + OSL, under the
            measured profile (`jaxpareto.physics.memory.session_contexts`); False (default): its
            KV grows with its context (vLLM's and SGLang's paged KV, pre-empting when it runs out),
            and memory holds the in-flight mean. The seed profile's KV holds the point's L alike.
        efficiency: `Efficiency` fields this engine sets (calibrated factors); the others come
            from the shared `Efficiency` of the run.
        sources: field name -> where its value comes from.

    Raises:
        pydantic.ValidationError (a ValueError) naming the field; an unknown efficiency field.
    """

    name: str = pydantic.Field(min_length=1)
    gpu_memory_utilization: float = pydantic.Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    memory_basis: Literal["total", "after_weights"] = "total"
    memory_total: Literal["reported", "datasheet"] = "reported"
    activation_reserve_gb: float = pydantic.Field(default=0.0, ge=0, allow_inf_nan=False)
    prefill_chunk_tokens: int = pydantic.Field(default=0, ge=0)
    decode_tokens_in_budget: bool = False
    prefill_first: bool = False
    max_running_requests: int = pydantic.Field(default=0, ge=0)
    # engine steps: a few (multi-step scheduling, an overlap scheduler); past 1,000 a slip, not a scheduler
    scheduler_delay_steps: float = pydantic.Field(default=0.0, ge=0, le=1000, allow_inf_nan=False)
    gemm_kernels: GemmKernels | None = None
    cuda_graph_batch_step: int = pydantic.Field(default=0, ge=0)
    reserve_output_kv: bool = False
    efficiency: dict[str, float] = pydantic.Field(default_factory=dict)
    sources: dict[str, str] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator("efficiency")
    @classmethod
    def _known_factors(cls, value):
        known = {f.name for f in dataclasses.fields(Efficiency)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown efficiency fields {unknown}; allowed: {sorted(known)}")
        Efficiency(**value).validate()  # each factor within its bounds
        return value

    def to_params(self) -> "EngineParams":
        """Numeric form: the engine's factors with a 0/1 mask of the ones it sets."""
        defaults = Efficiency()
        own = {f.name: float(self.efficiency.get(f.name, getattr(defaults, f.name)))
               for f in dataclasses.fields(Efficiency)}
        mask = {f.name: float(f.name in self.efficiency) for f in dataclasses.fields(Efficiency)}
        return EngineParams(
            gpu_memory_utilization=self.gpu_memory_utilization,
            after_weights=float(self.memory_basis == "after_weights"),
            reported_total=float(self.memory_total == "reported"),
            activation_reserve_gb=self.activation_reserve_gb,
            prefill_chunk_tokens=float(self.prefill_chunk_tokens),
            # none: no term in the program (a mixed table takes 0: the budget is all prefill's)
            decode_tokens_in_budget=1.0 if self.decode_tokens_in_budget else None,
            # none: no wave in the program (a mixed table takes 0: the lockstep groups)
            prefill_first=1.0 if self.prefill_first else None,
            max_running_requests=float(self.max_running_requests),
            # none: no term in the program (an engine table that mixes takes 0 for it, `stack_params`)
            scheduler_delay_steps=float(self.scheduler_delay_steps) if self.scheduler_delay_steps > 0 else None,
            # 1 + the kernels' index; none: no lookup in the program (a mixed table takes 0, the GPU's)
            gemm_kernels=None if self.gemm_kernels is None else float(GEMM_KERNELS.index(self.gemm_kernels) + 1),
            # none: no padding term in the program (a mixed table takes 0: no padding)
            cuda_graph_batch_step=float(self.cuda_graph_batch_step) if self.cuda_graph_batch_step > 0 else None,
            # none: memory holds the in-flight context, no term in the program (a mixed table takes 0)
            reserve_output_kv=1.0 if self.reserve_output_kv else None,
            efficiency=Efficiency(**own),
            efficiency_mask=Efficiency(**mask),
        )

    def with_efficiency(self, factors: Mapping[str, float]) -> "Engine":
        """A copy whose calibrated factors are ``factors`` (over the ones it had)."""
        return Engine(**{**self.model_dump(), "efficiency": {**self.efficiency, **dict(factors)}})


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EngineParams:
    """One engine as scalars (or, stacked, a table with a leading engine axis); see `Engine`.

    ``after_weights`` is 1.0 for ``memory_basis="after_weights"``, ``reported_total`` 1.0 for
    ``memory_total="reported"``; ``efficiency_mask`` holds 1.0 for each `Efficiency` field the
    engine sets and 0.0 where the shared factor applies. ``scheduler_delay_steps`` is None for an
    engine without one, so that a program of such engines carries no delay term at all;
    ``decode_tokens_in_budget`` is 1.0 where the engine counts decode tokens against its step
    budget, None where it does not (0 where a table mixes the two); ``prefill_first`` likewise
    1.0 where the engine runs waiting prefills first;
    ``gemm_kernels`` is 1 + the index of the engine's kernels in
    `jaxpareto.definitions.hardware.GEMM_KERNELS`, None for an engine that names none (0 where a
    table mixes the two: the GPU's own measurements); ``cuda_graph_batch_step`` is None for an
    engine that pads to no CUDA graph (0 where a table mixes the two); ``reserve_output_kv`` is
    1.0 where the engine reserves a request's output KV at its start, None where it does not (0
    where a table mixes the two).
    """

    gpu_memory_utilization: jax.Array | float
    after_weights: jax.Array | float
    reported_total: jax.Array | float
    activation_reserve_gb: jax.Array | float
    prefill_chunk_tokens: jax.Array | float
    max_running_requests: jax.Array | float
    scheduler_delay_steps: jax.Array | float | None
    efficiency: Efficiency
    efficiency_mask: Efficiency
    gemm_kernels: jax.Array | float | None = None
    decode_tokens_in_budget: jax.Array | float | None = None
    prefill_first: jax.Array | float | None = None
    cuda_graph_batch_step: jax.Array | float | None = None
    reserve_output_kv: jax.Array | float | None = None


def seed_engine() -> Engine:
    """The engine of the seed's equations: nothing reserved, nothing of its own."""
    return Engine(name=SEED_ENGINE, memory_total="datasheet",
                  sources={"all": "seed eq. 5: all HBM beyond the weights holds KV"})


@functools.cache
def engines() -> dict[str, Engine]:
    """The shipped engines by name: ``seed`` and those of ``jaxpareto/data/engines.toml``."""
    text = importlib.resources.files("jaxpareto").joinpath("data/engines.toml").read_text()
    table = tomllib.loads(text)["engine"]
    return {SEED_ENGINE: seed_engine(), **{name: Engine(name=name, **fields) for name, fields in table.items()}}


def resolve_engine(item: str | Engine, custom: Mapping[str, Engine] | None = None) -> Engine:
    """An `Engine` from a shipped name, a custom name, or a definition.

    A definition named like a shipped engine must be that engine (its sources aside): it then
    stands for the name, so that it takes what the name would (a calibration's factors for it,
    in ``custom``); with other settings under a shipped name, the dataset's ``engine`` label
    would say one engine and hold another's numbers.

    Raises:
        JaxparetoError: unknown name (the message lists the known names), a shipped engine's
        name on other settings, or wrong type.
    """
    custom = custom or {}
    if isinstance(item, Engine):
        shipped = engines().get(item.name)
        if shipped is None:
            return item
        if item.model_dump(exclude={"sources"}) != shipped.model_dump(exclude={"sources"}):
            raise JaxparetoError("engine", f"{item.name!r} is a shipped engine's name, with other settings; give "
                                           f"the definition a name of its own (e.g. {item.name + '-custom'!r})")
        item = item.name
    if isinstance(item, str):
        if item in custom:
            return custom[item]
        if item in engines():
            return engines()[item]
        raise JaxparetoError("engine", f"unknown name {item!r}", sorted({*custom, *engines()}))
    raise JaxparetoError("engine", f"expected a name or a jaxpareto.Engine, got {type(item).__name__}")
