"""Run a script in a fresh interpreter with N forced CPU devices (XLA's host platform split), for
the tests that compare several devices with one."""

import os
import subprocess
import sys
from pathlib import Path


def run_on_cpu_devices(script: str, folder: Path, *args: str, count: int = 4) -> None:
    """Write ``script`` into ``folder`` and run it with ``count`` CPU devices and ``args``; fail the
    test with the script's stderr when it exits non-zero."""
    path = folder / "on_devices.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(path), *args], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
