"""Which models each protocol process may hold a copy of (supervisor/placement.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from inferd.errors import ErrorCode, InvalidRequest
from inferd.settings import ModelSettings
from inferd.supervisor.placement import (
    effective_protocol_processes,
    refuse_unreplicated,
    why_not_replicated,
)


def model(name: str = "m", **settings: Any) -> ModelSettings:
    return ModelSettings(
        name=name, implementation="inferd.runtimes.sklearn.SKLearnModel", **settings
    )


def test_a_plain_cpu_model_is_replicated() -> None:
    assert why_not_replicated(model()) is None
    assert why_not_replicated(model(devices=["cpu"], threads_per_worker=4)) is None
    assert why_not_replicated(model(parameters={"extra": {"device": -1}})) is None
    assert why_not_replicated(model(parameters={"extra": {"device": "cpu"}})) is None
    assert why_not_replicated(model(max_batch_size=1)) is None  # 1: batching off


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"devices": ["cuda:0"]}, "GPU (devices: cuda:0)"),
        ({"parameters": {"extra": {"device": "cuda:1"}}}, "GPU (parameters.extra.device: cuda:1)"),
        ({"parameters": {"extra": {"device": 0}}}, "GPU (parameters.extra.device: 0)"),
        ({"sequence_batching": {}}, "sequence_batching"),
        ({"max_batch_size": 8}, "batches adaptively (max_batch_size: 8)"),
        ({"inference_timeout": 2.0}, "inference_timeout"),
        ({"parameters": {"environment_path": "/env"}}, "its own Python environment"),
        ({"parameters": {"environment_tarball": "env.tar.gz"}}, "its own Python environment"),
        ({"workers": 2}, "workers: 2"),
    ],
)
def test_what_keeps_a_model_to_one_copy(settings: dict[str, Any], reason: str) -> None:
    why = why_not_replicated(model(**settings))
    assert why is not None and reason in why


def test_every_replicable_model_keeps_the_count() -> None:
    assert effective_protocol_processes(4, [model("a"), model("b")]) == 4
    assert effective_protocol_processes(4, []) == 4
    assert effective_protocol_processes(1, [model(workers=2)]) == 1


def test_one_model_that_cannot_be_replicated_means_one_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "inferd.supervisor.placement"):
        count = effective_protocol_processes(4, [model("a"), model("gpu", devices=["cuda:0"])])
    assert count == 1
    assert "one protocol process instead of 4" in caplog.text
    assert "'gpu'" in caplog.text and "GPU" in caplog.text


def test_a_later_load_is_refused_with_a_400_that_says_what_to_do() -> None:
    refuse_unreplicated(model())  # nothing to refuse
    with pytest.raises(InvalidRequest) as refused:
        refuse_unreplicated(model("seq", sequence_batching={}))
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert "sequence_batching" in refused.value.message
    assert "protocol_processes: 1" in refused.value.message
