#!/usr/bin/env bash
# Installs the Debian packages some tests drive, where this script can (as root, with
# apt-get): chromium renders the Swagger UI (tests/e2e/test_docs_browser.py), wrk loads the
# server in the benchmark test (tests/e2e/test_benchmarks.py). A test whose tool is missing
# is skipped, so CI would stay green without them: scripts/test.sh calls this first.
set -uo pipefail

missing=()
for tool in chromium wrk; do  # each tool is also the name of its Debian package
    command -v "$tool" >/dev/null || missing+=("$tool")
done
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "not installing ${missing[*]} (needs root and apt-get): the tests that use them will be skipped"
    exit 0
fi
echo "== installing ${missing[*]} for the browser and benchmark tests"
if ! apt-get update -qq; then
    echo "apt-get update failed: ${missing[*]} not installed; the tests that use them will be skipped"
    exit 0
fi
for package in "${missing[@]}"; do  # one at a time: one that fails does not keep the other out
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null \
        || echo "$package could not be installed: the tests that use it will be skipped"
done
