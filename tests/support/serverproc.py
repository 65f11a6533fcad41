"""The tests' name for ``benchmarks.common.serverproc``, which the benchmarks share."""

from benchmarks.common.serverproc import *  # noqa: F403
