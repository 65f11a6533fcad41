"""The tests' name for ``benchmarks.common.certs``, which the benchmarks share."""

from benchmarks.common.certs import *  # noqa: F403
