"""jaxpareto: agent-serving performance model in JAX, swept over configuration grids.

Public API::

    import jaxpareto as jp
    ds = jp.sweep(gpu="h100-sxm", model="llama-3.1-70b", tp=[1, 2, 4, 8], concurrency=[1, 32, 256],
                  think_time_s=2.0, context_tokens=32768, hit_rate=0.9)
    front = jp.pareto_front(ds)

The implementation lives in layer packages (``definitions``, ``physics``, ``mapper``,
``dataset``, ``search``, ``measure``, ``plot``, ``cli``); this module re-exports them and turns
on JAX's persistent compilation cache (`jaxpareto.definitions.compilation_cache`).
"""

from jaxpareto.definitions.compilation_cache import compilation_cache_dir
from jaxpareto.definitions.compilation_cache import enable_compilation_cache
from jaxpareto.dataset.comparison import cache_comparison_sweep
from jaxpareto.dataset.costs import add_costs
from jaxpareto.dataset.goodput import peak_goodput
from jaxpareto.dataset.mapping import agent_from_standard
from jaxpareto.dataset.pareto import frontier_table
from jaxpareto.dataset.pareto import pareto_front
from jaxpareto.dataset.plan import SweepPlan
from jaxpareto.dataset.plan import plan_sweep
from jaxpareto.dataset.reduce import pareto_sweep
from jaxpareto.dataset.session import session_sweep
from jaxpareto.dataset.store import open_sweep
from jaxpareto.dataset.store import sweep_to_zarr
from jaxpareto.dataset.store import to_zarr
from jaxpareto.dataset.sweep import sweep
from jaxpareto.definitions import catalog
from jaxpareto.definitions.axes import GridPoint
from jaxpareto.definitions.engine import Engine
from jaxpareto.definitions.errors import JaxparetoError
from jaxpareto.definitions.hardware import Hardware
from jaxpareto.definitions.model import Model
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency
from jaxpareto.definitions.settings import Solver
from jaxpareto.definitions.settings import Workload
from jaxpareto.definitions.version import __version__
from jaxpareto.measure.calibrate import CalibrationResult
from jaxpareto.measure.calibrate import calibrate
from jaxpareto.measure.metrics import metrics
from jaxpareto.measure.predict import predict
from jaxpareto.measure.records import read_records
from jaxpareto.measure.validate import validate
from jaxpareto.measure.validation_set import load_validation_set
from jaxpareto.plot import plot_cache_comparison  # matplotlib is imported only when a plot is drawn
from jaxpareto.plot import plot_frontier
from jaxpareto.plot import plot_memory_wall
from jaxpareto.plot import save_plots
from jaxpareto.search.optimize import OptimizeResult
from jaxpareto.search.optimize import optimize
from jaxpareto.search.sizing import SizingResult
from jaxpareto.search.sizing import size_deployment

__all__ = [
    "CalibrationResult",
    "Efficiency",
    "Engine",
    "GridPoint",
    "Hardware",
    "JaxparetoError",
    "Model",
    "ModelOptions",
    "OptimizeResult",
    "SizingResult",
    "Solver",
    "SweepPlan",
    "Workload",
    "__version__",
    "add_costs",
    "agent_from_standard",
    "cache_comparison_sweep",
    "calibrate",
    "catalog",
    "compilation_cache_dir",
    "frontier_table",
    "load_validation_set",
    "metrics",
    "open_sweep",
    "peak_goodput",
    "optimize",
    "pareto_front",
    "pareto_sweep",
    "plan_sweep",
    "plot_cache_comparison",
    "plot_frontier",
    "plot_memory_wall",
    "predict",
    "read_records",
    "save_plots",
    "session_sweep",
    "size_deployment",
    "sweep",
    "sweep_to_zarr",
    "to_zarr",
    "validate",
]

enable_compilation_cache()  # warm starts: a second process loads what the first compiled
