"""jaxpareto: agent-serving performance model in JAX, swept over configuration grids.

Public API::

    import jaxpareto as jp
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[1, 2, 4, 8], concurrency=[1, 32, 256],
                  think_time_s=2.0, context_tokens=32768, hit_rate=0.9)
    front = jp.pareto_front(ds)
"""

from jaxpareto.definitions import catalog
from jaxpareto.measure.calibrate import CalibrationResult, calibrate
from jaxpareto.dataset.costs import add_costs
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.dataset.mapping import agent_from_standard
from jaxpareto.measure.metrics import metrics, read_records
from jaxpareto.definitions.model import Model
from jaxpareto.dataset.pareto import frontier_table, pareto_front
from jaxpareto.plot.draw import plot_cache_comparison, plot_frontier, plot_memory_wall, save_plots  # lazy matplotlib
from jaxpareto.search.optimize import OptimizeResult, optimize
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency
from jaxpareto.definitions.version import __version__
from jaxpareto.dataset.reduce import pareto_sweep
from jaxpareto.dataset.session import session_sweep
from jaxpareto.search.sizing import SizingResult, size_deployment
from jaxpareto.dataset.store import sweep_to_zarr, to_zarr
from jaxpareto.dataset.sweep import sweep
from jaxpareto.measure.validate import predict, validate
from jaxpareto.measure.validation_set import load_validation_set


__all__ = [
    "CalibrationResult",
    "Efficiency",
    "ModelOptions",
    "add_costs",
    "calibrate",
    "load_validation_set",
    "predict",
    "validate",
    "agent_from_standard",
    "Hardware",
    "JaxparetoError",
    "Model",
    "OptimizeResult",
    "SizingResult",
    "catalog",
    "frontier_table",
    "metrics", "read_records",
    "pareto_front",
    "plot_cache_comparison", "plot_frontier", "plot_memory_wall", "save_plots",
    "optimize",
    "pareto_sweep",
    "session_sweep",
    "size_deployment",
    "sweep",
    "sweep_to_zarr",
    "to_zarr",
    "__version__",
]
