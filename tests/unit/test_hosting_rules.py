"""Which models each protocol process may hold a copy of (host/placement.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import ConfigurationError
from inferd.host.placement import (
    PLACEMENT_ENV,
    Placement,
    queue_share,
    serving_layout,
    why_not_replicated,
)
from inferd.server.roles import HostStart, Role
from inferd.settings import ModelSettings, ServerSettings
from inferd.supervisor.child import protocol_server
from inferd.supervisor.paths import PrivatePaths, ProcessRole

# Settings as a settings.json that sets neither parallel_workers nor the cache.
DEFAULTS = ServerSettings(protocol_processes=4)


def model(name: str = "m", **settings: Any) -> ModelSettings:
    return ModelSettings(
        name=name, implementation="inferd.runtimes.sklearn.SKLearnModel", **settings
    )


def test_a_plain_cpu_model_is_replicated() -> None:
    assert why_not_replicated(model(), DEFAULTS) is None
    assert why_not_replicated(model(devices=["cpu"], threads_per_worker=4), DEFAULTS) is None
    assert why_not_replicated(model(parameters={"extra": {"device": -1}}), DEFAULTS) is None
    assert why_not_replicated(model(parameters={"extra": {"device": "cpu"}}), DEFAULTS) is None
    assert why_not_replicated(model(max_batch_size=1), DEFAULTS) is None  # 1: batching off
    assert why_not_replicated(model(max_queue_size=0), DEFAULTS) is None  # 0: no bound
    # The cache is on only when the server turns it on too.
    assert why_not_replicated(model(cache_enabled=True), DEFAULTS) is None
    assert why_not_replicated(model(), ServerSettings(cache_enabled=True)) is None


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
        ({"max_queue_size": 64}, "max_queue_size: 64"),
    ],
)
def test_what_keeps_a_model_to_one_copy(settings: dict[str, Any], reason: str) -> None:
    why = why_not_replicated(model(**settings), DEFAULTS)
    assert why is not None and reason in why


@pytest.mark.parametrize(
    ("implementation", "extra", "hosted"),
    [
        ("inferd.runtimes.huggingface.HuggingFaceModel", {"task": "text-generation"}, True),
        ("mlserver_huggingface.HuggingFaceRuntime", {"task": "text-generation"}, True),
        (
            "inferd.runtimes.huggingface.HuggingFaceModel",
            {"task": "text-generation", "continuous_batching": False},
            False,
        ),
        (
            "inferd.runtimes.huggingface.HuggingFaceModel",
            {"task": "text-generation", "openai": False},
            False,
        ),
        ("inferd.runtimes.huggingface.HuggingFaceModel", {"task": "feature-extraction"}, False),
    ],
)
def test_a_continuously_batching_generator_runs_once(
    implementation: str, extra: dict[str, Any], hosted: bool
) -> None:
    settings = ModelSettings(name="lm", implementation=implementation, parameters={"extra": extra})
    why = why_not_replicated(settings, DEFAULTS)
    assert (why is not None) == hosted
    assert why is None or "its concurrent streams must meet in one engine" in why


def test_a_vllm_model_runs_once_in_the_host() -> None:
    settings = ModelSettings(name="llm", implementation="inferd.runtimes.vllm.VLLMModel")
    why = why_not_replicated(settings, DEFAULTS)
    assert why is not None and "one engine per server" in why


def test_a_cached_model_runs_once_for_one_cache() -> None:
    cached = ServerSettings(cache_enabled=True)
    why = why_not_replicated(model(cache_enabled=True), cached)
    assert why is not None and "cache_enabled" in why


@pytest.mark.parametrize("workers", [1, 2])
def test_parallel_workers_the_user_set_runs_every_model_in_workers(workers: int) -> None:
    asked = ServerSettings(parallel_workers=workers)
    why = why_not_replicated(model(), asked)
    assert why is not None and f"parallel_workers: {workers}" in why
    # Left to its default (1), or set to 0, the model is copied as before.
    assert (
        why_not_replicated(model(), ServerSettings()) is None
        and ServerSettings().parallel_workers == 1
    )
    assert why_not_replicated(model(), ServerSettings(parallel_workers=0)) is None


def test_parallel_workers_from_the_environment_counts_as_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERD_PARALLEL_WORKERS", "2")
    assert why_not_replicated(model(), ServerSettings()) is not None


def test_copied_models_need_no_host() -> None:
    assert (
        why_not_replicated(model(), DEFAULTS) is None
        and why_not_replicated(model(workers=2), DEFAULTS) is not None
    )
    placement = Placement.decide(DEFAULTS, [model("a"), model("b", parameters={"version": "2"})])
    assert not placement.hosted
    assert placement.copied == {("a", None), ("b", "2")}
    assert not Placement.decide(DEFAULTS, []).hosted


def test_a_model_that_cannot_be_copied_needs_the_host_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, "inferd.host.placement"):
        placement = Placement.decide(DEFAULTS, [model("a"), model("gpu", devices=["cuda:0"])])
    assert placement.hosted == {("gpu", None)} and placement.copied == {("a", None)}
    assert "Model 'gpu' runs in the model host" in caplog.text and "GPU" in caplog.text
    assert "Model 'a' is copied into every protocol process" in caplog.text


def test_the_layout_runs_the_host_when_a_start_up_model_needs_it() -> None:
    settings = ServerSettings(protocol_processes=4)
    assert serving_layout(settings, [model("a")])[:2] == (4, False)
    assert serving_layout(settings, [model("a"), model("b", max_batch_size=8)])[:2] == (4, True)
    one = ServerSettings(protocol_processes=1)
    assert serving_layout(one, [model(workers=2)]) == (1, False, Placement())  # none decided


def left_to_the_default(cpus: int) -> ServerSettings:
    """Settings whose protocol_processes came from ``cpus`` CPUs, not from the user."""
    settings = ServerSettings(protocol_processes=cpus)
    settings.model_fields_set.discard("protocol_processes")
    return settings


def test_two_cpus_left_to_the_default_serve_a_hosted_model_from_one_process() -> None:
    batched = [model("b", max_batch_size=8)]
    assert serving_layout(left_to_the_default(2), batched)[:2] == (1, False)
    assert serving_layout(left_to_the_default(2), [model("a")])[:2] == (2, False)
    asked = ServerSettings(protocol_processes=2)  # said so: both, the host too
    assert serving_layout(asked, batched)[:2] == (2, True)
    assert serving_layout(left_to_the_default(3), batched)[:2] == (3, True)


def test_each_process_queues_its_share_of_the_servers_bound() -> None:
    assert [queue_share(64, n) for n in (1, 2, 3, 16)] == [64, 32, 21, 4]
    assert queue_share(0, 3) == 0  # no bound stays none
    assert queue_share(2, 3) == 1  # at least one each


def test_a_protocol_process_queues_its_share(tmp_path: Path) -> None:
    settings = ServerSettings(
        model_repository_root=str(tmp_path), protocol_processes=3, max_queue_size=64
    )
    role = ProcessRole(PrivatePaths(tmp_path), 0, Role.PROTOCOL, HostStart.FOR_A_LOAD)
    server = protocol_server(settings, role, Placement())
    assert server.role is not None and server.role.queue_bound == 21
    # Its settings stay the server's (Triton's model configuration reports the bound).
    assert server.settings.max_queue_size == 64 and server.settings.parallel_workers == 0


def test_parallel_workers_set_on_two_cpus_serves_one_process_with_workers() -> None:
    asked = left_to_the_default(2)
    asked.parallel_workers = 2
    asked.model_fields_set.add("parallel_workers")
    assert serving_layout(asked, [model("a")])[:2] == (1, False)
    many = ServerSettings(protocol_processes=4, parallel_workers=2)
    assert serving_layout(many, [model("a")])[:2] == (4, True)


def test_the_placement_decided_at_start_reaches_each_process_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """inferd start decides it once and exports it; each process reads that, not the
    rules: a model the rules would copy is hosted if the placement says so."""
    monkeypatch.setenv(PLACEMENT_ENV, "")  # undone after the test, what export() sets too
    with pytest.raises(ConfigurationError, match=PLACEMENT_ENV):
        Placement.from_environment()
    decided = Placement.decide(
        DEFAULTS, [model("a"), model("b", max_batch_size=8, parameters={"version": "1"})]
    )
    decided.export()
    read = Placement.from_environment()
    assert read == decided
    assert read.copies(model("a")) and not read.hosts(model("a"))
    assert read.hosts(model("b", max_batch_size=8, parameters={"version": "1"}))
    # Hosted at start, whatever its settings say now.
    assert not read.copies(model("b", parameters={"version": "1"}))
    assert not read.copies(model("c")) and not read.hosts(model("c"))  # not there at start
    assert read.copied_names() == {"a"}
