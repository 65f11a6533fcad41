"""A protocol process's lines say which process wrote them, and the server's events are
written once: by the process that speaks for the server (observability/logs.py)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from inferd.observability.logs import (
    FORMAT,
    SERVER_EVENT,
    JSONFormatter,
    now_ready,
    speak_for_server,
    tag_process,
)


@pytest.fixture
def root_handler() -> Iterator[logging.StreamHandler[io.StringIO]]:
    """The root logger's one handler, writing to a string, as configure_logging leaves it."""
    root = logging.getLogger()
    kept_handlers, kept_level = root.handlers[:], root.level
    handler = logging.StreamHandler(io.StringIO())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    yield handler
    root.handlers[:] = kept_handlers
    root.setLevel(kept_level)


def test_text_lines_carry_the_tag_before_the_logger(
    root_handler: logging.StreamHandler[io.StringIO],
) -> None:
    root_handler.setFormatter(logging.Formatter(FORMAT))
    tag_process("protocol process", 3)
    logging.getLogger("inferd.test").info("inferd is ready")
    line = root_handler.stream.getvalue()
    assert "INFO [protocol process 3] [inferd.test] inferd is ready" in line


def test_json_lines_carry_it_as_a_field(
    root_handler: logging.StreamHandler[io.StringIO],
) -> None:
    root_handler.setFormatter(JSONFormatter())
    tag_process("protocol process", 1)
    logging.getLogger("inferd.test").info("inferd is ready")
    entry = json.loads(root_handler.stream.getvalue())
    assert (entry["protocol_process"], entry["message"]) == (1, "inferd is ready")


def _lines(handler: logging.StreamHandler[io.StringIO]) -> list[str]:
    return handler.stream.getvalue().splitlines()


@pytest.mark.parametrize("speaks", [True, False])
def test_only_the_process_that_speaks_writes_the_servers_events_at_info(
    root_handler: logging.StreamHandler[io.StringIO], speaks: bool
) -> None:
    root_handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    speak_for_server(speaks)
    logging.getLogger("inferd.test").info("Loaded model 'x'", extra=SERVER_EVENT)
    logging.getLogger("inferd.test").info("its own line")
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    logging.getLogger("inferd.test").warning("Loading model 'y' failed", extra=SERVER_EVENT)
    told = ["INFO Loaded model 'x'"] if speaks else []
    assert _lines(root_handler) == [*told, "INFO its own line", "WARNING Loading model 'y' failed"]


def test_at_debug_every_process_writes_them_as_detail(
    root_handler: logging.StreamHandler[io.StringIO],
) -> None:
    root_handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    second = logging.StreamHandler(io.StringIO())
    second.setFormatter(root_handler.formatter)
    logging.getLogger().addHandler(second)
    logging.getLogger().setLevel(logging.DEBUG)
    speak_for_server(False)
    logging.getLogger("inferd.test").info("Loaded model 'x'", extra=SERVER_EVENT)
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    expected = ["DEBUG Loaded model 'x'", "DEBUG Started server process [1]"]
    assert _lines(root_handler) == expected
    assert _lines(second) == expected  # each handler writes it once, as detail


def test_a_restarted_speaker_speaks_once_it_is_ready(
    root_handler: logging.StreamHandler[io.StringIO],
) -> None:
    root_handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    speak_for_server(True, once_ready=True)
    logging.getLogger("inferd.test").info("Loading model 'x'", extra=SERVER_EVENT)
    logging.getLogger("inferd.test").info("inferd is ready", extra=SERVER_EVENT)
    now_ready()
    logging.getLogger("inferd.test").info("Unloading model 'x'", extra=SERVER_EVENT)
    assert _lines(root_handler) == ["INFO Unloading model 'x'"]
