import os

import jax
import pytest
from hypothesis import settings

jax.config.update("jax_numpy_rank_promotion", "raise")

# JIT compilation makes a first example slow; determinism matters more than a deadline.
# JAXPARETO_EXAMPLES=1000 runs more examples when probing.
settings.register_profile("jaxpareto", deadline=None, derandomize=True,
                          max_examples=int(os.environ.get("JAXPARETO_EXAMPLES", 40)))
settings.load_profile("jaxpareto")


@pytest.fixture(scope="session")
def small_grid():
    """A small sweep over every kind of catalog model, shared by several tests."""
    import jaxpareto as jp

    return jp.sweep(
        gpu=["h100-sxm", "b200", "l40s"],
        model=["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "qwen3-235b-a22b", "gpt-oss-120b"],
        tp=[1, 2, 8],
        concurrency=[1, 7, 64, 700],
        think_time_s=[0.0, 2.0],
        context_tokens=[4096, 65536],
        hit_rate=[0.0, 0.9],
    )


@pytest.fixture(autouse=True, scope="module")
def _programs_within_the_map_limit():
    """A worker runs hundreds of tests' programs: drop them before the process's memory mappings
    reach the kernel's cap (jaxpareto.definitions.program_memory), which would abort it. Sweeps,
    searches and predictors check for themselves; this covers tests that jit the physics
    directly, once a module (a module's programs stay well under the 40 % left)."""
    from jaxpareto.definitions.program_memory import release_programs_near_map_limit

    release_programs_near_map_limit()
    yield


@pytest.fixture
def programs_kept(monkeypatch):
    """No release of compiled programs near the process's mapping limit during the test
    (jaxpareto.definitions.program_memory): a worker that ran many programs before may pass it
    between two calls whose compilations the test counts."""
    for module in ("jaxpareto.mapper", "jaxpareto.search.problem", "jaxpareto.search.layouts",
                   "jaxpareto.measure.predict"):
        monkeypatch.setattr(f"{module}.release_programs_near_map_limit", lambda *args, **kwargs: False)
