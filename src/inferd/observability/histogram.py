"""The histograms the server keeps (:mod:`inferd.observability.stats`): counts per
bucket and a sum, plain Python arithmetic, exported by the Prometheus collectors."""

from __future__ import annotations

from bisect import bisect_left

# Seconds; finer than Prometheus' defaults below 5 ms, where most requests of a
# fast model fall.
DURATION_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# Seconds one load took: ms (a small sklearn model) to minutes (a big model, a slow disk).
LOAD_BUCKETS: tuple[float, ...] = (*DURATION_BUCKETS[3:], 60.0, 120.0, 300.0, 600.0)
# Responses one stream sent.
STREAM_RESPONSE_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
# Rows in one execution of a model.
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Tokens per second of one completion (a tiny CPU model to a large GPU batch).
TOKEN_RATE_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)

NS_PER_SECOND = 1e9


class Histogram:
    """Counts of observed values per bucket (``counts[i]``: values <= ``bounds[i]``
    and above the bound before it; the last count is everything above the last
    bound), and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        """``times`` values of ``value`` (one call for tokens that came together)."""
        self.counts[bisect_left(self.bounds, value)] += times
        self.sum += value * times

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, values <= it) per bucket, ending with (inf, count)."""
        total = 0
        out = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append((bound, total))
        return out
