"""Filling a @custom_handler method's arguments as FastAPI fills them for MLServer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from inferd.compat.handler_calls import call_handler
from inferd.custom_calls import (
    HandlerCall,
    handler_call,
    handler_request,
    read_handler_response,
)
from inferd.errors import InvalidRequest

fastapi = pytest.importorskip("fastapi")


class Point(BaseModel):
    x: int
    y: int


class Handlers:
    async def body_list(self, payload: list = fastapi.Body(...)) -> int:  # noqa: B008
        return sum(payload)

    async def body_scalar(self, length: int = fastapi.Body(...)) -> dict[str, str]:
        return {"foo": "a" * length}

    async def model(self, point: Point) -> Point:
        return Point(x=point.y, y=point.x)

    async def query_and_header(
        self, n: int, flag: bool = False, content_type: str = fastapi.Header(default="")
    ) -> dict[str, Any]:
        return {"n": n, "flag": flag, "content_type": content_type}

    async def starlette_response(self) -> Any:
        from starlette.responses import Response

        return Response(content="plain", media_type="text/plain", status_code=201)


def run(method: Any, body: bytes = b"", query: str = "", **headers: str) -> tuple[int, str, Any]:
    call = HandlerCall(method.__name__, body, query, headers)
    status, media_type, content = read_handler_response(asyncio.run(call_handler(method, call)))
    return status, media_type, content


def test_body_parameters_get_the_json_body() -> None:
    handlers = Handlers()
    assert run(handlers.body_list, b"[1, 2, 3]") == (200, "application/json", b"6")
    _, _, content = run(handlers.body_scalar, b"3")
    assert json.loads(content) == {"foo": "aaa"}


def test_a_pydantic_parameter_is_validated_and_a_pydantic_answer_dumped() -> None:
    _, _, content = run(Handlers().model, b'{"x": 1, "y": 2}')
    assert json.loads(content) == {"x": 2, "y": 1}


def test_query_parameters_and_headers() -> None:
    handlers = Handlers()
    _, _, content = run(handlers.query_and_header, query="n=4&flag=true", **{"content-type": "a/b"})
    assert json.loads(content) == {"n": 4, "flag": True, "content_type": "a/b"}
    with pytest.raises(InvalidRequest, match="Missing query parameter 'n'"):
        run(handlers.query_and_header)
    with pytest.raises(InvalidRequest, match="is not int"):
        run(handlers.query_and_header, query="n=x")


def test_a_starlette_response_keeps_its_status_and_media_type() -> None:
    assert run(Handlers().starlette_response) == (201, "text/plain", b"plain")


def test_a_handler_call_travels_as_an_unbatchable_request() -> None:
    call = HandlerCall("echo", b"{}", "a=1", {"x-tag": "t"})
    request = handler_request(call)
    assert request.inputs[0].data.shape == ()  # scalar: batching leaves it alone
    assert handler_call(request) == call
