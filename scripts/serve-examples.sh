#!/usr/bin/env bash
# Installs inferd into .venv, trains the example scikit-learn model and serves
# every model under examples/models (REST on :8080, gRPC on :8081, metrics on :8082).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# The examples need the core and scikit-learn only; other frameworks are extras
# (pip install 'inferd[xgboost]', ...), so this stays a small, quick install.
.venv/bin/python -m pip install --quiet -e '.[sklearn]'
.venv/bin/python examples/train_sklearn.py
exec .venv/bin/inferd start examples/models
