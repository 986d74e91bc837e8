"""Attention data parallelism with expert parallelism under a GPU budget (SGLang's and
TensorRT-LLM's layout for large MoE models; `jaxpareto.physics.layout`).

A layout is D = ``dp_attention`` ranks of ``tp`` GPUs each, a replica of N = tp x D GPUs, with
the routed experts spread over all N: whole experts on each GPU (``ep`` = N, wide expert
parallelism, as DeepSeek-V3 and the engines' DP-attention recipes deploy) or every expert split
over the N GPUs (``ep`` = 1). Under a budget of B GPUs the layouts are those with D >= 2 whose N
divides B, ``tp`` among the TP choices; a dense model has no experts to spread (D ranks of a
dense model are D replicas, which the TP layouts already count), so it has none. Each layout's
best concurrency per replica is found by `jaxpareto.search.layouts.search_layouts`.
"""

from __future__ import annotations

from typing import NamedTuple


class ParallelLayout(NamedTuple):
    """One attention-DP replica: ``dp_attention`` ranks of ``tp`` GPUs, the experts over ``ep``
    groups of its GPUs."""

    tp: int
    ep: int
    dp_attention: int

    @property
    def gpus(self) -> int:
        return self.tp * self.dp_attention


def data_parallel_layouts(budget: int, tp_choices) -> list[ParallelLayout]:
    """Every attention-DP layout (D >= 2) whose replica's GPUs divide ``budget``, ``tp`` among
    ``tp_choices``, each with ``ep`` = N and ``ep`` = 1, in order of ``tp``, D, then ``ep``."""
    out = []
    for tp in sorted(int(t) for t in tp_choices):
        for ranks in range(2, budget // tp + 1):
            gpus = tp * ranks
            if budget % gpus == 0:
                out += [ParallelLayout(tp, gpus, ranks), ParallelLayout(tp, 1, ranks)]
    return out


__all__ = ["ParallelLayout", "data_parallel_layouts"]
