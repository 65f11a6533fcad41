"""The OpenAI-compatible endpoints with the official ``openai`` client (sync, async,
streaming): models, completions, chat, embeddings and errors, against tiny models the
tests build (tests/e2e/openai_models.py), compared with transformers' own answers."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.frameworks import require_module
from tests.support.serverproc import ServerProcess, start_server

from .openai_models import (
    ALL_MODELS,
    CHAT_LM,
    ENCODER,
    WORDS,
    Reference,
    write_repository,
)

openai = require_module("openai", "test")
require_module("transformers", "huggingface")

PROMPT = "the movie was"
MESSAGES = [
    {"role": "system", "content": "a plot"},
    {"role": "user", "content": "the film is good"},
]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(tmp_path_factory.mktemp("openai"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    with start_server(repository) as process:
        yield process


@pytest.fixture(scope="module")
def reference(repository: Path) -> Reference:
    return Reference(repository)


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60
    ) as made:
        yield made


def test_models_lists_what_serves_the_endpoints(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert sorted(model.id for model in models) == ALL_MODELS
    found = client.models.retrieve(CHAT_LM)
    assert (found.id, found.object, found.owned_by) == (CHAT_LM, "model", "inferd")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_greedy_completion_is_transformers_greedy_decoding(
    client: openai.OpenAI, reference: Reference
) -> None:
    answer = client.completions.create(model=CHAT_LM, prompt=PROMPT, max_tokens=10, temperature=0)
    assert answer.object == "text_completion" and answer.model == CHAT_LM
    assert answer.id.startswith("cmpl-") and answer.created > 0
    (choice,) = answer.choices
    assert choice.text == reference.greedy(PROMPT, 10)
    assert (choice.index, choice.finish_reason) == (0, "length")
    usage = answer.usage
    assert usage is not None
    assert usage.prompt_tokens == reference.prompt_tokens(PROMPT)
    assert usage.completion_tokens == 10
    assert usage.total_tokens == usage.prompt_tokens + 10


def test_several_prompts_and_choices_seeded(client: openai.OpenAI) -> None:
    def ask() -> list[tuple[int, str]]:
        answer = client.completions.create(
            model=CHAT_LM, prompt=["a movie", "the plot"], n=2, max_tokens=6, seed=7
        )
        return [(choice.index, choice.text) for choice in answer.choices]

    first = ask()
    assert [index for index, _ in first] == [0, 1, 2, 3]
    answer = client.completions.create(model=WORDS, prompt=["a b", "c"], n=3, max_tokens=5)
    assert answer.usage is not None  # each prompt counted once, each choice's tokens
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (3, 9)
    assert ask() == first  # seeded sampling: the same answers again
    assert len({text for _, text in first}) > 1  # each choice its own seed


def test_stop_string_ends_the_text_before_it(client: openai.OpenAI, reference: Reference) -> None:
    full = reference.greedy(PROMPT, 12)
    word = full.split()[2]
    answer = client.completions.create(
        model=CHAT_LM, prompt=PROMPT, max_tokens=12, temperature=0, stop=[word, "zzz"]
    )
    (choice,) = answer.choices
    assert choice.text == full[: full.index(word)]
    assert choice.finish_reason == "stop"


def test_chat_applies_the_chat_template(client: openai.OpenAI, reference: Reference) -> None:
    answer = client.chat.completions.create(
        model=CHAT_LM,
        messages=MESSAGES,
        max_completion_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    (choice,) = answer.choices
    assert choice.message.role == "assistant"
    prompt = reference.chat_prompt(MESSAGES)
    assert choice.message.content == reference.greedy(prompt, 8, special=False)
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == len(reference.tokenizer(prompt)["input_ids"])


def test_chat_text_parts_read_as_their_text(client: openai.OpenAI) -> None:
    parts = [{"type": "text", "text": "the film"}, {"type": "text", "text": " is good"}]
    as_parts = client.chat.completions.create(
        model=WORDS,
        messages=[{"role": "user", "content": parts}],  # type: ignore[list-item]
    )
    assert as_parts.choices[0].message.content == "the film is good"
    assert as_parts.choices[0].finish_reason == "stop"


def test_streamed_chat_is_the_whole_answer_in_chunks(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(
        model=CHAT_LM,
        messages=MESSAGES,
        max_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    stream = client.chat.completions.create(
        model=CHAT_LM,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk.id for chunk in chunks}) == 1
    *with_choices, last = chunks
    assert with_choices[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in with_choices)
    assert text == whole.choices[0].message.content
    assert len(with_choices) > 3  # token by token, not one piece
    assert with_choices[-1].choices[0].finish_reason == "length"
    assert last.choices == [] and last.usage == whole.usage


def test_top_p_user_and_a_conversation_with_an_assistant_turn(
    client: openai.OpenAI, reference: Reference
) -> None:
    """A nucleus this small holds only the likeliest token: sampling is greedy."""
    nucleus = client.completions.create(
        model=CHAT_LM, prompt=PROMPT, max_tokens=8, temperature=1, top_p=1e-6, user="u-1"
    )
    assert nucleus.choices[0].text == reference.greedy(PROMPT, 8)
    turns = [
        *MESSAGES,
        {"role": "assistant", "content": "the plot was good"},
        {"role": "user", "content": "and the acting"},
    ]
    answer = client.chat.completions.create(
        model=CHAT_LM,
        messages=turns,  # type: ignore[arg-type]
        max_tokens=6,
        temperature=0,
        user="u-1",
    )
    prompt = reference.chat_prompt(turns)
    assert "<|assistant|> the plot was good" in prompt
    assert answer.choices[0].message.content == reference.greedy(prompt, 6, special=False)


def test_chat_choices_are_seeded_and_stop_strings_hold(
    client: openai.OpenAI, reference: Reference
) -> None:
    def ask() -> list[str | None]:
        answer = client.chat.completions.create(
            model=CHAT_LM,
            messages=MESSAGES,  # type: ignore[arg-type]
            n=3,
            max_tokens=6,
            seed=11,
        )
        assert [choice.index for choice in answer.choices] == [0, 1, 2]
        assert answer.usage is not None and answer.usage.completion_tokens == 18
        return [choice.message.content for choice in answer.choices]

    first = ask()
    assert ask() == first and len(set(first)) > 1
    full = reference.greedy(reference.chat_prompt(MESSAGES), 10, special=False)
    word = full.split()[1]
    stopped = client.chat.completions.create(
        model=CHAT_LM,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=10,
        temperature=0,
        stop=word,
    )
    assert stopped.choices[0].message.content == full[: full.index(word)]
    assert stopped.choices[0].finish_reason == "stop"


def test_a_stream_of_several_choices_names_each_and_ends_with_the_usage(
    client: openai.OpenAI,
) -> None:
    stream = client.completions.create(
        model=WORDS,
        prompt=["a b c", "d e"],
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    *chunks, last = list(stream)
    texts: dict[int, str] = {}
    for chunk in chunks:
        (choice,) = chunk.choices
        texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == {0: "a b c", 1: "a b c", 2: "d e", 3: "d e"}
    assert len({chunk.id for chunk in [*chunks, last]}) == 1
    assert len({chunk.created for chunk in [*chunks, last]}) == 1
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (5, 10)


def test_streamed_completion(client: openai.OpenAI, reference: Reference) -> None:
    stream = client.completions.create(
        model=CHAT_LM, prompt=PROMPT, max_tokens=10, temperature=0, stream=True
    )
    chunks = list(stream)
    assert {chunk.object for chunk in chunks} == {"text_completion"}
    assert "".join(chunk.choices[0].text for chunk in chunks) == reference.greedy(PROMPT, 10)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(chunk.usage is None for chunk in chunks)


def test_embeddings_are_mean_pooled(client: openai.OpenAI, reference: Reference) -> None:
    texts = ["the movie was good", "awful plot"]
    expected = reference.embeddings(texts)
    answer = client.embeddings.create(model=ENCODER, input=texts)  # base64 under the hood
    assert [item.index for item in answer.data] == [0, 1]
    vectors = [item.embedding for item in answer.data]
    np.testing.assert_allclose(vectors, expected, rtol=1e-4, atol=1e-5)
    as_floats = client.embeddings.create(model=ENCODER, input=texts[0], encoding_format="float")
    np.testing.assert_allclose(as_floats.data[0].embedding, expected[0], rtol=1e-4, atol=1e-5)
    raw = client.embeddings.with_raw_response.create(
        model=ENCODER, input=texts, encoding_format="base64"
    ).http_response.json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][1]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, expected[1], rtol=1e-4, atol=1e-5)
    assert raw["usage"]["prompt_tokens"] > 0


def test_dimensions_shorten_the_embeddings(client: openai.OpenAI, reference: Reference) -> None:
    texts = ["the movie was good", "awful plot"]
    full = np.asarray(reference.embeddings(texts))
    width = full.shape[1]
    short = client.embeddings.create(model=ENCODER, input=texts, dimensions=4)
    expected = full[:, :4] / np.linalg.norm(full[:, :4], axis=1, keepdims=True)
    np.testing.assert_allclose([item.embedding for item in short.data], expected, atol=1e-5)
    whole = client.embeddings.create(model=ENCODER, input=texts[0], dimensions=width)
    assert np.linalg.norm(whole.data[0].embedding) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(openai.BadRequestError) as wide:
        client.embeddings.create(model=ENCODER, input=texts[0], dimensions=width + 1)
    assert wide.value.param == "dimensions" and f"at most {width}" in wide.value.message
    custom = client.embeddings.create(model=WORDS, input="a bb", dimensions=1)
    assert custom.data[0].embedding == [1.0]  # [4, 2] cut to [4] and scaled to unit length


def test_custom_runtime_serves_the_same_endpoints(client: openai.OpenAI) -> None:
    answer = client.completions.create(model=WORDS, prompt="one two three", max_tokens=2)
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == ("one two", "length")
    assert answer.usage is not None and answer.usage.completion_tokens == 2
    vectors = client.embeddings.create(model=WORDS, input=["a bb", "ccc"], encoding_format="float")
    assert [item.embedding for item in vectors.data] == [[4.0, 2.0], [3.0, 1.0]]


def test_errors_raise_the_sdk_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="no-such-model", prompt="hi")
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as hot:
        client.completions.create(model=CHAT_LM, prompt="hi", temperature=5)
    assert (hot.value.param, hot.value.code) == ("temperature", "decimal_above_max_value")
    with pytest.raises(openai.BadRequestError) as not_served:
        client.chat.completions.create(model=ENCODER, messages=[{"role": "user", "content": "hi"}])
    assert "does not serve chat completions" in not_served.value.message
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=CHAT_LM, input="hi")
    with pytest.raises(openai.BadRequestError) as long:
        client.completions.create(model=CHAT_LM, prompt="the", max_tokens=100_000)
    assert "at most 256 tokens" in long.value.message


def test_values_out_of_range_carry_openais_code_and_words(client: openai.OpenAI) -> None:
    """A few of the range checks through the SDK, streamed or not: the error comes
    before any chunk, and a huge ``n`` is refused before anything is run."""
    chat = client.chat.completions.create
    cases = [
        (
            lambda stream: chat(model=CHAT_LM, messages=MESSAGES, temperature=3, stream=stream),
            "temperature",
            "decimal_above_max_value",
            "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, "
            "but got 3 instead.",
        ),
        (
            lambda stream: client.completions.create(
                model=CHAT_LM, prompt="the", n=10**9, stream=stream
            ),
            "n",
            "integer_above_max_value",
            "Invalid 'n': integer above maximum value. Expected a value <= 128, "
            "but got 1000000000 instead.",
        ),
        (
            lambda stream: chat(
                model=CHAT_LM, messages=MESSAGES, stop=list("abcde"), stream=stream
            ),
            "stop",
            "array_above_max_length",
            "Invalid 'stop': array too long. Expected an array with maximum length 4, "
            "but got an array with length 5 instead.",
        ),
        (
            lambda stream: chat(model=CHAT_LM, messages=[], stream=stream),
            "messages",
            "empty_array",
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
        ),
    ]
    for create, param, code, message in cases:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                create(stream)
            error = refused.value
            assert (error.status_code, error.param, error.code) == (400, param, code)
            assert error.body == {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": code,
            }
    for fields, param, code in [
        ({"input": ""}, "input", "empty_string"),
        ({"input": "hi", "dimensions": 0}, "dimensions", "integer_below_min_value"),
        ({"input": "hi", "encoding_format": "hex"}, "encoding_format", "invalid_value"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model=ENCODER, **fields)  # type: ignore[arg-type]
        assert (refused.value.param, refused.value.code) == (param, code)
    # The server is whole after them: the bounds themselves are taken.
    answer = chat(model=CHAT_LM, messages=MESSAGES, temperature=2, top_p=0, max_tokens=2, seed=1)
    assert answer.choices[0].finish_reason == "length"


LONG_MESSAGES = [{"role": "user", "content": " ".join(["the"] * 200)}]


def test_a_field_past_the_models_limit_is_named_as_openai_names_it(
    client: openai.OpenAI,
) -> None:
    """The tiny LM takes 256 tokens: a max_tokens beyond it is ``invalid_value`` of the
    field sent, a prompt that leaves too little room ``context_length_exceeded`` of
    ``messages`` / ``prompt``, streamed or not (the error comes before any chunk)."""
    cases = [
        (client.completions.create, {"prompt": "the", "max_tokens": 100_000}, "max_tokens"),
        (
            client.chat.completions.create,
            {"messages": MESSAGES, "max_completion_tokens": 100_000},
            "max_completion_tokens",
        ),
        (client.chat.completions.create, {"messages": MESSAGES, "max_tokens": 300}, "max_tokens"),
    ]
    for create, fields, param in cases:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                create(model=CHAT_LM, stream=stream, **fields)
            error = refused.value
            assert (error.param, error.code, error.type) == (
                param,
                "invalid_value",
                "invalid_request_error",
            )
            assert error.body["param"] == param  # type: ignore[index]
            assert "256 tokens" in error.message
    long = [
        (client.chat.completions.create, {"messages": LONG_MESSAGES}, "messages"),
        (client.completions.create, {"prompt": LONG_MESSAGES[0]["content"]}, "prompt"),
    ]
    for create, fields, param in long:
        with pytest.raises(openai.BadRequestError) as refused:
            create(model=CHAT_LM, max_tokens=100, **fields)
        assert (refused.value.param, refused.value.code) == (param, "context_length_exceeded")


def test_a_missing_prompt_or_messages_is_named(client: openai.OpenAI) -> None:
    for path, body, param in [
        ("/completions", {"model": CHAT_LM, "max_tokens": 2}, "prompt"),
        ("/chat/completions", {"model": CHAT_LM}, "messages"),
        (
            "/chat/completions",
            {"model": CHAT_LM, "messages": [{"content": "x"}]},
            "messages.[0].role",
        ),
        ("/embeddings", {"model": ENCODER}, "input"),
        ("/completions", {"prompt": "x"}, "model"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.post(path, cast_to=httpx.Response, body=body)
        error = refused.value
        assert (error.param, error.code) == (param, "missing_required_parameter")
        assert error.body == {  # OpenAI's words
            "message": f"Missing required parameter: '{param}'.",
            "type": "invalid_request_error",
            "param": param,
            "code": "missing_required_parameter",
        }
    with pytest.raises(openai.BadRequestError) as typed:
        client.completions.create(model=CHAT_LM, prompt="x", max_tokens="many")  # type: ignore[arg-type]
    assert (typed.value.param, typed.value.code) == ("max_tokens", "invalid_type")


def test_async_client_and_stream(server: ServerProcess, reference: Reference) -> None:
    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(
            base_url=f"{server.url}/v1", api_key="unused", max_retries=0
        ) as client:
            whole = await client.completions.create(
                model=CHAT_LM, prompt=PROMPT, max_tokens=6, temperature=0
            )
            stream = await client.completions.create(
                model=CHAT_LM, prompt=PROMPT, max_tokens=6, temperature=0, stream=True
            )
            pieces = [chunk.choices[0].text async for chunk in stream]
            return whole.choices[0].text, "".join(pieces)

    whole, streamed = asyncio.run(run())
    assert whole == streamed == reference.greedy(PROMPT, 6)


def test_async_client_chat_stream_embeddings_models_and_errors(
    server: ServerProcess, reference: Reference
) -> None:
    async def run() -> None:
        async with openai.AsyncOpenAI(
            base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60
        ) as client:
            assert sorted([model.id async for model in client.models.list()]) == ALL_MODELS
            stream = await client.chat.completions.create(
                model=CHAT_LM,
                messages=MESSAGES,  # type: ignore[arg-type]
                max_tokens=6,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [chunk async for chunk in stream]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            expected = reference.greedy(reference.chat_prompt(MESSAGES), 6, special=False)
            assert text == expected
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
            vectors = await client.embeddings.create(model=ENCODER, input=["awful plot"])
            np.testing.assert_allclose(
                vectors.data[0].embedding, reference.embeddings(["awful plot"])[0], atol=1e-5
            )
            with pytest.raises(openai.BadRequestError) as long:
                await client.completions.create(model=CHAT_LM, prompt="x", max_tokens=999)
            assert (long.value.param, long.value.code) == ("max_tokens", "invalid_value")
            with pytest.raises(openai.NotFoundError):
                await client.embeddings.create(model="no-such-model", input="x")

    asyncio.run(run())


def test_metrics_count_tokens_and_time_tokens(client: openai.OpenAI, server: ServerProcess) -> None:
    def scrape() -> dict[str, float]:
        text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
        found = {}
        for line in text.splitlines():
            if 'model_name="words"' in line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                found[name.split("{")[0]] = float(value)
        return found

    before = scrape()
    client.completions.create(model=WORDS, prompt="one two three four", max_tokens=3)
    after = scrape()
    generated = "model_generated_tokens_total"
    assert after[generated] - before.get(generated, 0) == 3
    assert after["model_prompt_tokens_total"] - before.get("model_prompt_tokens_total", 0) == 4
    first_token = "model_stream_first_response_seconds_count"
    assert after[first_token] - before.get(first_token, 0) == 1
    # 3 tokens: 2 gaps between consecutive ones, and one completion's rate.
    gaps = "model_inter_token_seconds_count"
    assert after[gaps] - before.get(gaps, 0) == 2
    rates = "model_completion_tokens_per_second_count"
    assert after[rates] - before.get(rates, 0) == 1
