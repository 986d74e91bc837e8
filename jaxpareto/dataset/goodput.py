"""`peak_goodput`: the highest request rate served within the SLO (DistServe's goodput).

DistServe (Zhong et al., OSDI 2024) defines a server's goodput as the highest request rate at
which the requests meet their latency targets; each point of an open-loop sweep carries
``request_goodput`` (its throughput where every target of the sweep's ``slo`` holds, else 0),
and the peak over ``request_rate`` is that goodput.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from jaxpareto.definitions.axes import LOAD_AXES
from jaxpareto.definitions.errors import JaxparetoError


def peak_goodput(ds: xr.Dataset) -> xr.Dataset:
    """The peak of ``request_goodput`` over the load of each cell, and the rate it peaks at.

    Args:
        ds: a sweep with ``request_goodput`` over ``request_rate`` (``arrivals="poisson"``).

    Returns:
        Dataset over the other dimensions: ``request_goodput_peak`` [requests/s] (0 where no rate
        meets the SLO, NaN where no point is feasible, or, in an interrupted store opened with
        ``incomplete="mark"``, where some rate of the cell was not computed) and
        ``request_rate_at_peak`` [requests/s] (the lowest rate reaching the peak; NaN where the
        peak is 0 or NaN).

    Raises:
        JaxparetoError: ``ds`` is not an open-loop sweep with ``request_goodput``.
    """
    load = LOAD_AXES["open"]
    if not isinstance(ds, xr.Dataset) or load not in ds.dims or "request_goodput" not in ds:
        raise JaxparetoError("ds", "expected an open-loop sweep (arrivals='poisson') with request_goodput over "
                                   "request_rate")
    goodput = ds.request_goodput
    peak = goodput.max(load, skipna=True)
    if "computed" in ds:  # an interrupted store's cell with rates not computed has no known peak
        peak = peak.where(ds.computed.all(load))
    filled = goodput.fillna(-np.inf)
    # the lowest rate at the peak, by a mask rather than an argmax indexer: a store opened lazily
    # cannot index with a chunked argmax, and a grid of single-valued axes made xarray's indexing fail
    at = ds[load].where(filled == filled.max(load)).min(load)
    at = at.where(peak > 0)
    units = {"units": "requests/s"}
    return xr.Dataset({
        "request_goodput_peak": peak.assign_attrs(units, long_name="highest requests/s served within the SLO"),
        "request_rate_at_peak": at.assign_attrs(units, long_name="the request rate at which goodput peaks"),
    }, attrs={**ds.attrs, "reduction": "peak_goodput"})
