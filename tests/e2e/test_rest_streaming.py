"""Server-sent events on a real streaming_server, in process and through 2 worker processes.

The streaming models are Tokens (async generator) and ThreadTokens (plain
generator): each yields ``count`` responses ``delay_ms`` apart and touches
``stopped-<request id>`` in its folder when its generator ends.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess

MODELS = ("tokens", "thread-tokens")


def body(request_id: str, **parameters: Any) -> dict[str, Any]:
    return {
        "id": request_id,
        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}],
        "parameters": parameters,
    }


def events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any], float]]:
    """(event type, its JSON data, when it arrived) for each event of the stream."""
    kind = "message"
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield kind, json.loads(line.removeprefix("data: ")), time.monotonic()
            kind = "message"


def index(data: dict[str, Any]) -> int:
    (output,) = [o for o in data["outputs"] if o["name"] == "index"]
    return int(output["data"][0])


@pytest.mark.parametrize("model", MODELS)
def test_events_arrive_as_the_model_yields_them(
    streaming_server: ServerProcess, model: str
) -> None:
    url = f"{streaming_server.url}/v2/models/{model}/infer_stream"
    with httpx.stream("POST", url, json=body("spaced", count=4, delay_ms=150), timeout=30) as sse:
        assert sse.status_code == 200
        assert sse.headers["content-type"].startswith("text/event-stream")
        got = list(events(sse))
    assert [index(data) for _, data, _ in got] == [0, 1, 2, 3]
    assert all(kind == "message" and data["id"] == "spaced" for kind, data, _ in got)
    gaps = [later - earlier for (_, _, earlier), (_, _, later) in itertools.pairwise(got)]
    assert min(gaps) > 0.08, f"events came together, not as yielded: {gaps}"


@pytest.mark.parametrize("model", MODELS)
def test_a_client_that_leaves_stops_the_generator_and_the_model_serves_on(
    streaming_server: ServerProcess, streaming_repository: Path, model: str
) -> None:
    url = f"{streaming_server.url}/v2/models/{model}/infer_stream"
    request_id = f"leaves-{model}"
    with httpx.stream(
        "POST", url, json=body(request_id, count=1000, delay_ms=20), timeout=30
    ) as sse:
        received = events(sse)
        assert [index(next(received)[1]) for _ in range(2)] == [0, 1]
    # Closing the response closed the connection: the generator's finally runs.
    stopped = streaming_repository / model / f"stopped-{request_id}"
    wait_for(stopped.exists, "the generator's cleanup after the client left", timeout=10)
    with httpx.stream("POST", url, json=body("after", count=2), timeout=30) as sse:
        assert [index(data) for _, data, _ in events(sse)] == [0, 1]


def test_an_error_after_three_responses_is_a_last_error_event(
    streaming_server: ServerProcess,
) -> None:
    url = f"{streaming_server.url}/v2/models/tokens/infer_stream"
    with httpx.stream("POST", url, json=body("breaks", count=5, fail_at=3), timeout=30) as sse:
        assert sse.status_code == 200
        got = list(events(sse))
    assert [kind for kind, _, _ in got] == ["message"] * 3 + ["error"]
    assert "the stream broke at 3" in got[-1][1]["error"]


def test_a_streaming_only_model_on_infer_is_a_400_naming_the_stream_endpoints(
    streaming_server: ServerProcess,
) -> None:
    answer = httpx.post(
        f"{streaming_server.url}/v2/models/tokens/infer", json=body("unary"), timeout=30
    )
    assert answer.status_code == 400
    assert "infer_stream" in answer.json()["error"]


def test_generate_stream_takes_a_flat_body(streaming_server: ServerProcess) -> None:
    url = f"{streaming_server.url}/v2/models/tokens/generate_stream"
    flat = {"x": 1.0, "count": 3, "id": "flat"}
    with httpx.stream("POST", url, json=flat, timeout=30) as sse:
        got = [data for _, data, _ in events(sse)]
    assert [event["text_output"] for event in got] == ["tok0", "tok1", "tok2"]
    assert [event["index"] for event in got] == [0, 1, 2]
    assert {event["model_name"] for event in got} == {"tokens"}


def test_generate_stream_takes_a_v2_request_and_answers_v2_events(
    streaming_server: ServerProcess,
) -> None:
    # MLServer's generate_stream is its infer_stream: its clients send V2 requests.
    url = f"{streaming_server.url}/v2/models/tokens/generate_stream"
    with httpx.stream("POST", url, json=body("v2", count=3), timeout=30) as sse:
        assert sse.status_code == 200, sse.read()
        got = list(events(sse))
    assert [kind for kind, _, _ in got] == ["message"] * 3
    assert [index(data) for _, data, _ in got] == [0, 1, 2]
    for _, data, _ in got:
        assert (data["model_name"], data["id"]) == ("tokens", "v2")
    texts = [o for _, data, _ in got for o in data["outputs"] if o["name"] == "text_output"]
    assert [(o["datatype"], o["shape"], o["data"]) for o in texts] == [
        ("BYTES", [1], [f"tok{i}"]) for i in range(3)
    ]


def test_generate_takes_a_v2_request_and_answers_as_infer(streaming_server: ServerProcess) -> None:
    v2 = {"id": "g", "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
    generate = httpx.post(f"{streaming_server.url}/v2/models/double/generate", json=v2, timeout=30)
    infer = httpx.post(f"{streaming_server.url}/v2/models/double/infer", json=v2, timeout=30)
    assert generate.status_code == 200, generate.text
    assert generate.headers["content-type"] == infer.headers["content-type"]
    answer = generate.json()
    assert answer["id"] == "g" and answer["model_name"] == "double"
    (y,) = [o for o in answer["outputs"] if o["name"] == "y"]
    assert (y["datatype"], y["shape"], y["data"]) == ("FP32", [2], [2.0, 4.0])
    flat = httpx.post(
        f"{streaming_server.url}/v2/models/double/generate", json={"x": [1.0, 2.0]}, timeout=30
    )
    assert flat.status_code == 200 and flat.json()["y"] == [2.0, 4.0]
