#!/usr/bin/env bash
# The main job: every conformance suite against the reference engine, then the matrix.
# Extra arguments go to pytest (e.g. --mc-target=reference:legacy, --mc-only=MR-3, -k MR-3, suites/metadata).
# Four workers: the suites mostly wait (leases, TTLs, soaks), and --mc-compute-slots=auto runs at
# most one exploration per core; on 2 cores the reference's suites take about 73 s at -n 4 and
# 122 s at -n 2 with the same verdicts (docs/speed.md). A later -n (e.g. -n 2) overrides it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${MC_VENV:-.venv}
exec "$VENV/bin/python" -m pytest -p pytest_mooncake suites/ -n 4 -p no:cacheprovider "$@"
