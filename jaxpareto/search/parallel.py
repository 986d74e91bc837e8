"""Pipeline parallelism, and attention data parallelism with expert parallelism, under a GPU
budget (`jaxpareto.physics.layout`).

- **Attention DP** (SGLang's and TensorRT-LLM's layout for large MoE models): D =
  ``dp_attention`` >= 2 ranks of ``tp`` GPUs each, a replica of N = tp x D GPUs, with the routed
  experts spread over all N: whole experts on each GPU (``ep`` = N, wide expert parallelism, as
  DeepSeek-V3 and the engines' DP-attention recipes deploy) or every expert split over the N
  GPUs (``ep`` = 1). A dense model has no experts to spread (D ranks of a dense model are D
  replicas, which the TP layouts already count), so it has none.
- **Pipeline parallelism**: ``pp`` >= 2 stages of ``tp`` GPUs, a replica of tp x pp GPUs, for
  every model.

Under a budget of B GPUs the layouts are those whose replica's GPUs divide B, ``tp`` among the TP
choices. Each layout's best concurrency per replica is found by
`jaxpareto.search.layouts.search_layouts`.
"""

from __future__ import annotations

from typing import NamedTuple


class ParallelLayout(NamedTuple):
    """One replica of ``pp`` stages, each ``dp_attention`` ranks of ``tp`` GPUs, the experts over
    ``ep`` groups of a stage's GPUs."""

    tp: int
    pp: int
    ep: int
    dp_attention: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp_attention


def data_parallel_layouts(budget: int, tp_choices) -> list[ParallelLayout]:
    """Every attention-DP layout (D >= 2, one stage) whose replica's GPUs divide ``budget``,
    ``tp`` among ``tp_choices``, each with ``ep`` = N and ``ep`` = 1, in order of ``tp``, D, then
    ``ep``."""
    out = []
    for tp in sorted(int(t) for t in tp_choices):
        for ranks in range(2, budget // tp + 1):
            gpus = tp * ranks
            if budget % gpus == 0:
                out += [ParallelLayout(tp, 1, gpus, ranks), ParallelLayout(tp, 1, 1, ranks)]
    return out


def pipeline_layouts(budget: int, tp_choices) -> list[ParallelLayout]:
    """Every pipeline layout (``pp`` >= 2 stages of one TP group) whose replica's GPUs divide
    ``budget``, ``tp`` among ``tp_choices``, in order of ``tp`` then ``pp``."""
    return [ParallelLayout(tp, stages, 1, 1) for tp in sorted(int(t) for t in tp_choices)
            for stages in range(2, budget // tp + 1) if budget % (tp * stages) == 0]


__all__ = ["ParallelLayout", "data_parallel_layouts", "pipeline_layouts"]
