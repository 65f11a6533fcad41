"""``python -m benchmarks.batching_processes``: does per-process batching keep what one
batcher gave?

A batched model replicated in N protocol processes had a batcher in each: requests
taken by different processes did not meet. Issue #27 accepted that only if
per-process batching reached the same throughput and batch sizes at the same load;
it did not, and the server now keeps such a model to one protocol process. This
measures it still, as what per-process batching is: N replicas, N independent
servers of one protocol process each with the model in it. A repository with two
batched models (the light iris model, and a device-like one whose cost is mostly
per call, one device for every replica), served in each layout (one process with
the model in one worker, the single-process default; one process with the model in
it; N replicas for each ``--replicas`` value, the connections split evenly over
them), the layouts alternating over rounds in one run, at each ``--connections``
count (closed loop, every answer checked), reporting req/s, p50/p99 and the mean
batch size from the statistics extension over each window (summed over replicas).

Exit status: 0 ok, 1 a layout did not complete, 2 errors under load.
"""
