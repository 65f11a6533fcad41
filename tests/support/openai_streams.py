"""What the generative e2e modules (the Hugging Face runtime's batching, the vLLM
runtime) share: an ``openai`` client of a server, transformers' own greedy answer to
compare with, and a streamed completion's chunks with their arrival times."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.common.serverproc import ServerProcess


def client_of(server: ServerProcess) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0, timeout=120)


def greedy(reference: Any, prompt: str, max_tokens: int) -> str:
    """transformers' ``generate()`` alone, greedy: ``reference`` is (tokenizer, model)."""
    tokenizer, model = reference
    encoded = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**encoded, max_new_tokens=max_tokens, do_sample=False)
    text: str = tokenizer.decode(out[0][encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    return text


def streamed(client: Any, model: str, prompt: str, **options: Any) -> list[tuple[float, str]]:
    """Each content chunk's arrival time and text."""
    chunks = []
    stream = client.completions.create(model=model, prompt=prompt, stream=True, **options)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            chunks.append((time.monotonic(), chunk.choices[0].text))
    return chunks
