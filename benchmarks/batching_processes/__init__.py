"""``python -m benchmarks.batching_processes``: does per-process batching keep what one
batcher gave?

With ``protocol_processes`` N > 1 a batched model that can be replicated runs in
every protocol process, each with its own batcher: requests taken by different
processes do not meet. Issue #27 accepts that only if per-process batching reaches
the same throughput and batch sizes at the same load. This measures it: a
repository with two batched models (the light iris model, and a device-like one
whose cost is mostly per call), served in each layout (one process with the model
in one worker, the single-process default; one process with the model in it; N
protocol processes for each ``--processes`` value), the layouts alternating over
rounds in one run, at each ``--connections`` count (closed loop, every answer
checked), reporting req/s, p50/p99 and the mean batch size from the statistics
extension over each window.

Exit status: 0 ok, 1 a layout did not complete, 2 errors under load.
"""
