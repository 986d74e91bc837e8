"""The package's layers: imports go only downward, with no circles (lazy imports included), and a
new grid axis is one row of the axis table plus its physics."""

import ast
from pathlib import Path

import numpy as np

from jaxpareto.definitions.axes import AXIS_TABLE, Axis, grid_axes
from jaxpareto.definitions.options import ModelOptions
from jaxpareto.definitions.settings import Efficiency, Solver, Workload
from jaxpareto.mapper import GridProblem
from jaxpareto.physics.point import evaluate_point

PACKAGE = Path(__file__).resolve().parents[1] / "jaxpareto"
# Lowest first: a module may import its own layer and the layers before it.
LAYERS = ("definitions", "physics", "mapper", "dataset", "search", "measure", "plot", "cli")
# What the scalar physics may import besides the standard library.
PHYSICS_THIRD_PARTY = {"jax", "numpy"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every module an import names, anywhere in the file (function bodies too): ``import a.b``,
    ``from a.b import c`` (the module a.b.c where c is one, else a.b), relative imports resolved
    against the file's package, and ``importlib.import_module("...")`` / ``__import__("...")``
    with a literal name."""
    modules = _modules()
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found += [(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base, node.lineno)
                      for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee in ("import_module", "__import__"):
                found.append((node.args[0].value, node.lineno))
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def _graph() -> dict[str, list[tuple[str, int]]]:
    """module -> the package modules it imports (with the line)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        if name != "jaxpareto":
            graph[name] = [(target if target in modules else target.rsplit(".", 1)[0], line)
                           for target, line in _imports(path) if target.split(".")[0] == "jaxpareto"]
    return graph


def test_the_import_scanner_sees_every_form_of_import(tmp_path, monkeypatch):
    """Relative, lazy and dynamic imports are all edges of the graph."""
    module = PACKAGE / "physics" / "memory.py"
    source = module.read_text() + (
        "\n\ndef _probe():\n    from ..cli import app\n    import importlib\n"
        "    importlib.import_module('jaxpareto.search.optimize')\n    __import__('jaxpareto')\n")
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == module else
                        Path.read_bytes(self).decode())
    targets = {t for t, _ in _imports(module)}
    assert {"jaxpareto.cli.app", "jaxpareto.search.optimize", "jaxpareto"} <= targets


def test_every_module_belongs_to_a_layer():
    loose = [m for m in _graph() if _layer(m) is None]
    assert not loose, f"modules outside the layer packages: {loose}"


def test_imports_go_only_down_the_layers():
    upward = []
    for module, targets in _graph().items():
        for target, line in targets:
            if target == "jaxpareto":
                upward.append(f"{module}:{line} imports the package root")
            elif _layer(target) is not None and _layer(target) > _layer(module):
                upward.append(f"{module}:{line} imports {target} (layer {LAYERS[_layer(target)]} is above "
                              f"{LAYERS[_layer(module)]})")
    assert not upward, "\n".join(upward)


def test_no_import_circles_lazy_imports_included():
    graph = {m: sorted({t for t, _ in targets}) for m, targets in _graph().items()}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph.get(node, []):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_physics_imports_only_jax_numpy_and_definitions():
    bad = []
    for path in (PACKAGE / "physics").glob("*.py"):
        for target, line in _imports(path):
            top = target.split(".")[0]
            if target.startswith("jaxpareto."):
                if _layer(target) not in (LAYERS.index("definitions"), LAYERS.index("physics")):
                    bad.append(f"{path.name}:{line} {target}")
            elif top not in PHYSICS_THIRD_PARTY and top not in _stdlib():
                bad.append(f"{path.name}:{line} {target}")
    assert not bad, bad


def _stdlib() -> set[str]:
    import sys

    return set(sys.stdlib_module_names)


def toy_point(point, workload, efficiency, solver, options=ModelOptions()):
    """The model with its TTFT scaled by a toy axis the physics reads as ``point.toy_scale``."""
    out = evaluate_point(point, workload, efficiency, solver, options=options)
    return out._replace(ttft_ms=out.ttft_ms * point.toy_scale)


def test_a_new_axis_is_one_table_row_plus_its_physics():
    toy = Axis("toy_scale", "1", "a toy multiplier on TTFT", low=0, default=1.0)
    table = (*AXIS_TABLE, toy)
    values = dict(gpu="h100-sxm", model=["llama-3.1-70b", "llama-3.1-8b"], tp=[4, 8], concurrency=[1, 64],
                  think_time_s=2.0, hit_rate=0.9, toy_scale=[1.0, 2.0, 3.0])
    definitions, axes = grid_axes(values, table=table)
    assert axes["context_tokens"].tolist() == [16384]  # the table's default
    params = {name: [d.to_params() for d in defs] for name, defs in definitions.items()}
    problem = GridProblem(params, axes, Workload(), Efficiency(), Solver(), outputs=("ttft_ms", "tpot_ms"),
                          table=table, point_fn=toy_point, chunk_points=8)
    out = problem.run()
    assert out["ttft_ms"].shape == (1, 2, 1, 2, 2, 1, 1, 1, 3)
    base = out["ttft_ms"][..., 0]
    assert np.isfinite(base).all() and (base > 0).all()
    np.testing.assert_array_equal(out["ttft_ms"][..., 1], 2 * base)
    np.testing.assert_array_equal(out["ttft_ms"][..., 2], 3 * base)
    np.testing.assert_array_equal(out["tpot_ms"][..., 0], out["tpot_ms"][..., 2])  # nothing else moved
