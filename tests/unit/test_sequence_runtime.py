"""What a runtime sees of sequence batching: the settings block, and its
``sequence_end`` hook called through the in-process pool."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from inferd.dispatch.sequences import EndSequence
from inferd.errors import ConfigurationError
from inferd.model import Model
from inferd.settings.loader import model_settings_from_dict
from inferd.workers.inprocess import IN_PROCESS, InProcessPool

pytestmark = pytest.mark.anyio

ENDED: list[Any] = []


class Stateful(Model):
    def sequence_end(self, sequence_id: int | str) -> None:
        if sequence_id == "bad":
            raise RuntimeError("cannot drop it")
        ENDED.append(sequence_id)


class AsyncEnd(Model):
    async def unload(self) -> None:
        ENDED.append("unloaded")

    async def sequence_end(self, sequence_id: int | str) -> None:  # type: ignore[override]
        ENDED.append(sequence_id)


class Stateless(Model):
    """No sequence_end: nothing to call."""


def settings(folder: Path, runtime: type[Model], **more: Any) -> Any:
    body = {"name": "acc", "implementation": f"{__name__}.{runtime.__name__}", **more}
    return model_settings_from_dict(body, folder / "model-settings.json")


def test_the_settings_block_defaults_as_triton(tmp_path: Path) -> None:
    assert settings(tmp_path, Stateful).sequence_batching is None
    block = settings(tmp_path, Stateful, sequence_batching={}).sequence_batching
    assert block.max_sequence_idle_microseconds == 1_000_000 and block.idle_timeout == 1.0
    zero = {"max_sequence_idle_microseconds": 0}  # Triton: 0 is the default
    assert (
        settings(tmp_path, Stateful, sequence_batching=zero).sequence_batching.idle_timeout == 1.0
    )
    short = {"max_sequence_idle_microseconds": 250_000}
    assert (
        settings(tmp_path, Stateful, sequence_batching=short).sequence_batching.idle_timeout == 0.25
    )


def test_unknown_keys_in_the_block_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="sequence_batching"):
        settings(tmp_path, Stateful, sequence_batching={"max_idle": 5})
    with pytest.raises(ConfigurationError, match="control_input"):  # not supported
        settings(tmp_path, Stateful, sequence_batching={"control_input": []})


def test_tritons_strategy_blocks_are_accepted(tmp_path: Path) -> None:
    block = {"direct": {"max_queue_delay_microseconds": 100}}
    loaded = settings(tmp_path, Stateful, sequence_batching=block).sequence_batching
    assert loaded.model_dump(exclude_none=True) == {
        "max_sequence_idle_microseconds": 1_000_000,
        "direct": {"max_queue_delay_microseconds": 100},
    }


async def test_the_pool_calls_sequence_end_and_logs_what_it_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ENDED.clear()
    pool = InProcessPool()
    await pool.load(1, settings(tmp_path, Stateful, sequence_batching={}))
    assert pool.holders(1) == [IN_PROCESS] and pool.holders(2) == []
    pool.control(EndSequence(1, IN_PROCESS, 7))
    with caplog.at_level(logging.ERROR):
        pool.control(EndSequence(1, IN_PROCESS, "bad"))
    pool.control(EndSequence(2, IN_PROCESS, 8))  # not loaded: nothing to drop
    assert ENDED == [7]
    assert "sequence_end('bad') raised" in caplog.text
    await pool.close()


async def test_a_runtime_without_the_hook_is_left_alone(tmp_path: Path) -> None:
    pool = InProcessPool()
    await pool.load(1, settings(tmp_path, Stateless, sequence_batching={}))
    pool.control(EndSequence(1, IN_PROCESS, 7))
    await pool.close()


async def test_an_async_sequence_end_is_refused_at_load(tmp_path: Path) -> None:
    pool = InProcessPool()
    ENDED.clear()
    with pytest.raises(ConfigurationError, match="sequence_end must be a plain def"):
        await pool.load(1, settings(tmp_path, AsyncEnd, sequence_batching={}))
    assert ENDED == ["unloaded"], "what its load took is released"
