"""Arrivals more regular than Poisson (``Workload.arrival_cv``): the GI/G/1 wait factor against a
simulated single server, the open loop against the simulated engine, and the setting's checks."""

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.physics.queueing import mg1_wait_ms, renewal_wait_factor
from simulator import at_load, model_step, simulate

GPU, MODEL, OSL = "h100-sxm", "llama-3.1-8b", 128


def single_server_wait(arrival_scv: float, service_scv: float, load: float, n: int = 1_000_000,
                       seeds: int = 2) -> float:
    """The mean wait of a FCFS single server in units of the mean gap, by Lindley's recursion
    W' = max(0, W + S - A) written as a running minimum, averaged over ``seeds`` runs: gaps gamma
    distributed (mean 1, squared CV ``arrival_scv``; 0: evenly spaced), services lognormal (mean
    ``load``, squared CV ``service_scv``)."""
    means = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(1.0 / arrival_scv, arrival_scv, n) if arrival_scv > 0 else np.ones(n)
        sigma = np.sqrt(np.log1p(service_scv))
        service = load * rng.lognormal(-0.5 * sigma ** 2, sigma, n)
        walk = np.concatenate([[0.0], np.cumsum(service[:-1] - gaps[1:])])
        waits = walk - np.minimum(np.minimum.accumulate(walk), 0.0)
        means.append(waits[n // 10:].mean())
    return float(np.mean(means))


def test_poisson_arrivals_keep_the_pollaczek_khinchine_wait():
    """c_a² = 1 is M/G/1: the factor is exactly 1 at every load and service spread."""
    for load in (0.01, 0.3, 0.9, 0.999):
        for service_scv in (0.0, 0.19, 1.0, 4.0):
            assert float(renewal_wait_factor(1.0, service_scv, load)) == 1.0
    wait, load = mg1_wait_ms(0.5, 1.2, 0.3, 1.0)
    assert float(wait) == pytest.approx(0.6 * 1.2 * 1.3 / (2 * 0.4), rel=1e-6) and float(load) == pytest.approx(0.6)


@pytest.mark.parametrize("service_scv", [0.0, 0.19, 1.0])
@pytest.mark.parametrize("arrival_scv", [0.0, 0.125, 0.5])
@pytest.mark.parametrize("load", [0.3, 0.6, 0.9])
def test_the_factor_gives_the_simulated_single_servers_wait(arrival_scv, service_scv, load):
    """Krämer and Langenbach-Belz's GI/G/1 wait (Pollaczek-Khinchine's times the factor) within
    10 % of a simulated server's, or within a tenth of the mean service time where the wait is
    short (regular arrivals at a low load wait almost nothing); at a load of 0.9 with evenly
    spaced arrivals or c_a² 1/8 and fixed services it is low, by at most 0.15 of the mean service
    (the docstring's limits)."""
    simulated = single_server_wait(arrival_scv, service_scv, load)
    poisson = load * load * (1.0 + service_scv) / (2.0 * (1.0 - load))
    model = poisson * float(renewal_wait_factor(arrival_scv, service_scv, load))
    if load >= 0.9 and (arrival_scv == 0.0 and service_scv <= 0.19 or arrival_scv <= 0.125 and service_scv == 0.0):
        assert simulated - 0.15 * load <= model <= simulated, (model, simulated)
    else:
        assert abs(model - simulated) <= max(0.10 * simulated, 0.10 * load), (model, simulated)
    assert model < poisson  # more regular arrivals wait less than Poisson ones


@pytest.mark.parametrize("point", [(0.0, 0.0, 0.5), (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), (0.0, 0.19, 0.5),
                                   (0.5, 0.0, 0.5), (1.0, 0.19, 0.5), (1e-12, 1e-12, 0.7), (0.25, 1.0, 1e-9)])
def test_the_factor_has_finite_gradients_at_its_edges(point):
    """Reverse and forward mode alike, at D/D/1 (no spread at all), at the loads' ends and at
    Poisson arrivals: a where's untaken branch must not divide by 0 (it made jax.grad NaN at
    D/D/1), in float32 and float64."""
    import jax

    for dtype in (np.float32, np.float64):
        with jax.enable_x64(dtype == np.float64):
            args = tuple(np.asarray(x, dtype) for x in point)
            reverse = jax.grad(lambda *a: renewal_wait_factor(*a), argnums=(0, 1, 2))(*args)
            forward = [jax.jvp(lambda *a: renewal_wait_factor(*a), args, tuple(np.asarray(float(i == k), dtype)
                                                                               for i in range(3)))[1]
                       for k in range(3)]
            assert np.all(np.isfinite(reverse)) and np.all(np.isfinite(forward)), (dtype, reverse, forward)
            np.testing.assert_allclose(np.asarray(reverse, np.float64), np.asarray(forward, np.float64),
                                       rtol=1e-5, atol=1e-6)


def test_regular_arrivals_shorten_the_wait_of_the_simulated_engine():
    """Llama-3.1-405B-like prompts (9,429 tokens, CV 0.43, over one 8,192-token chunk) at 60 %
    of capacity, dealt to the engine every other arrival (Erlang-2 gaps): mean TTFT within 8 %
    of the simulated server, and below the Poisson stream's in both."""
    context, spread, chunk = 9429, 0.43, 8192.0
    settings = dict(arrivals="poisson", context_tokens=context, osl=OSL, dtype="float64", prefill_model="shared",
                    isl_cv=spread, osl_cv=spread, prefill_chunk_tokens=chunk, variables=["ttft_ms", "concurrency_max"])
    rates = np.geomspace(0.02, 200.0, 500)
    poisson = jp.sweep(GPU, MODEL, tp=1, request_rate=rates, **settings).squeeze()
    dealt = jp.sweep(GPU, MODEL, tp=1, request_rate=rates, arrival_cv=2 ** -0.5, **settings).squeeze()
    model = at_load(poisson, 0.6)
    rate = float(model.request_rate)
    regular = dealt.sel(request_rate=rate)
    step = model_step(GPU, MODEL, context)
    runs = {cv: simulate(step, rate, 20_000, context, OSL, chunk, spread, spread, seed=3,
                         slots=int(model.concurrency_max), arrival_cv=cv) for cv in (1.0, 2 ** -0.5)}
    assert float(regular.ttft_ms) == pytest.approx(runs[2 ** -0.5].ttft_ms.mean(), rel=0.08)
    assert float(model.ttft_ms) == pytest.approx(runs[1.0].ttft_ms.mean(), rel=0.08)
    assert float(regular.ttft_ms) < float(model.ttft_ms)
    assert runs[2 ** -0.5].ttft_ms.mean() < runs[1.0].ttft_ms.mean()


def test_arrival_cv_is_checked_before_any_compute():
    """Bursts (above 1) and a closed loop (no arrivals to spread) are refused, naming the field."""
    with pytest.raises(JaxparetoError, match="arrival_cv"):
        jp.sweep(GPU, MODEL, tp=1, request_rate=[1.0], arrivals="poisson", arrival_cv=2.0)
    with pytest.raises(JaxparetoError, match="arrival_cv"):
        jp.sweep(GPU, MODEL, tp=1, concurrency=[4], arrival_cv=0.5)


def test_a_validation_row_takes_its_arrival_cv():
    """Cisco's two-node MLPerf server rows deal their queries over the engines in turn: their TTFT
    under Poisson arrivals falls with the row's ``arrival_cv`` (blank: Poisson), the other rows'
    not at all."""
    rows = jp.load_validation_set()
    rows = rows[rows["id"].str.contains("l405") & rows["id"].str.contains("server-ttft")].reset_index(drop=True)
    cisco = rows["id"].str.contains("cisco").to_numpy()
    assert rows.loc[cisco, "arrival_cv"].tolist() == [pytest.approx(2 ** -0.5, rel=1e-3)]
    assert rows.loc[~cisco, "arrival_cv"].isna().all()
    options = jp.ModelOptions(prefill_model="shared", arrivals="poisson")
    dealt = jp.validate(rows, options=options)["predicted"].to_numpy()
    poisson = jp.validate(rows.assign(arrival_cv=np.nan), options=options)["predicted"].to_numpy()
    assert (dealt[cisco] < 0.9 * poisson[cisco]).all()
    np.testing.assert_array_equal(dealt[~cisco], poisson[~cisco])


def test_a_rows_arrival_cv_is_checked_in_a_file_and_in_a_dataframe(tmp_path):
    """The CSV takes ``arrival_cv`` on server rows only; rows handed over as a DataFrame are held to
    the `Workload` field's bounds too (a burst, a negative or an infinite value is named, not run)."""
    import pandas as pd

    from jaxpareto.measure.validation_set import default_path

    raw = pd.read_csv(default_path(), dtype=str, keep_default_na=False)
    raw.loc[raw["id"] == "mlperf51-llama2-b200-nvidia-offline", "arrival_cv"] = "0.5"
    raw.to_csv(tmp_path / "offline_cv.csv", index=False)
    with pytest.raises(JaxparetoError, match="arrival_cv.*only load 'server' rows"):
        jp.load_validation_set(tmp_path / "offline_cv.csv")
    rows = jp.load_validation_set()
    rows = rows[rows["id"] == "mlperf51-l405-h100-cisco-server-ttft"]
    options = jp.ModelOptions(prefill_model="shared", arrivals="poisson")
    for bad, words in ((5.0, "out of range"), (-1.0, "out of range"), (np.inf, "finite")):
        with pytest.raises(JaxparetoError, match=f"mlperf51-l405-h100-cisco-server-ttft'.*arrival_cv: .*{words}"):
            jp.validate(rows.assign(arrival_cv=bad), options=options)
    with pytest.raises(JaxparetoError, match="isl_cv"):
        jp.validate(rows.assign(isl_cv=-0.5), options=options)
