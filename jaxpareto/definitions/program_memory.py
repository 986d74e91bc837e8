"""Compiled programs held in memory, kept under the kernel's limit on memory mappings.

Every program JAX compiles (or loads from the persistent cache) stays loaded while its jitted
function is cached, and each holds a few hundred memory mappings of code and data (the model's
programs: 300-700 each on a CPU). Linux caps a process at ``vm.max_map_count`` mappings (65,530
by default), and an allocation past the cap aborts the process inside XLA: a long-lived process
that evaluates a few hundred distinct programs (a notebook trying many model options, the test
suite's workers) would die with "Fatal Python error: Aborted". Before each evaluation,
`release_programs_near_map_limit` drops JAX's compiled programs once the mappings pass a share of
the cap (`jax.clear_caches`); the next call of each program compiles it again, or reads it from
the persistent compilation cache. Elsewhere than Linux (no ``/proc``) it does nothing.
"""

from __future__ import annotations

from pathlib import Path

import jax

#: Share of the process's mapping limit past which compiled programs are released.
RELEASE_SHARE = 0.6
#: Mappings (a share of the limit) that must be added after a release before the next one, for
#: the mappings a release cannot free (other libraries' memory maps): without it every call
#: past the share would drop and recompile every program.
REGROWTH_SHARE = 0.1
_after_release = 0  # the mappings the last release left
_MAPS = Path("/proc/self/maps")
_LIMIT = Path("/proc/sys/vm/max_map_count")


def map_count() -> int | None:
    """Memory mappings this process holds (lines of /proc/self/maps), or None without /proc."""
    try:
        with _MAPS.open("rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None


def map_limit() -> int | None:
    """The kernel's cap on a process's memory mappings (vm.max_map_count), or None without /proc."""
    try:
        return int(_LIMIT.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def release_programs_near_map_limit(share: float = RELEASE_SHARE) -> bool:
    """Drop JAX's compiled programs when this process's mappings pass ``share`` of the cap, and
    `REGROWTH_SHARE` of it more than the last release left.

    Returns:
        True when they were dropped, else False (also where /proc does not tell).
    """
    global _after_release
    count, limit = map_count(), map_limit()
    if count is None or limit is None or count < max(share * limit, _after_release + REGROWTH_SHARE * limit):
        return False
    jax.clear_caches()
    _after_release = map_count() or 0
    return True
