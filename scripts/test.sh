#!/usr/bin/env bash
# Sets up everything on a fresh machine, then runs the linters, the type checker and the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
.venv/bin/ruff check workcenter workcenter_launcher.py tests benchmarks
.venv/bin/ruff format --check workcenter workcenter_launcher.py tests benchmarks
.venv/bin/mypy workcenter workcenter_launcher.py
# Two test processes (ADR-0102); arguments given after override it, `-n 0` runs one.
.venv/bin/python -m pytest -n 2 "$@"
