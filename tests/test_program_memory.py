"""Compiled programs are released before a process's memory mappings reach the kernel's cap."""

import jax
import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions import program_memory


def test_programs_are_released_past_the_share_of_the_map_limit(monkeypatch):
    count, limit = program_memory.map_count(), program_memory.map_limit()
    if count is None or limit is None:
        pytest.skip("no /proc: nothing to count")
    assert 0 < count < limit
    jp.sweep("h100-sxm", "llama-3.1-8b", tp=[1, 2], concurrency=[1, 3])
    assert not program_memory.release_programs_near_map_limit(share=1.0)  # below the cap: kept
    cleared = []
    monkeypatch.setattr(jax, "clear_caches", lambda: cleared.append(True))
    monkeypatch.setattr(program_memory, "_after_release", 0)
    monkeypatch.setattr(program_memory, "map_limit", lambda: count)  # as if at the cap already
    assert program_memory.release_programs_near_map_limit() and cleared == [True]
    # mappings a release cannot free (here: none freed) do not make every later call release
    assert not program_memory.release_programs_near_map_limit() and cleared == [True]
    left = program_memory._after_release  # the mappings the release left
    monkeypatch.setattr(program_memory, "map_count", lambda: left + int(0.1 * count) + 1)  # 10 % of the cap more
    assert program_memory.release_programs_near_map_limit() and cleared == [True, True]


def test_a_sweep_after_the_release_gives_the_same_numbers():
    kwargs = dict(gpu="h100-sxm", model="llama-3.1-8b", tp=[1, 2], concurrency=[1, 8, 64])
    before = jp.sweep(**kwargs)
    jax.clear_caches()
    np.testing.assert_array_equal(jp.sweep(**kwargs).tpot_ms.values, before.tpot_ms.values)


def test_mappings_fall_when_programs_are_released():
    if program_memory.map_count() is None:
        pytest.skip("no /proc: nothing to count")
    for options in ({}, {"prefill_model": "shared"}, {"cache_model": "lru"}):
        jp.sweep("h100-sxm", "llama-3.1-8b", tp=[1, 2], concurrency=[1, 5], **options)
    loaded = program_memory.map_count()
    jax.clear_caches()
    assert program_memory.map_count() < loaded - 300  # each program holds hundreds
