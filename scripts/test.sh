#!/usr/bin/env bash
# Installs inferd with its test tools into .venv and runs every check CI runs:
# the dependency audit, lint, format, types, generated-code freshness, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

# Debian's chromium (the Swagger UI test) and wrk (the benchmark test), where root can install them.
scripts/install_test_tools.sh

# Side environments, made at the same time (mostly downloads) while the checks below run;
# each one's pip output goes to .ci-logs/<name>.log.
mkdir -p .ci-logs

# KServe's SDK models check the KServe manifests (tests/unit/test_deploy_manifests.py):
# the SDK's models only, without its model server's dependencies, in their own venv.
make_kserve_venv() {
    [ -x .venv-kserve/bin/python ] || "$PYTHON" -m venv .venv-kserve
    .venv-kserve/bin/python -m pip install --quiet --no-deps 'kserve==0.21.0'
    .venv-kserve/bin/python -m pip install --quiet six 'kubernetes>=31' pyyaml
}

# MLServer 1.7.1 in a virtualenv of its own, for the tests that compare with it (-m mlserver:
# tests/unit/test_mlserver_codecs.py, tests/e2e/test_mlserver_differential.py); those tests
# are skipped when it cannot be made (no network). About 4 minutes.
make_mlserver_venv() {
    # mlserver-sklearn for the memory benchmark's side-by-side test; scikit-learn and joblib
    # as in .venv, so both servers load the same pickled forest.
    local pandas sklearn joblib
    pandas=$(.venv/bin/python -c 'import pandas; print(pandas.__version__)')
    sklearn=$(.venv/bin/python -c 'import sklearn; print(sklearn.__version__)')
    joblib=$(.venv/bin/python -c 'import joblib; print(joblib.__version__)')
    [ -x .mlserver-venv/bin/mlserver ] || { "$PYTHON" -m venv .mlserver-venv \
        && .mlserver-venv/bin/pip install --quiet 'mlserver==1.7.1' 'mlserver-sklearn==1.7.1' \
            'uvloop<0.22' "pandas==$pandas" "scikit-learn==$sklearn" "joblib==$joblib"; }
}

# The lowest protobuf/grpcio inferd supports (pyproject.toml), in a venv of their own: the
# generated code is made with grpcio-tools 1.62.3 (which needs protobuf<5), and the gRPC
# tests must pass on these versions too.
make_lowest_venv() {
    [ -x .venv-lowest/bin/python ] || "$PYTHON" -m venv .venv-lowest
    .venv-lowest/bin/python -m pip install --quiet -e '.[sklearn]' 'numpy>=2' \
        'protobuf==4.25.1' 'grpcio==1.62.3' 'grpcio-health-checking==1.62.3' \
        'grpcio-reflection==1.62.3' 'grpcio-tools==1.62.3' 'tritonclient[grpc,http]==2.41.0' \
        pytest pytest-timeout httpx hypothesis
}

# pip's resolver (dry run, nothing installed): inferd's wheel beside kserve (protobuf 6) and
# beside a TensorFlow that pins protobuf<5.
co_install_dry_runs() {
    local wheel_dir
    wheel_dir=$(mktemp -d)
    .venv/bin/python -m pip wheel --quiet --no-deps . -w "$wheel_dir"
    for stack in kserve 'tensorflow-cpu<2.18'; do
        echo "-- inferd + $stack"
        .venv/bin/python -m pip install --quiet --dry-run --ignore-installed \
            "$wheel_dir"/inferd-*.whl "$stack" || return 1
    done
    rm -rf "$wheel_dir"
}

declare -A side_jobs
for job in make_kserve_venv make_mlserver_venv make_lowest_venv co_install_dry_runs; do
    "$job" >".ci-logs/$job.log" 2>&1 &
    side_jobs[$job]=$!
done
# A side job's exit status, its log shown when it failed.
finished() {
    local job=$1
    if wait "${side_jobs[$job]}"; then return 0; fi
    echo "!! $job failed:"; cat ".ci-logs/$job.log"; return 1
}

echo "== dependency audit (known vulnerabilities; exceptions: scripts/audit-exceptions.txt)"
"$PYTHON" scripts/audit_dependencies.py

echo "== ruff"
.venv/bin/python -m ruff check src tests benchmarks scripts examples
.venv/bin/python -m ruff format --check src tests benchmarks scripts examples
echo "== mypy"
.venv/bin/python -m mypy src

echo "== co-installable: inferd + kserve, inferd + tensorflow-cpu<2.18 (pip --dry-run)"
finished co_install_dry_runs
finished make_kserve_venv
if finished make_mlserver_venv; then
    export INFERD_BENCH_MLSERVER_PYTHON=${INFERD_BENCH_MLSERVER_PYTHON:-$PWD/.mlserver-venv/bin/python}
else
    echo "MLServer 1.7.1 could not be installed: the tests comparing with it are skipped"
fi
echo "== lowest protobuf/grpcio: generated protobuf code, gRPC tests"
finished make_lowest_venv
.venv-lowest/bin/python scripts/gen_proto.py --check
.venv-lowest/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_protocol.py \
    tests/integration/test_grpc_servicer.py tests/e2e/test_grpc*.py tests/e2e/test_tool_infer.py

echo "== pytest"
.venv/bin/python -m pytest "$@"
