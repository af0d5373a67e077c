#!/usr/bin/env bash
# The main job: every conformance suite against the reference engine, then the matrix.
# Extra arguments go to pytest (e.g. --mc-target=reference:legacy, --mc-only=MR-3, -k MR-3, suites/metadata).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${MC_VENV:-.venv}
exec "$VENV/bin/python" -m pytest -p pytest_mooncake suites/ -n 2 -p no:cacheprovider "$@"
