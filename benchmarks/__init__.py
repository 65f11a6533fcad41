"""inferd's benchmarks: ``python -m benchmarks <scenario> [options]`` from the repository root.

See benchmarks/README.md for every scenario and the command that reproduces it.
"""
