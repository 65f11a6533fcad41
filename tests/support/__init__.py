"""The tests' helpers. Those the benchmarks share (servers on free ports, polling,
process statistics, model folders, certificates, the tiny LM) live in
``benchmarks/common``; the modules of the same names here re-export them."""
