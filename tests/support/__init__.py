"""Helpers shared by the tests and the benchmarks (``python -m benchmarks``)."""
