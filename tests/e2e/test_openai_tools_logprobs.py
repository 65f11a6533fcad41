"""What LLM users ask of the OpenAI-compatible endpoints, with the official ``openai``
client against a real server: ``logprobs`` / ``top_logprobs`` from the Hugging Face
runtime with continuous batching and without (the model's own log-softmax, checked
against transformers), tool calls parsed into ``tool_calls`` (whole and streamed),
tools through the chat template, and a 400 naming each field a runtime cannot honour
(``response_format`` JSON, ``priority``, a forced ``tool_choice``, ``logprobs`` of a
custom runtime that does not give them), never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.frameworks import require_module
from tests.support.models import write_model_folder
from tests.support.serverproc import ServerProcess, start_server

from .openai_models import CHAT_LM, HF, WORDS, Reference, write_repository

openai = require_module("openai", "test")
torch = require_module("torch", "huggingface")

OFF = "chat-lm-off"  # the same weights, continuous batching off: the runtime's own loop
MESSAGES = [{"role": "user", "content": "the film is good"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = '<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>'


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = write_repository(tmp_path_factory.mktemp("tools"))
    extra = {"task": "text-generation", "continuous_batching": False}
    weights = str(repository / CHAT_LM / "weights")
    write_model_folder(repository, OFF, HF, parameters={"uri": weights, "extra": extra})
    return repository


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    with start_server(repository) as process:
        yield process


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0, timeout=60) as made:
        yield made


@pytest.fixture(scope="module")
def reference(repository: Path) -> Reference:
    return Reference(repository)


def expected_logprobs(reference: Reference, prompt: str, tokens: int, top: int) -> list[Any]:
    """transformers' greedy decoding of ``prompt``: each token's text and log-softmax,
    and its ``top`` likeliest (token, logprob)."""
    encoded = reference.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
    out = reference.lm.generate(
        **encoded,
        max_new_tokens=tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
    )
    found = []
    for logits in out.logits:
        logprobs = torch.log_softmax(logits[0].float(), dim=-1)
        values, ids = torch.topk(logprobs, top)
        decode = reference.tokenizer.decode
        alternatives = [
            (decode([i]), v) for i, v in zip(ids.tolist(), values.tolist(), strict=True)
        ]
        found.append((decode([int(ids[0])]), float(values[0]), alternatives))
    return found


@pytest.mark.parametrize("model", [CHAT_LM, OFF])
def test_chat_logprobs_are_the_models_own(client: Any, reference: Reference, model: str) -> None:
    answer = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    (choice,) = answer.choices
    scored = choice.logprobs.content
    expected = expected_logprobs(reference, reference.chat_prompt(MESSAGES), 6, 3)
    assert len(scored) == len(expected) == 6
    for token, (text, logprob, alternatives) in zip(scored, expected, strict=True):
        assert token.token == text and token.bytes == list(text.encode())
        assert token.logprob == pytest.approx(logprob, abs=1e-4)
        assert [top.token for top in token.top_logprobs] == [t for t, _ in alternatives]
        assert [top.logprob for top in token.top_logprobs] == pytest.approx(
            [v for _, v in alternatives], abs=1e-4
        )
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        stream=True,
    )
    streamed = [
        t
        for c in stream
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content
    ]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] == [
        (t.token, round(t.logprob, 4)) for t in scored
    ]


def test_sampled_tokens_are_scored_too_and_off_by_default(client: Any) -> None:
    answer = client.chat.completions.create(
        model=CHAT_LM, messages=MESSAGES, max_tokens=5, seed=3, logprobs=True
    )
    scored = answer.choices[0].logprobs.content
    assert len(scored) == answer.usage.completion_tokens
    assert all(t.logprob <= 0 and t.top_logprobs == [] for t in scored)
    plain = client.chat.completions.create(model=CHAT_LM, messages=MESSAGES, max_tokens=2)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs(client: Any, reference: Reference) -> None:
    prompt = "the movie was"
    answer = client.completions.create(
        model=CHAT_LM, prompt=prompt, max_tokens=4, temperature=0, logprobs=2
    )
    logprobs = answer.choices[0].logprobs
    expected = expected_logprobs(reference, prompt, 4, 2)
    assert logprobs.tokens == [text for text, _, _ in expected]
    assert logprobs.token_logprobs == pytest.approx([lp for _, lp, _ in expected], abs=1e-4)
    assert [list(top) for top in logprobs.top_logprobs] == [
        [t for t, _ in alternatives] for _, _, alternatives in expected
    ]
    assert logprobs.text_offset[0] == len(prompt)
    streamed = client.completions.create(
        model=OFF, prompt=prompt, max_tokens=4, temperature=0, logprobs=0, stream=True
    )
    tokens = [t for chunk in streamed for t in (chunk.choices[0].logprobs or {}).tokens or []]
    assert tokens == logprobs.tokens


def test_a_tool_call_is_parsed_into_tool_calls(client: Any) -> None:
    messages = [{"role": "user", "content": "Looking. " + CALL}]
    answer = client.chat.completions.create(model=WORDS, messages=messages, tools=[WEATHER])
    (choice,) = answer.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Looking."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    none = client.chat.completions.create(
        model=WORDS, messages=messages, tools=[WEATHER], tool_choice="none"
    )
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == "Looking. " + CALL
    assert none.choices[0].finish_reason == "stop"


def test_a_streamed_tool_call_comes_as_deltas(client: Any) -> None:
    messages = [{"role": "user", "content": "Looking. " + CALL}]
    stream = client.chat.completions.create(
        model=WORDS, messages=messages, tools=[WEATHER], stream=True
    )
    chunks = [chunk.choices[0] for chunk in stream]
    content = "".join(choice.delta.content or "" for choice in chunks)
    assert content == "Looking. "
    calls = [call for choice in chunks for call in choice.delta.tool_calls or []]
    (call,) = calls
    assert (call.index, call.function.name) == (0, "weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert chunks[-1].finish_reason == "tool_calls"


def test_tools_and_a_conversation_with_calls_reach_the_template(client: Any) -> None:
    def prompt_tokens(**fields: Any) -> int:
        answer = client.chat.completions.create(model=CHAT_LM, max_tokens=1, **fields)
        return int(answer.usage.prompt_tokens)

    plain = prompt_tokens(messages=MESSAGES)
    assert prompt_tokens(messages=MESSAGES, tools=[WEATHER]) == plain + 2  # <|system|> weather
    assert prompt_tokens(messages=MESSAGES, tools=[WEATHER], tool_choice="none") == plain
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    conversation = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    assert prompt_tokens(messages=conversation, tools=[WEATHER]) > plain


@pytest.mark.parametrize(
    ("model", "fields", "param", "words"),
    [
        (
            CHAT_LM,
            {"response_format": {"type": "json_object"}},
            "response_format",
            "response_format json_object is not supported",
        ),
        (
            OFF,
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {}},
                }
            },
            "response_format",
            "response_format json_schema is not supported",
        ),
        (CHAT_LM, {"priority": 1}, "priority", "priority is not supported"),
        (CHAT_LM, {"tool_choice": "required", "tools": [WEATHER]}, "tool_choice", "'required'"),
        (WORDS, {"logprobs": True}, "logprobs", "logprobs is not supported by model 'words'"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_what_a_runtime_cannot_honour_is_a_400_naming_it(
    server: ServerProcess, model: str, fields: dict[str, Any], param: str, words: str, stream: bool
) -> None:
    body = {"model": model, "messages": MESSAGES, "max_tokens": 2, "stream": stream} | fields
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and words in error["message"]
    assert error["type"] == "invalid_request_error"
