"""A protocol process's lines say which process wrote them (observability/logs.py)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from inferd.observability.logs import FORMAT, JSONFormatter, tag_process


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
