"""The OpenAI-compatible endpoints over raw HTTP and in server layouts: malformed
bodies, a client that leaves mid-stream, the queue's 429, API keys as Bearer tokens,
and three protocol processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.frameworks import require_module
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .openai_models import (
    ALL_MODELS,
    ASYNC_WORDS,
    CHAT_LM,
    ENCODER,
    SHOUTING,
    WORDS,
    write_repository,
)

openai = require_module("openai", "test")
require_module("transformers", "huggingface")

LONG_PROMPT = " ".join(["word"] * 200)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Words: 0.1 s a word, a queue of one request, and workers of its own (so that
    # with several protocol processes it runs in the model host).
    return write_repository(
        tmp_path_factory.mktemp("openai-http"), words_delay=0.1, max_queue_size=1, workers=1
    )


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    # One worker process, as parallel_workers' default (the client tests run in process).
    settings = {"protocol_processes": 1, "parallel_workers": 1}
    with start_server(repository, settings) as process:
        yield process


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def openai_error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return dict(error)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", b"{", None),
        ("/v1/chat/completions", b"", None),
        ("/v1/chat/completions", b"[1, 2]", None),
        ("/v1/chat/completions", b'{"model": "words"}', "messages"),
        ("/v1/chat/completions", b'{"model": "words", "messages": "hi"}', "messages"),
        ("/v1/chat/completions", b'{"model": "words", "messages": []}', "messages"),
        ("/v1/chat/completions", b'{"model": 7, "messages": [{"role": "user"}]}', "model"),
        ("/v1/completions", b'{"model": "words", "prompt": {"a": 1}}', "prompt"),
        ("/v1/completions", b'{"model": "words", "prompt": "x", "n": -1}', "n"),
        # Past 64 bits: no longer a 500 from packing the call.
        ("/v1/completions", b'{"model": "words", "prompt": "x", "max_tokens": 1e30}', "max_tokens"),
        (
            "/v1/completions",
            b'{"model": "words", "prompt": "x", "max_tokens": 10' + b"0" * 30 + b"}",
            "max_tokens",
        ),
        (
            "/v1/completions",
            b'{"model": "words", "prompt": "x", "seed": 10' + b"0" * 30 + b"}",
            "seed",
        ),
        ("/v1/completions", b'{"model": "words", "prompt": "x", "stream": "yes"}', "stream"),
        ("/v1/embeddings", b'{"model": "words", "input": [1, 2]}', "input"),
        ("/v1/embeddings", b'{"model": "words", "input": "x", "encoding_format": "hex"}', None),
        ("/v1/completions", '{"model": "w\u00e9", "prompt": 1}'.encode("latin-1"), None),
    ],
)
def test_malformed_bodies_are_a_400_in_openai_shape(
    http: httpx.Client, path: str, body: bytes, param: str | None
) -> None:
    error = openai_error(http.post(path, content=body), 400)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param


def test_unknown_model_is_a_404(http: httpx.Client) -> None:
    body = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
    error = openai_error(http.post("/v1/chat/completions", json=body), 404)
    assert error["code"] == "model_not_found"


def test_a_stream_is_server_sent_events_ending_with_done(http: httpx.Client) -> None:
    body = {"model": WORDS, "prompt": "a b c", "stream": True}
    arrived = []
    with http.stream("POST", "/v1/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = []
        for line in response.iter_lines():
            if line:
                lines.append(line)
                arrived.append(time.monotonic())
    # A word each 0.1 s: each chunk was sent as its word was made, not all at the end.
    assert arrived[2] - arrived[0] > 0.15
    assert lines[-1] == "data: [DONE]"
    chunks = [orjson.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert [c["choices"][0]["text"] for c in chunks] == ["a", " b", " c", ""]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_client_that_leaves_mid_stream_stops_the_generation(
    http: httpx.Client, repository: Path
) -> None:
    marker = repository / "closed"
    marker.unlink(missing_ok=True)
    body = {"model": WORDS, "prompt": LONG_PROMPT, "max_tokens": 1000, "stream": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line).startswith("data: ")
    # 200 words at 0.1 s would take 20 s: the generator's finally ran long before.
    wait_for(marker.exists, timeout=10, what="the generation to stop")
    answer = http.post("/v1/completions", json={"model": WORDS, "prompt": "next"})
    assert answer.json()["choices"][0]["text"] == "next"


def test_a_full_queue_is_a_429_with_retry_after(server: ServerProcess) -> None:
    """One slot, a queue of one: a stream holds the slot, one request waits, the next
    is refused."""
    statuses: list[httpx.Response] = []

    def ask() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            statuses.append(client.post("/v1/completions", json={"model": WORDS, "prompt": "x"}))

    with httpx.Client(base_url=server.url, timeout=60) as client:
        body = {"model": WORDS, "prompt": LONG_PROMPT, "max_tokens": 1000, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()  # kept: a dropped iterator closes the response
            next(line for line in lines if line)  # it holds the slot now
            waiters = [threading.Thread(target=ask) for _ in range(2)]
            for waiter in waiters:
                waiter.start()
            wait_for(lambda: len(statuses) >= 1, timeout=20, what="one refusal")
            refused = statuses[0]
            error = openai_error(refused, 429)
            assert error["code"] == "rate_limit_exceeded"
            assert int(refused.headers["retry-after"]) >= 1
        for waiter in waiters:  # the stream closed: the waiting one runs
            waiter.join(30)
    assert sorted(r.status_code for r in statuses) == [200, 429]
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as client:
        assert client.completions.create(model=WORDS, prompt="ok").choices[0].text == "ok"


def test_the_sdk_sees_a_full_queue_as_a_rate_limit_and_leaves_a_stream(
    server: ServerProcess, repository: Path
) -> None:
    """openai.RateLimitError for the 429; closing the SDK's stream stops the model."""
    marker = repository / "closed"
    marker.unlink(missing_ok=True)
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as client:
        stream = client.completions.create(
            model=WORDS, prompt=LONG_PROMPT, max_tokens=1000, stream=True
        )
        assert next(iter(stream)).choices[0].text == "word"  # it holds the slot now
        waiter = threading.Thread(target=lambda: client.completions.create(model=WORDS, prompt="x"))
        waiter.start()  # the one place in the queue
        wait_for(lambda: queued(server) >= 1, timeout=20, what="a request in the queue")
        with pytest.raises(openai.RateLimitError) as refused:
            client.completions.create(model=WORDS, prompt="x")
        assert refused.value.code == "rate_limit_exceeded"
        assert int(refused.value.response.headers["retry-after"]) >= 1
        stream.close()
        wait_for(marker.exists, timeout=10, what="the generation to stop")
        waiter.join(30)


def queued(server: ServerProcess) -> float:
    """Requests of Words waiting in its queue, from /metrics."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    for line in text.splitlines():
        if line.startswith("batch_request_queue{") and f'model_name="{WORDS}"' in line:
            return float(line.rpartition(" ")[2])
    return 0.0


def test_a_runtimes_field_error_keeps_its_param_across_processes(server: ServerProcess) -> None:
    """The chat LM runs in a worker process here: the field it names comes back."""
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as client:
        assert_limit_is_named(client)


def assert_limit_is_named(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=CHAT_LM,
            messages=[{"role": "user", "content": "hi"}],
            max_completion_tokens=100_000,
            stream=True,
        )
    assert (refused.value.param, refused.value.code) == ("max_completion_tokens", "invalid_value")
    with pytest.raises(openai.BadRequestError) as long:
        client.completions.create(model=CHAT_LM, prompt=LONG_PROMPT, max_tokens=100)
    assert (long.value.param, long.value.code) == ("prompt", "context_length_exceeded")


def test_keys_as_bearer_tokens(tmp_path: Path, repository: Path) -> None:
    restricted = {
        "apis": ["inference", "metadata"],
        "header": "x-api-key",
        "values_from_env": "KEYS",
    }
    settings = {"restricted_apis": [restricted], "protocol_processes": 1}
    tiny = tmp_path / "repo"
    (tiny / WORDS).mkdir(parents=True)
    for file in (repository / WORDS).iterdir():
        (tiny / WORDS / file.name).write_bytes(file.read_bytes())
    with start_server(tiny, settings, env={"KEYS": "secret"}) as process:
        url = f"{process.url}/v1"
        with openai.OpenAI(base_url=url, api_key="secret", max_retries=0) as client:
            assert [m.id for m in client.models.list()] == [WORDS]
            assert client.completions.create(model=WORDS, prompt="hi").choices[0].text == "hi"
        with openai.OpenAI(base_url=url, api_key="wrong", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError):
                client.models.list()
            with pytest.raises(openai.AuthenticationError) as refused:
                client.completions.create(model=WORDS, prompt="hi")
            assert refused.value.code == "invalid_api_key"
        with httpx.Client(base_url=process.url) as http:
            body = {"model": WORDS, "prompt": "hi"}
            keyed = http.post("/v1/completions", json=body, headers={"x-api-key": "secret"})
            assert keyed.status_code == 200
            openai_error(http.post("/v1/completions", json=body), 401)


def test_three_protocol_processes(repository: Path, tmp_path: Path) -> None:
    with (
        start_server(repository, {"protocol_processes": 3}) as process,
        openai.OpenAI(
            base_url=f"{process.url}/v1", api_key="x", max_retries=0, timeout=60
        ) as client,
    ):
        models = sorted(m.id for m in client.models.list())
        assert models == ALL_MODELS
        texts = set()
        for _ in range(6):  # connections land on any of the processes
            answer = client.completions.create(
                model=CHAT_LM, prompt="the movie", max_tokens=5, temperature=0
            )
            texts.add(answer.choices[0].text)
            stream = client.chat.completions.create(
                model=WORDS, messages=[{"role": "user", "content": "a b"}], stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream) == "a b"
        assert len(texts) == 1  # greedy: every process answers alike
        assert f"'{WORDS}' runs in the model host" in process.log()
        # Loaded once and forked (no tqdm monitor thread left by the HF load).
        assert f"'{CHAT_LM}' is loaded in each" not in process.log()
        vectors = client.embeddings.create(model=ENCODER, input=["a", "b"])
        assert len(vectors.data) == 2
        shouted = client.completions.create(model=SHOUTING, prompt="a b")  # an adapter
        assert shouted.choices[0].text == "A B"
        assert_limit_is_named(client)


def test_an_adapter_is_a_model_of_its_own(http: httpx.Client) -> None:
    """A model's adapter (openai_adapters) answers /v1 by its name, on its model."""
    found = http.get(f"/v1/models/{SHOUTING}")
    assert found.status_code == 200 and found.json()["id"] == SHOUTING, found.text
    for model, text in ((SHOUTING, "A B"), (ASYNC_WORDS, "a b")):
        body = {"model": model, "prompt": "a b", "n": 2}
        answer = http.post("/v1/completions", json=body)
        assert answer.status_code == 200, answer.text
        assert [c["text"] for c in answer.json()["choices"]] == [text, text]
    refused = http.post("/v1/embeddings", json={"model": SHOUTING, "input": "a"})
    assert openai_error(refused, 400)["param"] == "model"


def test_an_async_engines_streams_interleave(server: ServerProcess) -> None:
    """AsyncGenerativeModel: streams hold no slot, so a second one runs alongside."""
    arrivals: dict[str, list[float]] = {"first": [], "second": []}

    def stream(name: str) -> None:
        body = {"model": ASYNC_WORDS, "prompt": " ".join([name] * 20), "stream": True}
        with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as sse:
            for line in sse.iter_lines():
                if line.startswith("data: {"):
                    arrivals[name].append(time.monotonic())

    first = threading.Thread(target=stream, args=("first",))
    first.start()
    wait_for(lambda: arrivals["first"], timeout=20, what="the first stream's first chunk")
    stream("second")
    first.join(30)
    assert len(arrivals["first"]) == len(arrivals["second"]) == 21
    assert arrivals["second"][0] < arrivals["first"][-1]  # it did not wait its turn
