"""Which models each protocol process may hold a copy of (supervisor/placement.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from inferd.serving.placement import passed_through
from inferd.settings import ModelSettings, ServerSettings
from inferd.supervisor.placement import (
    copied,
    needs_model_host,
    serving_layout,
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


def test_copied_models_need_no_host() -> None:
    assert copied(model()) and not copied(model(workers=2))
    assert not needs_model_host([model("a"), model("b")])
    assert not needs_model_host([])


def test_a_model_that_cannot_be_copied_needs_the_host_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, "inferd.supervisor.placement"):
        assert needs_model_host([model("a"), model("gpu", devices=["cuda:0"])])
    assert "Model 'gpu' runs in the model host" in caplog.text and "GPU" in caplog.text
    assert "'a'" not in caplog.text


def test_a_hosted_model_passes_through_a_protocol_process_unbatched() -> None:
    hosted = model(max_batch_size=8, max_batch_time=0.01, sequence_batching={})
    local = passed_through(hosted)
    assert (local.max_batch_size, local.sequence_batching) == (1, None)
    assert (hosted.max_batch_size, local.name) == (8, hosted.name)  # the original is kept


def test_the_layout_runs_the_host_when_a_start_up_model_needs_it() -> None:
    settings = ServerSettings(protocol_processes=4)
    assert serving_layout(settings, [model("a")]) == (4, False)
    assert serving_layout(settings, [model("a"), model("b", max_batch_size=8)]) == (4, True)
    assert serving_layout(ServerSettings(protocol_processes=1), [model(workers=2)]) == (1, False)


def left_to_the_default(cpus: int) -> ServerSettings:
    """Settings whose protocol_processes came from ``cpus`` CPUs, not from the user."""
    settings = ServerSettings(protocol_processes=cpus)
    settings.model_fields_set.discard("protocol_processes")
    return settings


def test_two_cpus_left_to_the_default_serve_a_hosted_model_from_one_process() -> None:
    batched = [model("b", max_batch_size=8)]
    assert serving_layout(left_to_the_default(2), batched) == (1, False)
    assert serving_layout(left_to_the_default(2), [model("a")]) == (2, False)
    asked = ServerSettings(protocol_processes=2)  # said so: both, the host too
    assert serving_layout(asked, batched) == (2, True)
    assert serving_layout(left_to_the_default(3), batched) == (3, True)
