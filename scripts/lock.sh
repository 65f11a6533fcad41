#!/usr/bin/env bash
# Refreshes the lock files that CI and scripts/test.sh install from (requirements/*.txt), with
# uv's resolver, for CPython 3.11 on Linux: test.txt (inferd with every test extra: the .venv),
# lowest.txt (.venv-lowest), mlserver.txt (.mlserver-venv), kserve.txt (.venv-kserve) and
# vllm.txt (.venv-vllm: inferd beside vLLM's CPU build).
# pyproject.toml's ranges stay wide; only these files pin. Run it, then `scripts/test.sh` (which
# installs from the new locks) and `scripts/test.sh --latest` (no lock), and commit the locks
# with the fixes they needed. Options are passed to every `uv pip compile` (for example
# --upgrade-package msgspec to move one package, or --upgrade to move them all).
set -euo pipefail
cd "$(dirname "$0")/.."

UV=${UV:-uv}
if ! command -v "$UV" >/dev/null; then  # uv in a throwaway venv, not in the project's
    tools=$(mktemp -d)
    python3 -m venv "$tools" && "$tools/bin/python" -m pip install --quiet uv
    UV="$tools/bin/uv"
fi
# pip's find-links (a local torch CPU build, where the machine has one) for uv too: the lock then
# names the build pip installs (torch's +cpu) instead of PyPI's CUDA build and its libraries.
links=()
for folder in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$folder"); done

compile() {
    "$UV" pip compile --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
        --no-header --annotation-style line "${links[@]}" "$@"
}
header() { printf '# Locked by scripts/lock.sh on %s; refresh with scripts/lock.sh.\n' "$(date -u +%F)"; }

{ header; compile pyproject.toml --extra test "$@"; } >requirements/test.txt
{ header; compile pyproject.toml requirements/lowest.in --extra sklearn "$@"; } \
    >requirements/lowest.txt
{ header; compile requirements/mlserver.in \
    --constraint <(grep -E '^(pandas|scikit-learn|joblib|numpy)==' requirements/test.txt) \
    "$@"; } >requirements/mlserver.txt
{ header; compile requirements/kserve.in "$@"; } >requirements/kserve.txt
# Without the torch add-ons that do not load beside torch's CPU build (requirements/vllm.in).
{ header; compile pyproject.toml requirements/vllm.in --no-emit-package torchvision \
    --no-emit-package torchaudio --no-emit-package torchcodec "$@"; } >requirements/vllm.txt
echo "locked: $(grep -c '==' requirements/test.txt) packages for .venv"
