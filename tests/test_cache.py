"""Prefix-cache retention (TTL): the hit rate from the pause distribution, against Monte Carlo."""

import numpy as np
import pytest

import jaxpareto as jp

GRID = dict(gpu="h100-sxm", model="llama-3.1-70b", tp=8, concurrency=16, context_tokens=32768, hit_rate=0.95)


@pytest.mark.parametrize("distribution", ["deterministic", "exponential", "lognormal"])
def test_ttl_hit_rate_matches_monte_carlo(distribution):
    rng = np.random.default_rng(1)
    ttl, sigma = 60.0, 1.2
    means = [0.5, 20.0, 59.0, 61.0, 150.0, 900.0]
    ds = jp.sweep(**GRID, think_time_s=means, cache_ttl_s=ttl, pause_distribution=distribution, pause_sigma=sigma)
    got = ds.hit_rate_eff.squeeze().values
    for mean, h in zip(means, got):
        if distribution == "deterministic":
            pauses = np.full(200_000, mean)
        elif distribution == "exponential":
            pauses = rng.exponential(mean, 200_000)
        else:  # mean-preserving lognormal
            pauses = rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, 200_000)
        assert h == pytest.approx(0.95 * np.mean(pauses < ttl), abs=0.005), (distribution, mean)
    # fewer hits mean more prefill: TTFT never falls as pauses lengthen
    assert (np.diff(ds.ttft_ms.squeeze().values) >= -1e-3).all()


def test_no_ttl_is_the_seed_model():
    seed = jp.sweep(**GRID, think_time_s=[0.0, 100.0])
    np.testing.assert_array_equal(seed.hit_rate_eff.squeeze().values, np.float32([0.95, 0.95]))
    assert seed.attrs["cache_ttl_s"] == "none (no expiry)"
    with pytest.raises(jp.JaxparetoError, match="pause_distribution"):
        jp.sweep(**GRID, cache_ttl_s=10.0, pause_distribution="weibull")
    with pytest.raises(jp.JaxparetoError, match="cache_ttl_s"):
        jp.sweep(**GRID, cache_ttl_s=-1.0)
