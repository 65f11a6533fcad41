"""Triton's generate extension on a decoupled model (one that only streams).

``/generate`` answers a model that sends exactly one response; more or none is a
clear 400. On ``/generate_stream`` the model's failure before its first response
is an error event after a 200, as later failures are (Triton's behaviour); a
request refused before the model runs stays an ordinary error answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("generate")
    prompt = [{"name": "PROMPT", "datatype": "BYTES", "shape": [1]}]
    add_custom_model(repository, "mock_llm", "Tokens", inputs=prompt)
    with start_server(repository) as process:
        yield process


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    found, kind = [], "message"
    for line in text.splitlines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            found.append((kind, json.loads(line.removeprefix("data: "))))
            kind = "message"
    return found


def test_generate_answers_a_decoupled_model_that_sends_one_response(llm: ServerProcess) -> None:
    body = {"PROMPT": "hello world", "STREAM": False, "count": 1}
    with httpx.Client(base_url=llm.url, timeout=30) as rest:
        response = rest.post("/v2/models/mock_llm/generate", json=body)
    assert response.status_code == 200, response.text
    assert response.json() == {"model_name": "mock_llm", "index": 0, "text_output": "tok0"}


def test_generate_from_an_async_client(llm: ServerProcess) -> None:
    async def run() -> httpx.Response:
        async with httpx.AsyncClient(base_url=llm.url, timeout=30) as rest:
            return await rest.post("/v2/models/mock_llm/generate", json={"PROMPT": "a", "count": 1})

    assert asyncio.run(run()).json()["text_output"] == "tok0"


@pytest.mark.parametrize(("count", "fragment"), [(3, "more than one response"), (0, "no response")])
def test_more_or_no_responses_are_a_clear_400(
    llm: ServerProcess, count: int, fragment: str
) -> None:
    with httpx.Client(base_url=llm.url, timeout=30) as rest:
        response = rest.post("/v2/models/mock_llm/generate", json={"PROMPT": "a", "count": count})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith("generate expects model to produce exactly 1 response: ")  # Triton's
    assert fragment in error and "/v2/models/mock_llm/generate_stream" in error


def test_a_model_failure_before_the_first_event_is_an_error_event(llm: ServerProcess) -> None:
    body = {"PROMPT": "a", "count": 2, "fail_at": 0}
    with httpx.Client(base_url=llm.url, timeout=30) as rest:
        streamed = rest.post("/v2/models/mock_llm/generate_stream", json=body)
        later = rest.post("/v2/models/mock_llm/generate_stream", json=body | {"fail_at": 1})
        once = rest.post("/v2/models/mock_llm/generate", json=body)
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    ((kind, data),) = events(streamed.text)
    assert kind == "error" and "the stream broke at 0" in data["error"]
    assert [kind for kind, _ in events(later.text)] == ["message", "error"]
    assert once.status_code == 500 and "the stream broke at 0" in once.json()["error"]


def test_a_request_refused_before_the_model_runs_is_an_ordinary_answer(llm: ServerProcess) -> None:
    with httpx.Client(base_url=llm.url, timeout=30) as rest:
        body = {"PROMPT": "a", "count": 1, "parameters": 5}
        response = rest.post("/v2/models/mock_llm/generate_stream", json=body)
    assert response.status_code == 400
    assert '"parameters" must be an object' in response.json()["error"]


def test_an_input_given_twice_is_refused_in_tritons_words(llm: ServerProcess) -> None:
    body = b'{"PROMPT": "a", "count": 1, "PROMPT": "b"}'
    with httpx.Client(base_url=llm.url, timeout=30) as rest:
        for route in ("generate", "generate_stream"):
            response = rest.post(f"/v2/models/mock_llm/{route}", content=body)
            assert response.status_code == 400
            assert "input 'PROMPT' already exists in request" in response.json()["error"]
