#!/usr/bin/env bash
# Installs inferd with its test tools into .venv and runs every check CI runs:
# the dependency audit, lint, format, types, generated-code freshness, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

# The Swagger UI test renders the docs in headless Chromium (Debian's package).
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing chromium for the browser test"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "chromium could not be installed: the browser test will be skipped"
fi

# KServe's SDK models check the KServe manifests (tests/unit/test_deploy_manifests.py):
# the SDK's models only, without its model server's dependencies, in their own venv.
[ -x .venv-kserve/bin/python ] || "$PYTHON" -m venv .venv-kserve
.venv-kserve/bin/python -m pip install --quiet --no-deps 'kserve==0.21.0'
.venv-kserve/bin/python -m pip install --quiet six 'kubernetes>=31' pyyaml

echo "== dependency audit (known vulnerabilities; exceptions: scripts/audit-exceptions.txt)"
"$PYTHON" scripts/audit_dependencies.py

echo "== ruff"
.venv/bin/python -m ruff check src tests benchmarks scripts examples
.venv/bin/python -m ruff format --check src tests benchmarks scripts examples
echo "== mypy"
.venv/bin/python -m mypy src
echo "== generated protobuf code"
.venv/bin/python scripts/gen_proto.py --check
echo "== pytest"
.venv/bin/python -m pytest "$@"
