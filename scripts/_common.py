"""Helpers shared by the scripts that rebuild the README's tables and figures.

Only public interfaces are used: ``import jaxpareto as jp``, the ``jaxpareto`` console command,
the stored datasets it writes (xarray / zarr) and the benchmark scripts in ``benchmarks/``, run
as subprocesses.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def jaxpareto_command() -> list[str]:
    """The installed ``jaxpareto`` console command (the one next to this Python, else on PATH)."""
    beside = Path(sys.executable).with_name("jaxpareto")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("jaxpareto")
    if found:
        return [found]
    sys.exit("the `jaxpareto` command is not installed: run `pip install .` in the repository first")


def run(cmd: list[str], *, quiet: bool = False, cwd: Path | None = None) -> str:
    """Run a command, echo it, fail with its output when it fails; its stdout."""
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        sys.exit(f"command failed with status {result.returncode}: {' '.join(cmd)}")
    if not quiet:
        sys.stderr.write(result.stdout)
    return result.stdout


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """The README's table layout: ``| a | b |`` rows under a ``| --- |`` rule."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(line.replace("|  |", "| |") for line in lines)


@contextmanager
def timed(label: str):
    """Print how long the block took (stderr)."""
    start = time.perf_counter()
    yield
    print(f"{label}: {time.perf_counter() - start:.1f} s", file=sys.stderr)


def run_benchmark(name: str, options: list[str], *, scratch: bool, result_json: str) -> dict:
    """Run ``benchmarks/<name>.py`` with ``options`` and return its JSON result.

    The benchmark writes into ``benchmarks/results/``. With ``scratch`` (quick runs) it runs from
    a temporary copy of the repository's ``benchmarks/`` and ``tests/`` folders, so the recorded
    results stay untouched.
    """
    if not scratch:
        run([sys.executable, str(BENCHMARKS / f"{name}.py"), *options], quiet=False, cwd=REPO)
        return json.loads((BENCHMARKS / "results" / result_json).read_text())
    with tempfile.TemporaryDirectory(prefix="jaxpareto-bench-") as tmp:
        root = Path(tmp)
        (root / "benchmarks" / "results").mkdir(parents=True)
        shutil.copy2(BENCHMARKS / f"{name}.py", root / "benchmarks" / f"{name}.py")
        (root / "tests").symlink_to(REPO / "tests", target_is_directory=True)
        run([sys.executable, str(root / "benchmarks" / f"{name}.py"), *options], quiet=False, cwd=root)
        return json.loads((root / "benchmarks" / "results" / result_json).read_text())


def recorded(result_json: str) -> dict:
    """A result recorded in ``benchmarks/results/``."""
    path = BENCHMARKS / "results" / result_json
    if not path.exists():
        sys.exit(f"no recorded result {path}: run the script without --from-recorded first")
    return json.loads(path.read_text())


def device_suffix() -> str:
    """The JAX platform of this machine (``cpu``, ``gpu``), which names the benchmarks' JSON files."""
    import jax

    return jax.devices()[0].platform


def benchmark_parser(doc: str, bench: str, what: str = "grid"):
    """The options every benchmark-table script takes: ``--quick`` and ``--from-recorded``."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"the benchmark's smaller {what}, in a scratch copy "
                                                             "(checks the script; figures are not the README's)")
    parser.add_argument("--from-recorded", action="store_true",
                        help=f"format benchmarks/results/{bench}_<platform>.json without running anything")
    return parser


def benchmark_result(bench: str, args, options: list[str] = (), quick_suffix: bool = True) -> dict:
    """The recorded result (``--from-recorded``), else a fresh run of ``benchmarks/{bench}.py``
    (``--quick`` passed on, in a scratch copy)."""
    name = f"{bench}_{device_suffix()}{'_quick' if args.quick and quick_suffix else ''}.json"
    if args.from_recorded:
        return recorded(name)
    return run_benchmark(bench, (["--quick"] if args.quick else []) + list(options), scratch=args.quick,
                         result_json=name)


def aiconfigurator_core(what: str, flag: str) -> Path:
    """The folder of the ``aiconfigurator_core`` package installed in this Python (AIConfigurator
    0.12.0's data: ``systems/``); exits naming ``flag``, the option that gives ``what`` instead,
    when it is not installed."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"aiconfigurator is not installed in this Python: `pip install aiconfigurator` (0.12.0), or pass "
                 f"{flag} {what}")
    return Path(next(iter(spec.submodule_search_locations)))


def aiconfigurator_data(description: str) -> Path:
    """The ``systems/data`` folder of AIConfigurator 0.12.0's measured tables: the script's
    ``--data DIR`` (parsed here, with ``description`` as the command's), else the installed
    ``aiconfigurator_core`` package's (exits naming ``--data`` when neither is there)."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path, help="aiconfigurator_core/systems/data (default: the installed package's)")
    args = parser.parse_args()
    return args.data or aiconfigurator_core("PATH/TO/aiconfigurator_core/systems/data", "--data") / "systems" / "data"


def per_engine_medians(by_table: dict[str, float]) -> dict[str, float]:
    """Engine kernels -> the median of its version tables' values, from ``by_table`` keyed
    "<engine> <version>" (the rule of the catalog's ``engine_gemm`` tables); engines without a
    table are left out."""
    import statistics

    engines: dict[str, list[float]] = {}
    for table, value in by_table.items():
        engines.setdefault(table.split()[0], []).append(value)
    return {engine: statistics.median(values) for engine, values in engines.items()}
