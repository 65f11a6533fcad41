"""Tool calls, log probabilities, response_format and priority on the OpenAI-compatible
endpoints, their pure parts: the bodies read into the runtime's call, the parsers of
tool calls (whole and streamed), the answers' shapes, and the runtime's refusal of
what it does not honour."""

from __future__ import annotations

import json

import orjson
import pytest

from inferd.errors import InvalidParameter
from inferd.generation import (
    LOGPROBS,
    GenerationRequest,
    GenerativeModel,
    ResponseFormat,
    TextPiece,
    TokenLogprob,
    TopLogprob,
    generation_request,
    piece_response,
    read_piece,
    refuse_unhonoured,
)
from inferd.server.openai import wire
from inferd.server.openai.answers import Choice, Completion, Usage
from inferd.server.openai.tool_calls import ToolCallText, parse_tool_calls
from inferd.settings import ModelSettings

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "today's weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
HERMES = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def chat(**fields: object) -> GenerationRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]} | fields
    return wire.chat_call(wire.decode(json.dumps(body).encode(), wire.ChatCompletionBody))


def test_chat_fields_reach_the_call() -> None:
    call = chat(
        tools=[WEATHER],
        logprobs=True,
        top_logprobs=3,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        priority=-2,
    )
    assert call.tools == [WEATHER]
    assert call.logprobs == 3
    assert call.response_format == ResponseFormat("json_schema", {}, "x", None)
    assert call.priority == -2
    assert call.asks_for() == ["logprobs", "tools", "response_format", "priority"]
    plain = chat(logprobs=False, response_format={"type": "text"}, tool_choice="auto")
    assert plain.asks_for() == []
    assert chat(logprobs=True).logprobs == 0
    assert chat(tools=[WEATHER], tool_choice="none").tools is None  # none: never shown


def test_messages_with_tool_calls_and_tool_answers_are_read() -> None:
    call = chat(
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ]
    )
    assert call.messages is not None
    assistant, tool = call.messages[1], call.messages[2]
    assert assistant.tool_calls is not None and assistant.tool_calls[0].name == "weather"
    assert assistant.content == "" and tool.tool_call_id == "call_1"


def test_a_completions_logprobs_is_a_count_up_to_5() -> None:
    body = {"model": "m", "prompt": "x", "logprobs": 0}
    (call,) = wire.completion_calls(wire.decode(json.dumps(body).encode(), wire.CompletionBody))
    assert call.logprobs == 0
    for bad, code in ((6, "integer_above_max_value"), (True, "invalid_type")):
        with pytest.raises(InvalidParameter) as refused:
            body = {"model": "m", "prompt": "x", "logprobs": bad}
            wire.completion_calls(wire.decode(json.dumps(body).encode(), wire.CompletionBody))
        assert (refused.value.param, refused.value.reason) == ("logprobs", code)


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        (
            {"tool_choice": {"type": "function", "function": {"name": "weather"}}},
            "tool_choice",
            "unsupported_value",
        ),
        (
            {"response_format": {"type": "json_schema"}},
            "response_format.json_schema",
            "missing_required_parameter",
        ),
        ({"logprobs": 2}, "logprobs", "invalid_type"),
        ({"function_call": "auto"}, "function_call", "unsupported_parameter"),
    ],
)
def test_what_a_chat_cannot_ask_is_named(fields: dict[str, object], param: str, code: str) -> None:
    with pytest.raises(InvalidParameter) as refused:
        chat(**fields)
    assert (refused.value.param, refused.value.reason) == (param, code)


def test_a_runtime_refuses_the_features_it_does_not_honour() -> None:
    model = GenerativeModel(ModelSettings(name="m", implementation="x.M"))
    request = GenerationRequest(prompt="x", response_format=ResponseFormat("json_object"))
    with pytest.raises(InvalidParameter) as refused:
        refuse_unhonoured(request, frozenset({LOGPROBS}), model)
    assert refused.value.param == "response_format"
    assert "response_format json_object is not supported by model 'm'" in refused.value.message
    refuse_unhonoured(GenerationRequest(prompt="x", logprobs=2), frozenset({LOGPROBS}), model)
    with pytest.raises(InvalidParameter, match="priority"):
        list(model.answer_generation(generation_request(GenerationRequest(prompt="x", priority=1))))


def test_a_pieces_logprobs_travel_with_it() -> None:
    scored = [TokenLogprob("a", -0.5, [TopLogprob("a", -0.5), TopLogprob("b", -1.5)])]
    piece = read_piece(piece_response(TextPiece("a", logprobs=scored)))
    assert piece.logprobs == scored and piece.text == "a"
    assert read_piece(piece_response(TextPiece("a"))).logprobs is None


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        (HERMES, None, [("weather", {"city": "Paris"})]),
        ("Let me look. " + HERMES + HERMES, "Let me look.", [("weather", {"city": "Paris"})] * 2),
        ('<tool_call>{"name": "weather", "arguments": {}}', None, [("weather", {})]),  # left open
        (
            '{"name": "weather", "parameters": {"city": "Oslo"}}',
            None,
            [("weather", {"city": "Oslo"})],
        ),
        (
            '[{"name": "a", "arguments": {}}, {"name": "b", "arguments": "{}"}]',
            None,
            [("a", {}), ("b", {})],
        ),
        ('{"city": "Paris"}', '{"city": "Paris"}', []),  # JSON, but no call
        ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
        ("just words", "just words", []),
    ],
)
def test_tool_calls_are_parsed_from_the_text(
    text: str, content: str | None, calls: list[tuple[str, object]]
) -> None:
    found_content, found = parse_tool_calls(text)
    assert found_content == content
    assert [(call.name, json.loads(call.arguments)) for call in found] == calls
    assert all(call.id.startswith("call_") for call in found)


@pytest.mark.parametrize(
    ("pieces", "sent", "rest", "names"),
    [
        (
            ["Hel", "lo <tool", "_call>", '{"name": "f", ', '"arguments": {}}', "</tool_call>"],
            "Hello ",
            "",
            ["f"],
        ),
        (["a <to", "day"], "a <today", "", []),  # held while it could start a call, then sent
        (["  ", '{"name"', ': "f", "arguments": {"x": 1}}'], "", "", ["f"]),
        (['{"a": ', "1}"], "", '{"a": 1}', []),  # JSON that is no call: content at the end
        (["<tool_call>oops"], "", "<tool_call>oops", []),
    ],
)
def test_a_stream_holds_back_what_may_be_a_call(
    pieces: list[str], sent: str, rest: str, names: list[str]
) -> None:
    text = ToolCallText()
    assert "".join(text.add(piece) for piece in pieces) == sent
    content, calls = text.end()
    assert (content, [call.name for call in calls]) == (rest, names)


def test_logprobs_and_tool_calls_in_openais_shapes() -> None:
    token = TokenLogprob("é", -0.25, [TopLogprob("é", -0.25), TopLogprob("x", -2.0)])
    answer = Completion("m", chat=True)
    choice = answer.choice(0, logprobs=True, tools=True)
    choice.text, choice.logprobs, choice.finish_reason = [HERMES], [token], "stop"
    whole = orjson.loads(answer.whole([choice], Usage(1, 1)))["choices"][0]
    assert whole["finish_reason"] == "tool_calls"
    assert whole["message"]["content"] is None
    (call,) = whole["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    (scored,) = whole["logprobs"]["content"]
    assert scored == {
        "token": "é",
        "logprob": -0.25,
        "bytes": [195, 169],
        "top_logprobs": [
            {"token": "é", "logprob": -0.25, "bytes": [195, 169]},
            {"token": "x", "logprob": -2.0, "bytes": [120]},
        ],
    }
    text = Completion("m", chat=False)
    plain = text.choice(0, logprobs=True, offset=5)
    plain.text, plain.logprobs = ["ab"], [TokenLogprob("a", -1.0), TokenLogprob("b", -0.5)]
    logprobs = orjson.loads(text.whole([plain], Usage()))["choices"][0]["logprobs"]
    assert logprobs == {
        "tokens": ["a", "b"],
        "token_logprobs": [-1.0, -0.5],
        "top_logprobs": [{"a": -1.0}, {"b": -0.5}],
        "text_offset": [5, 6],
    }


def test_a_streamed_tool_call_is_one_delta_per_call() -> None:
    answer = Completion("m", chat=True)
    choice = Choice(0)
    _, calls = parse_tool_calls(HERMES)
    chunk = orjson.loads(answer.chunk(choice, "", None, first=True, usage=False, calls=calls)[6:])
    delta = chunk["choices"][0]["delta"]
    assert delta["role"] == "assistant" and "content" not in delta
    (call,) = delta["tool_calls"]
    assert call["index"] == 0 and call["id"].startswith("call_")
    assert call["function"]["name"] == "weather"


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    answer = Completion("m", chat=True, single_call=True)
    choice = answer.choice(0, tools=True)
    choice.text = [HERMES.replace("Paris", "Oslo") + HERMES]
    message = orjson.loads(answer.whole([choice], Usage()))["choices"][0]["message"]
    (call,) = message["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    streamed = ToolCallText(single=True)
    streamed.add(HERMES + HERMES)
    assert len(streamed.end()[1]) == 1
