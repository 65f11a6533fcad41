"""HuggingFaceModel.plain_stream (what predict_stream steps in a thread): a tiny random GPT-2
streams its text piece by piece."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidRequest, ModelNotReady
from inferd.observability.stats import ModelStatsTable
from inferd.runtimes.huggingface import HuggingFaceModel
from inferd.serving.dataplane import DataPlane
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository
from inferd.settings import ServerSettings
from inferd.types import InferenceResponse, Tensor
from inferd.workers.inprocess import InProcessPool
from tests.frameworks import TINY_VOCABULARY, require_module, save_tiny_text_classifier
from tests.support.polling import wait_for_async

from .runtime_helpers import infer, load, model_settings, request

transformers = require_module("transformers", "huggingface")
torch = require_module("torch", "huggingface")
tokenizers = require_module("tokenizers", "huggingface")

IMPLEMENTATION = "inferd.runtimes.huggingface.HuggingFaceModel"
GENERATION = {"task": "text-generation"}
PROMPT = "the movie"
GENERATE_THREAD = "inferd-generate-"


def save_tiny_gpt2(folder: Path) -> None:
    """A 2-layer GPT-2 with random weights and a word-level tokenizer on a small
    vocabulary, written as save_pretrained does: no Hub. No end token, so that
    generation runs to max_new_tokens unless stopped."""
    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", *TINY_VOCABULARY]
    backend = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="[UNK]")
    )
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]"
    )
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=1100,  # room to run far past the point where a closed stream stops
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        initializer_range=0.5,  # varied words, not one word over and over
    )
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hf-stream")
    save_tiny_gpt2(folder / "tiny-gpt2")
    save_tiny_text_classifier(folder / "tiny-bert")
    return folder


def serve(folder: Path, uri: str = "./tiny-gpt2", extra: dict[str, Any] = GENERATION) -> Any:
    return model_settings(folder, IMPLEMENTATION, {"uri": uri, "extra": extra})


@pytest.fixture(scope="module")
def model(folder: Path) -> HuggingFaceModel:
    return load(HuggingFaceModel, serve(folder))


@pytest.fixture
def forward_passes(model: HuggingFaceModel) -> Iterator[list[int]]:
    """One entry per forward pass of the model: a token generated (or the prompt read)."""
    passes: list[int] = []
    hook = model._pipeline.model.register_forward_hook(lambda *_: passes.append(1))
    yield passes
    hook.remove()


def prompt(*texts: str, **generation: Any) -> list[Tensor]:
    inputs = [Tensor("args", np.array([text.encode() for text in texts], dtype=object))]
    inputs += [Tensor(name, np.array([value])) for name, value in generation.items()]
    return inputs


def piece(response: InferenceResponse) -> str:
    (output,) = response.outputs
    assert (output.name, output.datatype, output.shape) == ("output", "BYTES", (1,))
    assert output.parameters == {"content_type": "str"}
    text: bytes = output.data[0]
    return text.decode()


def generator_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(GENERATE_THREAD)]


def test_pieces_arrive_one_by_one_and_join_into_what_predict_generates(
    model: HuggingFaceModel,
) -> None:
    greedy = {"max_new_tokens": 16, "do_sample": False}
    responses = list(model.plain_stream(request(*prompt(PROMPT, **greedy))))
    pieces = [piece(response) for response in responses]
    assert len(pieces) >= 4, pieces
    assert all(pieces), "every response holds some text"
    assert {(r.id, r.model_name) for r in responses} == {("req-1", "model")}
    outputs = infer(model, *prompt(PROMPT, **greedy, return_full_text=False))
    (generated,) = json.loads(outputs["output"][0, 0])  # one row, one sequence
    assert "".join(pieces) == generated["generated_text"]
    assert not generator_threads()


def test_closing_the_stream_stops_generation(
    model: HuggingFaceModel, forward_passes: list[int]
) -> None:
    stream = model.plain_stream(request(*prompt(PROMPT, max_new_tokens=1000, do_sample=False)))
    first, second = next(stream), next(stream)
    assert piece(first) and piece(second)
    stream.close()  # the client left
    assert not generator_threads(), "close() waits for the generate thread"
    passes = len(forward_passes)
    assert passes < 100, f"{passes} tokens generated of 1000: the stream did not stop it"


def test_a_failure_mid_stream_reaches_the_reader_after_the_pieces_before_it(
    model: HuggingFaceModel,
) -> None:
    def fail_at_the_sixth_token(*_: Any) -> None:
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("device lost")

    calls: list[int] = []
    hook = model._pipeline.model.register_forward_hook(fail_at_the_sixth_token)
    try:
        stream = model.plain_stream(request(*prompt(PROMPT, max_new_tokens=50, do_sample=False)))
        pieces = []
        with pytest.raises(RuntimeError, match="device lost"):  # the pool makes it a 500
            for response in stream:
                pieces.append(piece(response))
    finally:
        hook.remove()
    assert 1 <= len(pieces) <= 5
    assert not generator_threads()


@pytest.mark.anyio
async def test_through_the_dataplane_a_closed_stream_stops_and_gives_its_slot_back(
    folder: Path,
) -> None:
    """As the server runs it (in-process, one slot): a whole stream, then one closed
    after two pieces; the model's only slot is free again for a predict."""
    pool = InProcessPool()
    registry = Registry(pool, ModelStatsTable())
    dataplane = DataPlane(ServerSettings(), registry, ModelRepository(folder))
    await registry.load("model", [serve(folder)])
    greedy = {"max_new_tokens": 16, "do_sample": False}
    full = request(*prompt(PROMPT, **greedy))
    stream = dataplane.infer_stream("model", None, full)
    whole = [piece(response) async for ready in stream for response in ready]
    assert len(whole) >= 4

    passes: list[int] = []
    model = pool._loaded(1).model  # the registry's first instance
    assert isinstance(model, HuggingFaceModel)
    model._pipeline.model.register_forward_hook(lambda *_: passes.append(1))
    long = request(*prompt(PROMPT, max_new_tokens=1000, do_sample=False))
    pieces: list[str] = []
    async with contextlib.aclosing(dataplane.infer_stream("model", None, long)) as closing:
        while len(pieces) < 2:
            pieces += [piece(response) for response in await anext(closing)]
    assert pieces[:2] == whole[:2]
    # Closing it stops its thread.
    await wait_for_async(lambda: not generator_threads(), "the generate thread to stop")
    assert len(passes) < 100, f"{len(passes)} tokens generated of 1000"

    answer = await asyncio.wait_for(dataplane.infer("model", None, request(*prompt(PROMPT))), 10)
    assert answer.outputs[0].name == "output"
    await registry.close()
    await pool.close()


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([], r"send exactly one text in input 'args' \(got no input 'args'\)"),
        (prompt("one", "two"), r"exactly one text in input 'args' \(got 2 elements\)"),
        ([Tensor("args", np.array([7]))], r"\(got int64, not a text\)"),
        (prompt(PROMPT, num_beams=2), r"cannot stream with num_beams 2: a stream carries one"),
        (prompt(PROMPT, num_return_sequences=3), r"cannot stream with num_return_sequences 3"),
        # refused by generate(), in its thread: the reader gets it
        (
            prompt(PROMPT, max_new_tokens=-3),
            r"inputs \('args', 'max_new_tokens'\): `max_new_tokens` must be greater than 0",
        ),
    ],
)
def test_requests_that_cannot_stream_are_a_400(
    model: HuggingFaceModel, inputs: list[Tensor], message: str
) -> None:
    stream = model.plain_stream(request(*inputs))
    with pytest.raises(InvalidRequest, match=message):
        next(stream)
    assert not generator_threads()


def test_a_task_that_cannot_stream_is_a_400(folder: Path, model: HuggingFaceModel) -> None:
    classifier = load(
        HuggingFaceModel, serve(folder, "./tiny-bert", {"task": "text-classification"})
    )
    # The streaming endpoints give a classifier predict's one answer; a generator streams.
    assert not classifier.streams and model.streams
    assert infer(classifier, *prompt("good"))["output"].shape == (1, 1), "predict still works"
    with pytest.raises(
        InvalidRequest, match=r"cannot stream: its task is 'text-classification', and only"
    ):
        next(classifier.plain_stream(request(*prompt("good"))))


def test_an_unloaded_model_does_not_stream(folder: Path) -> None:
    unloaded = HuggingFaceModel(serve(folder))
    with pytest.raises(ModelNotReady):
        next(unloaded.plain_stream(request(*prompt(PROMPT))))
