"""The OpenAI-compatible endpoints' pure parts: request bodies, answers, errors, the
Bearer key, and the Hugging Face runtime's stop strings."""

from __future__ import annotations

import base64
import json

import msgspec
import numpy as np
import orjson
import pytest

from inferd.errors import (
    InvalidParameter,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    PermissionDenied,
)
from inferd.generation import (
    AsyncGenerativeModel,
    EmbeddingRequest,
    Embeddings,
    GenerationRequest,
    GenerativeModel,
    TextPiece,
    generation_request,
    is_generation_call,
    read_embeddings,
    read_piece,
)
from inferd.runtimes.huggingface_generation import StopStrings
from inferd.server.access import AcceptedKeys, KeyGuard, check_bearer
from inferd.server.openai import wire
from inferd.server.openai.answers import (
    Choice,
    Completion,
    Usage,
    embeddings_answer,
    openai_error,
    shortened,
)
from inferd.settings import ModelSettings
from inferd.settings.security import RestrictedApiSettings
from inferd.types import InferenceRequest
from inferd.workers.ipc import error_from_wire, error_to_wire


def completion(**fields: object) -> bytes:
    # json, not orjson: bodies with integers past 64 bits are sent too.
    return json.dumps({"model": "m", "prompt": "hi"} | fields).encode()


def test_a_completion_body_becomes_one_call_per_prompt() -> None:
    body = wire.decode(
        completion(prompt=["a", "b"], stop="x", seed=3, temperature=0), wire.CompletionBody
    )
    calls = wire.completion_calls(body)
    assert [call.prompt for call in calls] == ["a", "b"]
    assert calls[0].max_tokens == 16  # OpenAI's default for completions
    assert (calls[0].stop, calls[0].seed, calls[0].temperature) == (["x"], 3, 0)


def refusal(body: bytes, kind: type = wire.CompletionBody) -> InvalidParameter:
    """What the endpoint's checks say of ``body`` (they run in the endpoint's order)."""
    with pytest.raises(InvalidParameter) as refused:
        decoded = wire.decode(body, kind)
        if isinstance(decoded, wire.CompletionBody):
            wire.completion_calls(decoded)
        elif isinstance(decoded, wire.ChatCompletionBody):
            wire.chat_call(decoded)
        else:
            wire.embedding_call(decoded)
        wire.choices(decoded)
        wire.include_usage(decoded)
    return refused.value


def chat(**fields: object) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]} | fields
    ).encode()


def embedding(**fields: object) -> bytes:
    return json.dumps({"model": "m", "input": "hi"} | fields).encode()


ABOVE = "above maximum value. Expected a value <="
BELOW = "below minimum value. Expected a value >="


@pytest.mark.parametrize(
    ("body", "kind", "param", "code", "message"),
    [
        (
            completion(temperature=3),
            wire.CompletionBody,
            "temperature",
            "decimal_above_max_value",
            "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, "
            "but got 3 instead.",
        ),
        (
            chat(temperature=-0.5),
            wire.ChatCompletionBody,
            "temperature",
            "decimal_below_min_value",
            f"Invalid 'temperature': decimal {BELOW} 0, but got -0.5 instead.",
        ),
        (
            completion(top_p=1.5),
            wire.CompletionBody,
            "top_p",
            "decimal_above_max_value",
            f"Invalid 'top_p': decimal {ABOVE} 1, but got 1.5 instead.",
        ),
        (
            chat(top_p=-1),
            wire.ChatCompletionBody,
            "top_p",
            "decimal_below_min_value",
            f"Invalid 'top_p': decimal {BELOW} 0, but got -1 instead.",
        ),
        (
            completion(n=0),
            wire.CompletionBody,
            "n",
            "integer_below_min_value",
            f"Invalid 'n': integer {BELOW} 1, but got 0 instead.",
        ),
        (
            chat(n=10**9),
            wire.ChatCompletionBody,
            "n",
            "integer_above_max_value",
            f"Invalid 'n': integer {ABOVE} 128, but got 1000000000 instead.",
        ),
        (
            completion(max_tokens=0),
            wire.CompletionBody,
            "max_tokens",
            "integer_below_min_value",
            f"Invalid 'max_tokens': integer {BELOW} 1, but got 0 instead.",
        ),
        (
            chat(max_completion_tokens=-3),
            wire.ChatCompletionBody,
            "max_completion_tokens",
            "integer_below_min_value",
            f"Invalid 'max_completion_tokens': integer {BELOW} 1, but got -3 instead.",
        ),
        (
            completion(max_tokens=10**30),  # past any count (and msgpack's ints)
            wire.CompletionBody,
            "max_tokens",
            "integer_above_max_value",
            f"Invalid 'max_tokens': integer {ABOVE} 2147483647, but got {10**30} instead.",
        ),
        (
            completion(seed=2**64),
            wire.CompletionBody,
            "seed",
            "integer_above_max_value",
            f"Invalid 'seed': integer {ABOVE} {2**63 - 1}, but got {2**64} instead.",
        ),
        (
            chat(presence_penalty=3),
            wire.ChatCompletionBody,
            "presence_penalty",
            "decimal_above_max_value",
            f"Invalid 'presence_penalty': decimal {ABOVE} 2, but got 3 instead.",
        ),
        (
            completion(frequency_penalty=-2.5),
            wire.CompletionBody,
            "frequency_penalty",
            "decimal_below_min_value",
            f"Invalid 'frequency_penalty': decimal {BELOW} -2, but got -2.5 instead.",
        ),
        (
            chat(top_logprobs=21),
            wire.ChatCompletionBody,
            "top_logprobs",
            "integer_above_max_value",
            f"Invalid 'top_logprobs': integer {ABOVE} 20, but got 21 instead.",
        ),
        (
            completion(stop=["a", "b", "c", "d", "e"]),
            wire.CompletionBody,
            "stop",
            "array_above_max_length",
            "Invalid 'stop': array too long. Expected an array with maximum length 4, "
            "but got an array with length 5 instead.",
        ),
        (
            chat(messages=[]),
            wire.ChatCompletionBody,
            "messages",
            "empty_array",
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
        ),
        (
            completion(prompt=[]),
            wire.CompletionBody,
            "prompt",
            "empty_array",
            "Invalid 'prompt': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
        ),
        (
            completion(prompt=["x"] * 129),
            wire.CompletionBody,
            "prompt",
            "array_above_max_length",
            "Invalid 'prompt': array too long. Expected an array with maximum length 128, "
            "but got an array with length 129 instead.",
        ),
        (
            embedding(input=[]),
            wire.EmbeddingBody,
            "input",
            "empty_array",
            "Invalid 'input': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
        ),
        (
            embedding(input=["x"] * 2049),
            wire.EmbeddingBody,
            "input",
            "array_above_max_length",
            "Invalid 'input': array too long. Expected an array with maximum length 2048, "
            "but got an array with length 2049 instead.",
        ),
        (
            embedding(input=""),
            wire.EmbeddingBody,
            "input",
            "empty_string",
            "Invalid 'input': empty string. Expected a string with minimum length 1, "
            "but got an empty string instead.",
        ),
        (
            embedding(input=["a", ""]),
            wire.EmbeddingBody,
            "input.[1]",
            "empty_string",
            "Invalid 'input.[1]': empty string. Expected a string with minimum length 1, "
            "but got an empty string instead.",
        ),
        (
            embedding(dimensions=0),
            wire.EmbeddingBody,
            "dimensions",
            "integer_below_min_value",
            f"Invalid 'dimensions': integer {BELOW} 1, but got 0 instead.",
        ),
        (
            embedding(encoding_format="hex"),
            wire.EmbeddingBody,
            "encoding_format",
            "invalid_value",
            "Invalid value: 'hex'. Supported values are: 'float' and 'base64'.",
        ),
    ],
)
def test_values_out_of_range_are_refused_as_openai_refuses_them(
    body: bytes, kind: type, param: str, code: str, message: str
) -> None:
    refused = refusal(body, kind)
    assert (refused.param, refused.reason, refused.message) == (param, code, message)


def test_the_bounds_themselves_are_taken() -> None:
    """OpenAI's ranges include their ends: temperature 0 and 2, top_p 0 and 1, n 128,
    penalties of 0 (nothing asked), 4 stop strings, 2048 texts to embed."""
    for fields in (
        {"temperature": 0, "top_p": 0, "n": 128},
        {"temperature": 2, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0.0},
        {"stop": ["a", "b", "c", "d"], "max_tokens": 2**31 - 1, "seed": -(2**63)},
    ):
        body = wire.decode(completion(**fields), wire.CompletionBody)
        assert len(wire.completion_calls(body)) == 1
        assert wire.choices(body) == fields.get("n", 1)
    chat_body = wire.decode(chat(top_logprobs=0, n=1), wire.ChatCompletionBody)
    assert wire.chat_call(chat_body).top_p == 1.0
    texts = wire.decode(embedding(input=["x"] * 2048, dimensions=1), wire.EmbeddingBody)
    assert len(wire.embedding_call(texts).texts) == 2048


def test_choices_of_all_prompts_together_are_bounded() -> None:
    """Each choice is a generation of its own: 64 prompts of 3 choices would be 192."""
    refused = refusal(completion(prompt=["x"] * 64, n=3))
    assert (refused.param, refused.reason) == ("n", "invalid_value")
    assert "192 completions" in refused.message and "at most 128" in refused.message
    body = wire.decode(completion(prompt=["x"] * 64, n=2), wire.CompletionBody)
    assert len(wire.completion_calls(body)) == 64 and wire.choices(body) == 2


@pytest.mark.parametrize(
    ("body", "kind", "param", "code"),
    [
        (completion(logprobs=6), wire.CompletionBody, "logprobs", "integer_above_max_value"),
        (completion(echo=True), wire.CompletionBody, "echo", "unsupported_parameter"),
        (completion(suffix="z"), wire.CompletionBody, "suffix", "unsupported_parameter"),
        (completion(best_of=3), wire.CompletionBody, "best_of", "unsupported_parameter"),
        (chat(presence_penalty=1), wire.ChatCompletionBody, "presence_penalty", None),
        (chat(logit_bias={"1": 2}), wire.ChatCompletionBody, "logit_bias", None),
        (
            chat(tools=[{"type": "retrieval"}]),
            wire.ChatCompletionBody,
            "tools.[0].type",
            "unsupported_value",
        ),
        (chat(tool_choice="required"), wire.ChatCompletionBody, "tool_choice", "unsupported_value"),
        (chat(functions=[{"name": "f"}]), wire.ChatCompletionBody, "functions", None),
        (chat(top_logprobs=2), wire.ChatCompletionBody, "top_logprobs", "invalid_value"),
        (
            chat(response_format={"type": "xml"}),
            wire.ChatCompletionBody,
            "response_format.type",
            "invalid_value",
        ),
        (completion(prompt=[[1, 2]]), wire.CompletionBody, "prompt", "unsupported_value"),
        (embedding(input=[1, 2]), wire.EmbeddingBody, "input", "unsupported_value"),
        (
            completion(stream_options={"include_usage": True}),
            wire.CompletionBody,
            "stream_options",
            "invalid_value",
        ),
        (completion(temperature="hot"), wire.CompletionBody, "temperature", "invalid_type"),
    ],
)
def test_what_this_server_cannot_honour_is_named(
    body: bytes, kind: type, param: str, code: str | None
) -> None:
    refused = refusal(body, kind)
    assert refused.param == param
    assert refused.reason == (code or "unsupported_parameter")
    if refused.reason == "unsupported_parameter":
        assert refused.message == (
            f"Unsupported parameter: '{param}' is not supported by this server."
        )


@pytest.mark.parametrize(
    ("body", "kind", "param", "reason"),
    [
        (b'{"model": "m"}', wire.CompletionBody, "prompt", "missing_required_parameter"),
        (b'{"model": "m"}', wire.ChatCompletionBody, "messages", "missing_required_parameter"),
        (b'{"prompt": "x"}', wire.CompletionBody, "model", "missing_required_parameter"),
        (
            b'{"model": "m", "messages": [{"content": "x"}]}',
            wire.ChatCompletionBody,
            "messages.[0].role",
            "missing_required_parameter",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": 3}]}',
            wire.ChatCompletionBody,
            "messages.[0].content",
            "invalid_type",
        ),
    ],
)
def test_decode_names_the_field_as_openai_does(
    body: bytes, kind: type, param: str, reason: str
) -> None:
    with pytest.raises(InvalidParameter) as refused:
        wire.decode(body, kind)
    assert (refused.value.param, refused.value.reason) == (param, reason)
    if reason == "missing_required_parameter":
        assert refused.value.message == f"Missing required parameter: '{param}'."


def test_a_runtimes_max_tokens_error_names_the_field_sent() -> None:
    chat = wire.decode(
        b'{"model": "m", "messages": [], "max_completion_tokens": 0}', wire.ChatCompletionBody
    )
    with pytest.raises(InvalidParameter) as refused:
        wire.chat_call(msgspec.structs.replace(chat, messages=[wire.MessageBody("user", "x")]))
    assert refused.value.param == "max_completion_tokens"
    too_large = InvalidParameter("max_tokens is too large: 9", "max_tokens", "invalid_value")
    renamed = wire.as_sent(too_large, chat)
    assert (renamed.param, renamed.reason) == ("max_completion_tokens", "invalid_value")
    assert renamed.message == "max_completion_tokens is too large: 9"
    plain = wire.decode(b'{"model": "m", "prompt": "x", "max_tokens": 9}', wire.CompletionBody)
    assert wire.as_sent(too_large, plain) is too_large


def test_a_field_error_crosses_processes_with_its_param() -> None:
    sent = InvalidParameter("too long", "messages", "context_length_exceeded")
    back = error_from_wire(error_to_wire(sent))
    assert isinstance(back, InvalidParameter)
    assert (back.message, back.param, back.reason) == ("too long", "messages", sent.reason)


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b'{"prompt": "x"}', b"\xff"])
def test_malformed_bodies_are_a_400(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        wire.decode(body, wire.CompletionBody)


def test_chat_messages_take_text_parts_and_max_completion_tokens() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": parts},
                {"role": "assistant", "content": None},
            ],
            "max_tokens": 9,
            "max_completion_tokens": 5,
        }
    )
    call = wire.chat_call(wire.decode(body, wire.ChatCompletionBody))
    assert call.messages is not None
    assert [(m.role, m.content) for m in call.messages] == [("user", "ab"), ("assistant", "")]
    assert call.max_tokens == 5 and call.chat


def test_an_image_part_is_refused() -> None:
    body = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    )
    with pytest.raises(InvalidParameter, match="image_url"):
        wire.chat_call(wire.decode(body, wire.ChatCompletionBody))


def test_calls_travel_as_inference_requests_and_back() -> None:
    class Echo(GenerativeModel):
        def generate(self, request: GenerationRequest):  # type: ignore[no-untyped-def]
            yield TextPiece(request.prompt or "")
            yield TextPiece("", "stop", 1, 1)

        def embed(self, request: EmbeddingRequest) -> Embeddings:
            return Embeddings(np.ones((len(request.texts), 3)), 4)

    model = Echo(ModelSettings(name="echo", implementation="x.Echo"))
    assert model.openai_endpoints == ("completions", "chat", "embeddings")
    request = generation_request(GenerationRequest(prompt="hello", stop=["x"]))
    assert is_generation_call(request) and request.inputs[0].data.shape == ()
    pieces = [read_piece(response) for response in model.predict_stream(request)]
    assert pieces == [TextPiece("hello"), TextPiece("", "stop", 1, 1)]
    embedded = read_embeddings(model.predict(generation_request(EmbeddingRequest(texts=["a"]))))
    assert embedded.vectors.dtype == np.float32 and embedded.prompt_tokens == 4
    with pytest.raises(InvalidRequest, match="/v1/"):
        model.predict(InferenceRequest([]))
    forged = generation_request(EmbeddingRequest(texts=["a"]))
    forged.inputs[0].data[()] = b"not msgpack"
    with pytest.raises(InvalidRequest, match="does not decode"):
        model.predict(forged)


def test_an_async_engine_streams_as_an_async_generator() -> None:
    import asyncio
    import inspect

    class Engine(AsyncGenerativeModel):
        async def generate(self, request: GenerationRequest):  # type: ignore[no-untyped-def]
            yield TextPiece("x")
            yield TextPiece("", "length", 1, 1)

    model = Engine(ModelSettings(name="e", implementation="x.E"))
    assert model.openai_endpoints == ("completions", "chat")
    assert inspect.isasyncgenfunction(model.predict_stream)  # interleaved streams

    async def read() -> list[TextPiece]:
        request = generation_request(GenerationRequest(prompt="p"))
        return [read_piece(r) async for r in model.predict_stream(request)]

    assert asyncio.run(read()) == [TextPiece("x"), TextPiece("", "length", 1, 1)]


def test_a_model_serves_what_it_implements() -> None:
    class OnlyEmbeds(GenerativeModel):
        def embed(self, request: EmbeddingRequest) -> Embeddings:
            return Embeddings(np.zeros((1, 1)), 0)

    model = OnlyEmbeds(ModelSettings(name="e", implementation="x.E"))
    assert model.openai_endpoints == ("embeddings",)


def test_whole_answers_and_chunks_have_openai_shapes() -> None:
    answer = Completion("m", chat=True)
    choice = Choice(0, ["a", "b"], "length", Usage(2, 2))
    whole = orjson.loads(answer.whole([choice], Usage(2, 2)))
    assert whole["object"] == "chat.completion" and whole["id"].startswith("chatcmpl-")
    assert whole["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ab"},
            "logprobs": None,
            "finish_reason": "length",
        }
    ]
    assert whole["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    first = answer.chunk(Choice(0), "a", None, first=True, usage=True)
    assert first.startswith(b"data: ") and first.endswith(b"\n\n")
    chunk = orjson.loads(first[6:])
    assert chunk["object"] == "chat.completion.chunk" and chunk["usage"] is None
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": "a"}
    text = orjson.loads(
        Completion("m", chat=False).chunk(Choice(1), "x", "stop", first=False, usage=False)[6:]
    )
    assert text["choices"] == [{"index": 1, "text": "x", "logprobs": None, "finish_reason": "stop"}]
    assert "usage" not in text


def test_embeddings_answer_in_floats_or_base64() -> None:
    vectors = np.array([[1.5, -2.0]], dtype=np.float32)
    floats = orjson.loads(embeddings_answer("m", vectors, 3, "float"))
    assert floats["data"] == [{"object": "embedding", "index": 0, "embedding": [1.5, -2.0]}]
    assert floats["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    encoded = orjson.loads(embeddings_answer("m", vectors, 3, "base64"))["data"][0]["embedding"]
    assert np.frombuffer(base64.b64decode(encoded), "<f4").tolist() == [1.5, -2.0]


@pytest.mark.parametrize(
    ("error", "status", "kind", "code"),
    [
        (InvalidParameter("bad", "n"), 400, "invalid_request_error", None),
        (
            InvalidParameter("long", "messages", "context_length_exceeded"),
            400,
            "invalid_request_error",
            "context_length_exceeded",
        ),
        (ModelNotFound("x"), 404, "invalid_request_error", "model_not_found"),
        (PermissionDenied("no"), 401, "invalid_request_error", "invalid_api_key"),
        (Overloaded("full", 2.0), 429, "rate_limit_exceeded", "rate_limit_exceeded"),
        (RuntimeError("bug"), 500, "server_error", None),
    ],
)
def test_errors_in_openai_shape(error: Exception, status: int, kind: str, code: str | None) -> None:
    got, body, headers = openai_error(error, "test")
    detail = orjson.loads(body)["error"]
    assert (got, detail["type"], detail["code"]) == (status, kind, code)
    assert set(detail) == {"message", "type", "param", "code"}
    if status == 429:
        assert (b"retry-after", b"2") in headers
    if status == 500:
        assert "bug" not in detail["message"]


def test_a_bearer_key_is_accepted_as_the_groups_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS", "k1,k2")
    restriction = RestrictedApiSettings.model_validate(
        {"apis": ["inference"], "header": "x-key", "values_from_env": "KEYS"}
    )
    guard = KeyGuard("inference", "x-key", AcceptedKeys(restriction))
    check_bearer(guard, {b"authorization": b"Bearer k2"})
    check_bearer(guard, {b"x-key": b"k1"})
    check_bearer(None, {})
    for refused in ({b"authorization": b"Bearer nope"}, {b"authorization": b"k1"}, {}):
        with pytest.raises(PermissionDenied):
            check_bearer(guard, refused)


@pytest.mark.parametrize(
    ("text", "sent", "found", "held"),
    [
        ("a b END c", 0, 4, 0),
        ("a b EN", 0, None, 2),
        ("a b E", 0, None, 1),
        ("xyz", 0, None, 1),  # "z" may begin "zz"
        ("xy", 0, None, 0),
        ("abc ENDx", 5, 4, 0),
    ],
)
def test_stop_strings(text: str, sent: int, found: int | None, held: int) -> None:
    stops = StopStrings(["END", "zz"])
    assert stops.find(text, sent) == found
    if found is None:
        assert stops.held_back(text) == held


def test_dimensions_cut_the_vectors_and_renormalize() -> None:
    vectors = np.array([[3.0, 4.0, 12.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    assert shortened("m", vectors, None) is vectors
    np.testing.assert_allclose(shortened("m", vectors, 2), [[0.6, 0.8], [0.0, 0.0]])
    np.testing.assert_allclose(shortened("m", vectors, 3)[0], np.array([3, 4, 12]) / 13)
    with pytest.raises(InvalidParameter) as wide:
        shortened("m", vectors, 4)
    assert wide.value.param == "dimensions" and "at most 3" in wide.value.message
