"""Disaggregated layouts under a GPU budget (AIConfigurator's "disagg" answer;
`jaxpareto.physics.disaggregation`).

A layout is P prefill workers of G_p GPUs and D decode workers of G GPUs: a replica of
N = P G_p + D G GPUs. Under a budget of B GPUs the layouts are those whose N divides B (B / N
replicas, every GPU used), with G_p and G among the TP choices. Each layout's best concurrency per
replica is found by `jaxpareto.search.layouts.search_layouts`.
"""

from __future__ import annotations

from typing import NamedTuple


class Layout(NamedTuple):
    """One disaggregated replica: ``prefill_workers`` x ``prefill_tp`` GPUs prefilling and
    ``decode_workers`` x ``tp`` GPUs decoding."""

    prefill_tp: int
    prefill_workers: int
    tp: int
    decode_workers: int

    @property
    def gpus(self) -> int:
        return self.prefill_workers * self.prefill_tp + self.decode_workers * self.tp


def disaggregated_layouts(budget: int, tp_choices) -> list[Layout]:
    """Every layout whose replica's GPUs divide ``budget``, both TPs among ``tp_choices``, in
    order of decode TP, prefill TP, then worker counts."""
    out = []
    for tp in sorted(int(t) for t in tp_choices):
        for prefill_tp in sorted(int(t) for t in tp_choices):
            for prefill_workers in range(1, budget // prefill_tp + 1):
                for decode_workers in range(1, budget // tp + 1):
                    layout = Layout(prefill_tp, prefill_workers, tp, decode_workers)
                    if layout.gpus <= budget and budget % layout.gpus == 0:
                        out.append(layout)
    return out


__all__ = ["Layout", "disaggregated_layouts"]
