"""The documented response schemas match what the server really builds."""

from __future__ import annotations

import time

import msgspec

from inferd.observability.stats import ModelStats
from inferd.server.docs.openapi import components
from inferd.server.rest.responses import ModelStatisticsResponseBody


def test_statistics_answers_fit_their_documented_schema() -> None:
    stats = ModelStats("iris", "2")
    started = time.perf_counter_ns()
    stats.succeeded(started, started + 1_000)
    stats.failed(started, started + 2_000)
    stats.executed(4, 2)
    answer = {"model_stats": [stats.to_dict(), ModelStats("echo", "").to_dict()]}
    decoded = msgspec.convert(answer, ModelStatisticsResponseBody, strict=True)
    assert decoded.model_stats[0].inference_stats.success.count == 1
    assert decoded.model_stats[0].batch_stats[0].batch_size == 4


def test_every_documented_schema_has_a_public_name() -> None:
    assert "ModelStatisticsResponse" in components()
    assert not any(name.startswith("_") for name in components())
