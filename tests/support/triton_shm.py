"""The tests' name for ``benchmarks.common.triton_shm``, which the benchmarks share."""

from benchmarks.common.triton_shm import *  # noqa: F403
