"""The tests' name for ``benchmarks.common.polling``, which the benchmarks share."""

from benchmarks.common.polling import *  # noqa: F403
