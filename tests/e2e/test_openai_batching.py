"""Continuous batching in the Hugging Face runtime (runtimes/huggingface_batching.py),
with the official ``openai`` client against a real server, with 1 and 3 protocol
processes (with 3 the model runs once, in the model host): concurrent greedy streams
are transformers' ``generate()``'s, streams interleave, a client that leaves stops its
sequence in the engine, seeded sampling is reproducible, bad input is a 400."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.frameworks import require_module
from tests.support.models import write_model_folder
from tests.support.openai_streams import client_of, greedy, streamed
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server
from tests.support.tiny_llm import save_tiny_chat_lm

openai = require_module("openai", "test")
transformers = require_module("transformers", "huggingface")
torch = require_module("torch", "huggingface")

HF = "inferd.runtimes.huggingface.HuggingFaceModel"
LM, OFF = "lm", "lm-off"
PROMPTS = ["the movie", "the film was", "a plot", "the acting is", "very good", "not the"]
GENERATED = "hf_generated_tokens_total"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("batching")
    weights = repository / "weights"
    # A long context and no end token: a stream runs as long as max_tokens asks.
    save_tiny_chat_lm(weights, positions=4096, endless=True)
    extra = {"task": "text-generation", "max_running_sequences": 16}
    parameters = {"uri": str(weights), "extra": extra}
    write_model_folder(repository, LM, HF, max_concurrent_streams=16, parameters=parameters)
    off = {"task": "text-generation", "continuous_batching": False}
    write_model_folder(repository, OFF, HF, parameters={"uri": str(weights), "extra": off})
    return repository


@pytest.fixture(scope="module", params=[1, 3], ids=["1-process", "3-processes"])
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[ServerProcess]:
    with start_server(repository, {"protocol_processes": request.param}) as process:
        yield process


@pytest.fixture(scope="module")
def reference(repository: Path) -> Any:
    weights = str(repository / "weights")
    return transformers.AutoTokenizer.from_pretrained(weights), (
        transformers.AutoModelForCausalLM.from_pretrained(weights).eval()
    )


def concurrently(count: int, call: Any) -> list[Any]:
    """``call(i)`` for each i, all started together."""
    start = threading.Barrier(count)

    def run(index: int) -> Any:
        start.wait()
        return call(index)

    with ThreadPoolExecutor(count) as threads:
        return list(threads.map(run, range(count)))


def test_concurrent_greedy_streams_are_generates_own(server: ServerProcess, reference: Any) -> None:
    lengths = [8, 30, 17, 45, 23, 12]  # sequences leave the batch at different steps

    def one(index: int) -> str:
        with client_of(server) as client:
            chunks = streamed(client, LM, PROMPTS[index], max_tokens=lengths[index], temperature=0)
        return "".join(text for _, text in chunks)

    texts = concurrently(len(PROMPTS), one)
    for prompt, length, text in zip(PROMPTS, lengths, texts, strict=True):
        assert text == greedy(reference, prompt, length), prompt


# Long: it reads interleaving from client-side arrival times, which a busy 2-core
# machine skews (a client thread may send only after another stream ended); the
# engine's interleaving is checked in CI by the greedy-equality and bound tests.
# Each stream is long (the tiny LM makes 64 tokens for 16 streams in well under a
# second): the last client's request must arrive before the first stream ends.
@pytest.mark.long
def test_sixteen_streams_interleave(server: ServerProcess) -> None:
    def one(index: int) -> list[tuple[float, str]]:
        with client_of(server) as client:
            prompt = PROMPTS[index % len(PROMPTS)]
            return streamed(client, LM, prompt, max_tokens=400, temperature=0)

    streams = concurrently(16, one)
    assert all(len(chunks) > 32 for chunks in streams)
    first_end = min(chunks[-1][0] for chunks in streams)
    # One at a time, the second stream would get its first token after the first ended.
    late = [i for i, chunks in enumerate(streams) if chunks[0][0] >= first_end]
    assert not late, f"streams {late} got no token before another stream had ended"
    # And each keeps getting tokens while the others run, not all at its end.
    for chunks in streams:
        assert sum(1 for at, _ in chunks if at < first_end) >= 4


def test_a_client_that_leaves_stops_its_sequence(server: ServerProcess) -> None:
    def generated() -> float:
        text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
        values = [
            float(line.rpartition(" ")[2])
            for line in text.splitlines()
            if line.startswith(GENERATED) and f'model_name="{LM}"' in line
        ]
        return sum(values)

    with client_of(server) as client:
        client.completions.create(model=LM, prompt="a", max_tokens=1, temperature=0)
        before = generated()
        stream = client.completions.create(
            model=LM, prompt="the movie", max_tokens=4000, temperature=0, stream=True
        )
        for _ in zip(range(3), stream, strict=False):
            pass
        stream.close()  # the client leaves after 3 of its 4000 tokens

        # Each short completion ships the engine's count: once a short one adds only its
        # own 4 tokens, nothing else runs in the engine.
        def settled() -> bool:
            start = generated()
            client.completions.create(model=LM, prompt="a", max_tokens=4, temperature=0)
            return generated() - start == 4

        wait_for(settled, "the engine to stop generating", timeout=30)
    assert generated() - before < 2000  # it stopped, far from its 4000 tokens


def test_seeded_sampling_is_reproducible_beside_other_streams(server: ServerProcess) -> None:
    sampled = {"max_tokens": 20, "temperature": 0.9, "top_p": 0.8}

    def one(index: int) -> str:
        with client_of(server) as client:
            seed = 7 if index < 3 else 8 if index < 5 else None
            options = {"seed": seed} if seed is not None else {}
            if index == 5:
                return "".join(t for _, t in streamed(client, LM, "a", max_tokens=40))
            chunks = streamed(client, LM, "the movie", **sampled, **options)
        return "".join(text for _, text in chunks)

    texts = concurrently(6, one)
    assert texts[0] == texts[1] == texts[2]
    assert texts[3] == texts[4] != texts[0]


def test_concurrent_logprobs_are_each_sequences_own(server: ServerProcess) -> None:
    """The engine scores the rows of a shared forward pass: each stream gets its own
    tokens' scores (as the runtime's own loop gives them alone), beside sampling rows
    and rows that ask for none, across processes too (a piece's scores travel as text)."""
    lengths = [9, 4, 14, 6, 10, 7]

    def scored(model: str, index: int, **options: Any) -> list[tuple[str, float]]:
        with client_of(server) as client:
            stream = client.completions.create(
                model=model,
                prompt=PROMPTS[index],
                max_tokens=lengths[index],
                stream=True,
                **options,
            )
            return [
                (token, logprob)
                for chunk in stream
                if chunk.choices and chunk.choices[0].logprobs
                for token, logprob in zip(
                    chunk.choices[0].logprobs.tokens,
                    chunk.choices[0].logprobs.token_logprobs,
                    strict=True,
                )
            ]

    def one(index: int) -> list[tuple[str, float]]:
        if index % 3 == 2:  # beside them: a sampling row, and a row that asks for none
            return scored(LM, index, seed=index, logprobs=0 if index == 2 else None)
        return scored(LM, index, temperature=0, logprobs=1)

    found = concurrently(len(PROMPTS), one)
    for index, tokens in enumerate(found):
        if index % 3 == 2:
            assert len(tokens) == (lengths[index] if index == 2 else 0)
            continue
        alone = scored(OFF, index, temperature=0, logprobs=1)
        assert [token for token, _ in tokens] == [token for token, _ in alone]
        assert [lp for _, lp in tokens] == pytest.approx([lp for _, lp in alone], abs=1e-3)


def test_off_is_the_runtimes_own_loop(server: ServerProcess, reference: Any) -> None:
    with client_of(server) as client:
        answer = client.completions.create(model=OFF, prompt="a plot", max_tokens=12, temperature=0)
        seeded = [
            client.completions.create(model=OFF, prompt="a", max_tokens=8, seed=3).choices[0].text
            for _ in range(2)
        ]
    assert answer.choices[0].text == greedy(reference, "a plot", 12)
    assert seeded[0] == seeded[1]


def test_past_the_streams_bound_a_completion_is_a_429_with_retry_after(
    server: ServerProcess,
) -> None:
    """Streams are opened until one is refused: at most max_concurrent_streams (16) are
    admitted (fewer where an earlier test's stream is still closing in the engine),
    and the one past them is a 429 with Retry-After."""
    clients = [client_of(server) for _ in range(17)]
    streams = []
    try:
        with pytest.raises(openai.RateLimitError) as refused:
            for client in clients:  # the 17th is past the bound, if none came before
                stream = client.completions.create(
                    model=LM, prompt="a", max_tokens=4000, temperature=0, stream=True
                )
                next(iter(stream))
                streams.append(stream)
        assert refused.value.response.headers["retry-after"]
        assert 1 <= len(streams) <= 16
    finally:
        for stream in streams:
            stream.close()
        for client in clients:
            client.close()


def test_bad_input_is_a_400_in_openais_shape(server: ServerProcess) -> None:
    with client_of(server) as client:
        with pytest.raises(openai.BadRequestError) as long:
            client.completions.create(model=LM, prompt="a " * 4100, max_tokens=4, stream=True)
        assert (long.value.param, long.value.code) == ("prompt", "context_length_exceeded")
        with pytest.raises(openai.BadRequestError) as chat:
            client.chat.completions.create(model=LM, messages=[], max_tokens=4)
        assert chat.value.param == "messages"
