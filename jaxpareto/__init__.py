"""jaxpareto: agent-serving performance model in JAX, swept over configuration grids.

Public API::

    import jaxpareto as jp
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[1, 2, 4, 8], concurrency=[1, 32, 256],
                  think_time_s=2.0, context_tokens=32768, hit_rate=0.9)
    front = jp.pareto_front(ds)
"""

from importlib.metadata import PackageNotFoundError, version

from jaxpareto import catalog
from jaxpareto.calibrate import CalibrationResult, calibrate
from jaxpareto.cost import add_costs
from jaxpareto.errors import JaxparetoError
from jaxpareto.hardware import Hardware
from jaxpareto.mapping import agent_from_standard
from jaxpareto.metrics import metrics, read_records
from jaxpareto.model import Model
from jaxpareto.pareto import frontier_table, pareto_front
from jaxpareto.plot import plot_cache_comparison, plot_frontier, plot_memory_wall, save_plots  # lazy matplotlib
from jaxpareto.optimize import OptimizeResult, optimize
from jaxpareto.options import ModelOptions
from jaxpareto.settings import Efficiency
from jaxpareto.reduce import pareto_sweep
from jaxpareto.session import session_sweep
from jaxpareto.sizing import SizingResult, size_deployment
from jaxpareto.store import sweep_to_zarr, to_zarr
from jaxpareto.sweep import sweep
from jaxpareto.validate import predict, validate
from jaxpareto.validation_set import load_validation_set

try:
    __version__ = version("jaxpareto")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+source"

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
