"""Standard-to-agent mapping (seed eq. 7) against the full model."""

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.dataset.mapping import agent_from_standard

GRID = dict(gpu="h200-sxm", model=["llama-3.1-70b", "qwen3-235b-a22b"], tp=8, context_tokens=32768, hit_rate=0.9)


def test_fixed_point_mapping_reproduces_the_full_model():
    standard = jp.sweep(**GRID, concurrency=list(range(1, 257)), think_time_s=0.0, dtype="float64", tol=1e-12)
    mapped = agent_from_standard(standard, [0.5, 2.0, 10.0], turns=20)
    full = jp.sweep(**GRID, concurrency=[4, 16, 64, 200], think_time_s=[0.5, 2.0, 10.0], dtype="float64", tol=1e-12)
    got = mapped.sel(concurrency=[4, 16, 64, 200])
    want = full.turns_per_s.transpose(*got.turns_per_s.dims)
    np.testing.assert_allclose(got.turns_per_s.values, want.values, rtol=2e-3)  # linear interpolation of R(B)
    np.testing.assert_allclose(got.tasks_per_s.values, want.values / 20, rtol=2e-3)
    np.testing.assert_allclose(got.batch_eff.values, full.batch_eff.transpose(*got.batch_eff.dims).values, rtol=5e-3)


def test_seed_form_underestimates():
    standard = jp.sweep(**GRID, concurrency=list(range(1, 129)), think_time_s=0.0)
    exact = agent_from_standard(standard, 5.0)
    seed = agent_from_standard(standard, 5.0, method="seed")
    ok = np.isfinite(exact.turns_per_s.values)
    assert (seed.turns_per_s.values[ok] <= exact.turns_per_s.values[ok] * (1 + 1e-6)).all()
    assert (seed.turns_per_s.values[ok] < 0.99 * exact.turns_per_s.values[ok]).any()  # and visibly so
    with pytest.raises(jp.JaxparetoError, match="think_time_s = 0"):
        agent_from_standard(jp.sweep(**GRID, concurrency=[1, 2], think_time_s=1.0), 1.0)
