"""The tests' name for ``benchmarks.common.procstat``, which the benchmarks share."""

from benchmarks.common.procstat import *  # noqa: F403
