#!/usr/bin/env bash
# The tests marked slow (pyproject.toml): long consistency checks left out of the default
# `pytest -q` so that the suite stays under 10 minutes on 2 CPU cores. Run before a release, or
# after changing the optimiser, the exact solver, the LRU model, calibration or device sharding.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m pytest -q -m slow "$@"
