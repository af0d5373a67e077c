#!/usr/bin/env bash
# The speed figures of docs/speed.md in one command: the reference engine's suites, the whole
# suites/ against one real release, and the release matrix, each one pytest session, with wall
# time, load average and (with --before DIR) the verdict diff against an earlier measurement.
#   scripts/measure_speed.sh [--figures reference,release,matrix] [-n 2] [--out DIR]
#                            [--before DIR] [-- EXTRA PYTEST ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${MC_PYTHON:-.venv/bin/python}
exec "$PY" tests/benchmarks/bench_suite_speed.py "$@"
