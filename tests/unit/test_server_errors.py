"""The one error mapper per protocol (server/errors.py)."""

from __future__ import annotations

import logging

import grpc
import orjson
import pytest
from starlette.requests import ClientDisconnect

from inferd.errors import ErrorCode, InferdError, ModelNotFound, Overloaded
from inferd.server.errors import (
    GRPC_MESSAGE_BYTES,
    GRPC_STATUS_BY_ERROR_CODE,
    HTTP_STATUS_BY_ERROR_CODE,
    grpc_error,
    http_error,
)


def test_every_error_code_has_an_http_status_and_a_grpc_code() -> None:
    assert set(HTTP_STATUS_BY_ERROR_CODE) == set(ErrorCode) == set(GRPC_STATUS_BY_ERROR_CODE)


def test_a_core_error_keeps_its_message_on_both_protocols() -> None:
    error = ModelNotFound("m", "2")
    assert http_error(error, "x") == (
        404,
        b'{"error":"Request for unknown model: \'m\' version 2 is not found"}',
        [(b"content-type", b"application/json")],
    )
    assert grpc_error(error, "x") == (grpc.StatusCode.NOT_FOUND, error.message, ())


@pytest.mark.parametrize(
    ("seconds", "header", "pushback"), [(1.0, b"1", "1000"), (0.2, b"1", "200")]
)
def test_retry_after_becomes_a_header_and_retry_pushback(
    seconds: float, header: bytes, pushback: str
) -> None:
    error = Overloaded("busy", retry_after=seconds)
    status, _, headers = http_error(error, "x")
    assert (status, headers[-1]) == (503, (b"retry-after", header))
    assert grpc_error(error, "x")[2] == (("grpc-retry-pushback-ms", pushback),)


def test_retry_after_is_a_field_of_every_inferd_error() -> None:
    assert InferdError("x").retry_after is None
    assert InferdError("x", retry_after=2.0).retry_after == 2.0
    assert Overloaded("x").retry_after == 1.0


@pytest.mark.parametrize("gone", [ConnectionAbortedError("left"), ClientDisconnect()])
def test_a_client_that_left_is_499(gone: Exception) -> None:
    status, body, _ = http_error(gone, "x")
    assert (status, orjson.loads(body)) == (499, {"error": "The client disconnected"})


def test_unexpected_errors_are_logged_and_told_apart_from_core_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    try:
        raise KeyError("secret detail")
    except KeyError as error:
        with caplog.at_level(logging.ERROR, "inferd.server.errors"):
            status, body, _ = http_error(error, "POST /v2/x")
            code, message, _ = grpc_error(error, "gRPC ModelInfer")
    internal = "Internal server error; see the server logs"
    assert (status, orjson.loads(body)) == (500, {"error": internal})
    assert (code, message) == (grpc.StatusCode.INTERNAL, internal)
    logged = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert logged == [
        ("Unexpected error serving POST /v2/x", True),
        ("Unexpected error serving gRPC ModelInfer", True),
    ]


def test_a_grpc_message_is_cut_to_fit_the_trailer_and_says_so() -> None:
    short = InferdError("short")
    assert grpc_error(short, "x")[1] == "short"
    long = InferdError("é" * 5000)  # two bytes each in UTF-8
    _, message, _ = grpc_error(long, "x")
    assert len(message.encode()) <= GRPC_MESSAGE_BYTES
    assert message.startswith("éé") and message.endswith("(cut; the message has 5000 characters)")
    # REST bodies carry it whole.
    assert len(orjson.loads(http_error(long, "x")[1])["error"]) == 5000
