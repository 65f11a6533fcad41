"""The vLLM runtime's own logic, without vLLM (a fake engine): OpenAI requests as
sampling arguments, the engine's arguments, streamed deltas as text pieces, an early
close that aborts the request in the engine, vllm_backend's tensors, and a Triton
vllm_backend folder read as the runtime's settings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from inferd.errors import ConfigurationError, InvalidParameter, InvalidRequest
from inferd.generation import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    ChatMessage,
    EmbeddingRequest,
    GenerationRequest,
    ResponseFormat,
    TextPiece,
    TokenLogprob,
    TopLogprob,
)
from inferd.runtimes import vllm_triton
from inferd.runtimes.vllm import VLLMModel, engine_arguments, sampling_arguments, token_logprobs
from inferd.triton.model_folder import read_model
from inferd.types import InferenceRequest, Tensor

from .runtime_helpers import model_settings

FIELDS = ("n", "max_tokens", "temperature", "top_p", "seed", "stop", "_eos_token_id")


def test_an_openai_request_becomes_sampling_arguments() -> None:
    request = GenerationRequest(prompt="hi", max_tokens=5, temperature=0, top_p=0.5, seed=3,
                                stop=["."])  # fmt: skip
    assert sampling_arguments(request) == {
        "n": 1, "max_tokens": 5, "temperature": 0, "top_p": 0.5, "seed": 3, "stop": ["."]
    }  # fmt: skip
    assert "stop" not in sampling_arguments(GenerationRequest(prompt="hi"))


def test_engine_arguments_default_the_model_to_the_uri(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    given = {"engine_args": {"dtype": "float32"}}
    assert engine_arguments(given, "/w", tmp_path)["model"] == "/w"
    relative = {"engine_args": {"model": "weights"}}
    assert engine_arguments(relative, None, tmp_path)["model"] == str(tmp_path / "weights")
    assert (
        engine_arguments({"engine_args": {"model": "org/lm"}}, None, tmp_path)["model"] == "org/lm"
    )
    with pytest.raises(ValueError, match="engine_args must be an object"):
        engine_arguments({"engine_args": []}, "/w", tmp_path)
    with pytest.raises(ValueError, match=r"parameters\.uri"):
        engine_arguments({}, None, tmp_path)


class FakeEngine:
    """AsyncLLM's generate and abort: three deltas of one token each."""

    def __init__(self) -> None:
        self.aborted: list[str] = []

    async def generate(
        self, prompt: Any, params: Any, request_id: str, **_: Any
    ) -> AsyncIterator[Any]:
        for index, word in enumerate(["a", " b", " c"]):
            done = index == 2
            choice = SimpleNamespace(
                text=word, token_ids=[index], finish_reason="length" if done else None
            )
            yield SimpleNamespace(outputs=[choice], finished=done, prompt_token_ids=[1, 2])

    async def abort(self, request_id: str | list[str]) -> None:
        self.aborted.append(str(request_id))


def fake_model(tmp_path: Path) -> tuple[VLLMModel, FakeEngine]:
    model = VLLMModel(model_settings(tmp_path, "inferd.runtimes.vllm.VLLMModel", {}))
    engine = FakeEngine()
    params = SimpleNamespace(RequestOutputKind=SimpleNamespace(DELTA=1))
    model._vllm = SimpleNamespace(  # type: ignore[assignment]
        SamplingParams=type("SamplingParams", (), {"__init__": lambda self, **kw: None,
                                                   "__struct_fields__": FIELDS}),
        sampling_params=params,
    )  # fmt: skip
    model._engine = engine
    model._ids = iter(range(100))  # type: ignore[assignment]
    model._running = set()
    return model, engine


async def collect(pieces: AsyncIterator[TextPiece]) -> list[TextPiece]:
    return [piece async for piece in pieces]


def test_deltas_become_pieces_and_the_last_counts_the_tokens(tmp_path: Path) -> None:
    model, engine = fake_model(tmp_path)
    pieces = asyncio.run(collect(model.generate(GenerationRequest(prompt="x"))))
    assert [p.text for p in pieces] == ["a", " b", " c"]
    assert pieces[-1] == TextPiece(" c", "length", prompt_tokens=2, completion_tokens=3)
    assert engine.aborted == []


def test_a_stream_closed_early_aborts_its_request(tmp_path: Path) -> None:
    model, engine = fake_model(tmp_path)

    async def first_then_leave() -> None:
        pieces = model.generate(GenerationRequest(prompt="x"))
        await anext(pieces)  # type: ignore[arg-type]
        await pieces.aclose()  # type: ignore[attr-defined]

    asyncio.run(first_then_leave())
    assert engine.aborted == ["inferd-0"]
    assert model._running == set()


def triton_request(**inputs: Any) -> InferenceRequest:
    tensors = []
    for name, value in inputs.items():
        data = np.array([value.encode() if isinstance(value, str) else value],
                        dtype=object if isinstance(value, str) else bool)  # fmt: skip
        tensors.append(Tensor(name, data))
    return InferenceRequest(tensors)


def test_vllm_backend_tensors_are_read_as_vllm_backend_reads_them() -> None:
    call = vllm_triton.read_call("m", triton_request(text_input="hi"), FIELDS, streamed=False)
    assert (call.prompt, call.stream, call.prepend_input) == ("hi", False, True)
    assert call.sampling == {"n": 1}
    sampling = json.dumps({"temperature": 0, "max_tokens": 4, "lora_name": "a"})
    streamed = triton_request(text_input="hi", stream=True, sampling_parameters=sampling,
                              return_finish_reason=True)  # fmt: skip
    call = vllm_triton.read_call("m", streamed, FIELDS, streamed=True)
    assert (call.stream, call.prepend_input, call.lora_name) == (True, False, "a")
    assert call.sampling == {"temperature": 0, "max_tokens": 4, "n": 1}
    assert call.outputs == {"finish_reason"}
    # The request's own parameters, where no sampling_parameters input is sent.
    request = triton_request(text_input="hi")
    request.parameters.update({"temperature": 0.5, "stream": False, "unrelated": 1})
    call = vllm_triton.read_call("m", request, FIELDS, streamed=False)
    assert call.sampling == {"temperature": 0.5, "n": 1}


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({}, "text_input"),
        ({"text_input": "x", "stream": True, "exclude_input_in_output": False}, "When streaming"),
        ({"text_input": "x", "sampling_parameters": "{"}, "not JSON"),
        ({"text_input": "x", "sampling_parameters": '{"bogus": 1}'}, "bogus"),
        ({"text_input": "x", "return_logprobs": True}, "return_logprobs"),
    ],
)
def test_bad_vllm_backend_requests_are_refused(inputs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        vllm_triton.read_call("m", triton_request(**inputs), FIELDS, streamed=True)


CONFIG = 'name: "llm"\nbackend: "vllm"\ninstance_group [ { count: 1 kind: KIND_MODEL } ]\n'


def test_a_vllm_backend_folder_is_served_by_the_vllm_runtime(tmp_path: Path) -> None:
    folder = tmp_path / "llm"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    (folder / "1" / "model.json").write_text(json.dumps({"model": "/w", "enforce_eager": True}))
    (folder / "1" / "multi_lora.json").write_text(json.dumps({"a": "/loras/a"}))
    [settings] = read_model(folder)
    assert settings.implementation == "inferd.runtimes.vllm.VLLMModel"
    extra = settings.extra
    assert extra["engine_args"] == {"model": "/w", "enforce_eager": True}
    assert extra["multi_lora"] == {"a": "/loras/a"}
    config = extra["triton_config"]
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert config["input"][0]["name"] == "text_input"
    assert "text_output" in [t["name"] for t in config["output"]]


def test_a_vllm_backend_folder_without_model_json_names_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "llm"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    with pytest.raises(ConfigurationError, match=r"model\.json"):
        read_model(folder)


def test_multi_lora_adapters_become_lora_requests_by_name(tmp_path: Path) -> None:
    made: list[tuple[str, int, str]] = []
    fake = SimpleNamespace(
        lora=SimpleNamespace(request=SimpleNamespace(LoRARequest=lambda *a: made.append(a) or a))
    )
    adapters = {"alpaca": "/loras/alpaca", "bactrian": "/loras/bactrian"}
    loras = vllm_triton.lora_requests(fake, adapters, {"enable_lora": "true"})  # type: ignore[arg-type]
    assert loras["bactrian"] == ("bactrian", 2, "/loras/bactrian")
    assert vllm_triton.lora_requests(fake, None, {}) == {}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="enable_lora"):
        vllm_triton.lora_requests(fake, adapters, {})  # type: ignore[arg-type]
    model, _ = fake_model(tmp_path)
    model._loras = loras
    assert model._lora("alpaca") == ("alpaca", 1, "/loras/alpaca")
    with pytest.raises(InvalidRequest, match=r"no LoRA adapter 'x'.*alpaca, bactrian"):
        model._lora("x")


def test_logprobs_and_response_format_become_sampling_arguments() -> None:
    asked = sampling_arguments(GenerationRequest(prompt="hi", logprobs=0))
    assert asked["logprobs"] == 0
    assert "logprobs" not in sampling_arguments(GenerationRequest(prompt="hi"))
    schema = {"type": "boolean"}
    form = ResponseFormat("json_schema", schema)
    request = GenerationRequest(prompt="hi", response_format=form)
    assert sampling_arguments(request)["structured_outputs"] == {"json": schema}
    request = GenerationRequest(prompt="hi", response_format=ResponseFormat("json_object"))
    assert sampling_arguments(request)["structured_outputs"] == {"json_object": True}


def entry(logprob: float, rank: int, text: str) -> SimpleNamespace:
    """vLLM's ``Logprob``."""
    return SimpleNamespace(logprob=logprob, rank=rank, decoded_token=text)


def test_vllm_logprobs_become_token_logprobs() -> None:
    # vLLM puts the chosen token first; with k=2 its dict holds the 2 likeliest too.
    likeliest = {7: entry(-0.1, 1, "a"), 8: entry(-2.0, 2, "b")}
    unlikely = {9: entry(-5.0, 40, "z"), 7: entry(-0.2, 1, "a"), 8: entry(-1.9, 2, "b")}
    assert token_logprobs([7, 9], [likeliest, unlikely], 2) == [
        TokenLogprob("a", -0.1, [TopLogprob("a", -0.1), TopLogprob("b", -2.0)]),
        TokenLogprob("z", -5.0, [TopLogprob("a", -0.2), TopLogprob("b", -1.9)]),
    ]
    # k=0: the chosen token's alone, even when it ranks first.
    assert token_logprobs([7], [{7: entry(-0.1, 1, "a")}], 0) == [TokenLogprob("a", -0.1, [])]


class ScoredEngine(FakeEngine):
    """Two deltas with log probabilities, the first of a token whose text is held back;
    the second ends on the end token (id 2). Records what ``generate`` got."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, prompt: Any, params: Any, request_id: str, **options: Any
    ) -> AsyncIterator[Any]:
        self.calls.append({"prompt": prompt, "params": params, **options})
        deltas = [("", [5], None), ("ab", [6, 2], "stop")]
        for text, ids, reason in deltas:
            scores = [{i: entry(-1.0 * i, 1, f"t{i}")} for i in ids]
            choice = SimpleNamespace(text=text, token_ids=ids, logprobs=scores,
                                     finish_reason=reason, stop_reason=None)  # fmt: skip
            yield SimpleNamespace(outputs=[choice], finished=reason is not None,
                                  prompt_token_ids=[1])  # fmt: skip


def scored_model(tmp_path: Path) -> tuple[VLLMModel, ScoredEngine]:
    model, _ = fake_model(tmp_path)
    engine = ScoredEngine()
    model._engine = engine
    return model, engine


def test_pieces_carry_their_tokens_logprobs_but_not_the_end_tokens(tmp_path: Path) -> None:
    model, _ = scored_model(tmp_path)
    pieces = asyncio.run(collect(model.generate(GenerationRequest(prompt="x", logprobs=0))))
    assert [p.logprobs for p in pieces] == [
        [TokenLogprob("t5", -5.0)],  # held-back text: its token is still sent
        [TokenLogprob("t6", -6.0)],  # the end token (2) is not listed
    ]
    assert pieces[-1].completion_tokens == 3
    plain = asyncio.run(collect(model.generate(GenerationRequest(prompt="x"))))
    assert [p.text for p in plain] == ["ab"] and plain[0].logprobs is None


def test_priority_needs_the_priority_scheduler(tmp_path: Path) -> None:
    model, engine = scored_model(tmp_path)
    with pytest.raises(InvalidParameter, match="scheduling_policy") as refused:
        asyncio.run(collect(model.generate(GenerationRequest(prompt="x", priority=1))))
    assert refused.value.param == "priority"
    model._priorities = True
    asyncio.run(collect(model.generate(GenerationRequest(prompt="x", priority=-3))))
    assert engine.calls[-1]["priority"] == -3


def test_structured_outputs_are_vllms_params(tmp_path: Path) -> None:
    model, _ = scored_model(tmp_path)
    made: list[dict[str, Any]] = []
    model._vllm.sampling_params.StructuredOutputsParams = lambda **kw: made.append(kw) or kw  # type: ignore[union-attr]
    form = ResponseFormat("json_object")
    asyncio.run(collect(model.generate(GenerationRequest(prompt="x", response_format=form))))
    assert made == [{"json_object": True}]


class Tokenizer:
    def __init__(self, template: str) -> None:
        self.chat_template = template
        self.templated: list[dict[str, Any]] = []

    def apply_chat_template(self, messages: Any, **options: Any) -> list[int]:
        self.templated.append({"messages": messages, **options})
        return [1, 2]


def test_tools_reach_the_chat_template_that_takes_them(tmp_path: Path) -> None:
    model, engine = scored_model(tmp_path)
    tools = [{"type": "function", "function": {"name": "f"}}]
    request = GenerationRequest(messages=[ChatMessage("user", "hi")], tools=tools)
    engine.get_tokenizer = lambda: Tokenizer("{{ messages }}")  # type: ignore[attr-defined]
    with pytest.raises(InvalidParameter, match="does not take tools") as refused:
        model._prompt(engine, request)
    assert refused.value.param == "tools"
    tokenizer = Tokenizer("{{ tools }}{{ messages }}")
    engine.get_tokenizer = lambda: tokenizer  # type: ignore[attr-defined]
    assert model._prompt(engine, request) == {"prompt_token_ids": [1, 2]}
    assert tokenizer.templated[0]["tools"] == tools
    assert tokenizer.templated[0]["messages"] == [{"role": "user", "content": "hi"}]


class PoolingEngine:
    """AsyncLLM's encode: each text's vector is its length and 1; too long a text, vLLM's
    ValueError."""

    def __init__(self) -> None:
        self.tasks: list[str] = []

    async def encode(self, prompt: str, params: Any, request_id: str) -> AsyncIterator[Any]:
        self.tasks.append(params.task)
        if len(prompt) > 10:
            raise ValueError("The prompt is longer than the maximum model length")
        vector = np.array([len(prompt), 1])
        data = SimpleNamespace(float=lambda: SimpleNamespace(numpy=lambda: vector))
        yield SimpleNamespace(
            outputs=SimpleNamespace(data=data), finished=True, prompt_token_ids=[0] * len(prompt)
        )


def pooling_model(tmp_path: Path) -> tuple[VLLMModel, PoolingEngine]:
    model, _ = fake_model(tmp_path)
    engine = PoolingEngine()
    model._engine = engine
    model._vllm.PoolingParams = lambda task: SimpleNamespace(task=task)  # type: ignore[union-attr]
    model._pooling = True
    return model, engine


def test_a_pooling_model_embeds_each_text_with_encode(tmp_path: Path) -> None:
    model, engine = pooling_model(tmp_path)
    embeddings = asyncio.run(model.embed(EmbeddingRequest(texts=["ab", "abcd"])))
    assert embeddings.vectors.tolist() == [[2, 1], [4, 1]]
    assert embeddings.vectors.dtype == np.float32
    assert embeddings.prompt_tokens == 6
    assert engine.tasks == ["embed", "embed"]
    assert model._running == set()
    assert model.openai_endpoints == (EMBEDDINGS,)
    model._pooling = False
    assert model.openai_endpoints == (COMPLETIONS, CHAT)


def test_a_text_the_engine_refuses_is_a_400(tmp_path: Path) -> None:
    model, _ = pooling_model(tmp_path)
    with pytest.raises(InvalidRequest, match="longer than the maximum model length"):
        asyncio.run(model.embed(EmbeddingRequest(texts=["ab", "a" * 11])))


def test_an_adapter_named_on_v1_reaches_the_engine_as_its_lora_request(tmp_path: Path) -> None:
    model, engine = fake_model(tmp_path)
    model._loras = {"flip": "flip's LoRARequest"}
    seen: list[Any] = []
    generate = engine.generate

    def recording(prompt: Any, params: Any, request_id: str, **options: Any) -> Any:
        seen.append(options["lora_request"])
        return generate(prompt, params, request_id)

    engine.generate = recording  # type: ignore[method-assign]
    assert model.openai_adapters == ("flip",)
    asyncio.run(collect(model.generate(GenerationRequest(prompt="x", adapter="flip"))))
    asyncio.run(collect(model.generate(GenerationRequest(prompt="x"))))
    assert seen == ["flip's LoRARequest", None]
    with pytest.raises(InvalidRequest, match="no LoRA adapter 'nope'"):
        asyncio.run(collect(model.generate(GenerationRequest(prompt="x", adapter="nope"))))
