#!/usr/bin/env bash
# The project's own tests: the reference engine, the plugin (pytester), interop with the real
# Mooncake 0.3.13 wheel, and the detection proof. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${MC_VENV:-.venv}
exec "$VENV/bin/python" -m pytest tests/ -n 2 --dist loadgroup -p no:cacheprovider "$@"
