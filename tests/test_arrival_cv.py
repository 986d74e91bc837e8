"""Arrivals more regular than Poisson (``Workload.arrival_cv``): the GI/G/1 wait factor against a
simulated single server, the open loop against the simulated engine, and the setting's checks."""

import numpy as np
import pytest

import jaxpareto as jp
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.physics.queueing import mg1_wait_ms, renewal_wait_factor
from simulator import at_load, model_step, simulate

GPU, MODEL, OSL = "h100-sxm", "llama-3.1-8b", 128


def single_server_wait(arrival_scv: float, service_scv: float, load: float, n: int = 400_000) -> float:
    """The mean wait of a FCFS single server in units of the mean gap, by Lindley's recursion
    W' = max(0, W + S - A) written as a running minimum: gaps gamma distributed (mean 1, squared
    CV ``arrival_scv``), services lognormal (mean ``load``, squared CV ``service_scv``)."""
    rng = np.random.default_rng(7)
    gaps = rng.gamma(1.0 / arrival_scv, arrival_scv, n)
    sigma = np.sqrt(np.log1p(service_scv))
    service = load * rng.lognormal(-0.5 * sigma ** 2, sigma, n)
    walk = np.concatenate([[0.0], np.cumsum(service[:-1] - gaps[1:])])
    waits = walk - np.minimum(np.minimum.accumulate(walk), 0.0)
    return float(waits[n // 10:].mean())


def test_poisson_arrivals_keep_the_pollaczek_khinchine_wait():
    """c_a² = 1 is M/G/1: the factor is exactly 1 at every load and service spread."""
    for load in (0.01, 0.3, 0.9, 0.999):
        for service_scv in (0.0, 0.19, 1.0, 4.0):
            assert float(renewal_wait_factor(1.0, service_scv, load)) == 1.0
    wait, load = mg1_wait_ms(0.5, 1.2, 0.3, 1.0)
    assert float(wait) == pytest.approx(0.6 * 1.2 * 1.3 / (2 * 0.4), rel=1e-6) and float(load) == pytest.approx(0.6)


@pytest.mark.parametrize("service_scv", [0.0, 0.19, 1.0])
@pytest.mark.parametrize("arrival_scv", [0.125, 0.5])
@pytest.mark.parametrize("load", [0.3, 0.6, 0.9])
def test_the_factor_gives_the_simulated_single_servers_wait(arrival_scv, service_scv, load):
    """Krämer and Langenbach-Belz's GI/G/1 wait (Pollaczek-Khinchine's times the factor) within
    10 % of a simulated server's, or within a tenth of the mean service time where the wait is
    short (regular arrivals at a low load wait almost nothing)."""
    simulated = single_server_wait(arrival_scv, service_scv, load)
    poisson = load * load * (1.0 + service_scv) / (2.0 * (1.0 - load))
    model = poisson * float(renewal_wait_factor(arrival_scv, service_scv, load))
    assert abs(model - simulated) <= max(0.10 * simulated, 0.10 * load), (model, simulated)
    # and more regular arrivals wait less than Poisson ones
    assert model < poisson


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
