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
# MLServer 1.7.1 in a virtualenv of its own, for the tests that compare with it (-m mlserver:
# tests/unit/test_mlserver_codecs.py, tests/e2e/test_mlserver_differential.py); made once,
# those tests are skipped when it cannot be made (no network).
if [ -z "${INFERD_BENCH_MLSERVER_PYTHON:-}" ]; then
    PANDAS=$(.venv/bin/python -c 'import pandas; print(pandas.__version__)')
    if [ -x .mlserver-venv/bin/mlserver ] || { "$PYTHON" -m venv .mlserver-venv \
        && .mlserver-venv/bin/pip install --quiet 'mlserver==1.7.1' 'uvloop<0.22' "pandas==$PANDAS"; }; then
        export INFERD_BENCH_MLSERVER_PYTHON=$PWD/.mlserver-venv/bin/python
    else
        echo "MLServer 1.7.1 could not be installed: the tests comparing with it are skipped"
    fi
fi

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
