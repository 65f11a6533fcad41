#!/usr/bin/env bash
# Installs inferd with its test tools into .venv and runs every check CI runs:
# lint, format, types, generated-code freshness, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

echo "== ruff"
.venv/bin/python -m ruff check src tests benchmarks scripts examples
.venv/bin/python -m ruff format --check src tests benchmarks scripts examples
echo "== mypy"
.venv/bin/python -m mypy src
echo "== generated protobuf code"
.venv/bin/python scripts/gen_proto.py --check
echo "== pytest"
.venv/bin/python -m pytest "$@"
