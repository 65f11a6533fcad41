"""A custom runtime behind the OpenAI-compatible endpoints (inferd/generation.py),
copied into its model's folder by tests/e2e/test_openai_*.py.

``Words`` (and ``AsyncWords``, shaped as an async engine) repeats the prompt (or the
last message) word by word, ``extra.delay`` seconds apart, and embeds each text as
[characters, words]. A stream of ``Words`` closed before its end creates the file
``extra.closed_marker`` names, so a test can see the generation stop when its client
left. ``Words`` takes ``tools`` (its echo of a call, parsed by the server, is how the
tests see tool calls end to end); neither takes ``logprobs``. ``AsyncWords`` has an
adapter, ``shouting`` (GenerationRequest.adapter): the words in capitals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np

from inferd.generation import (
    TOOLS,
    AsyncGenerativeModel,
    EmbeddingRequest,
    Embeddings,
    GenerationRequest,
    GenerativeModel,
    TextPiece,
)


class Words(GenerativeModel):
    generation_features = frozenset({TOOLS})

    def generate(self, request: GenerationRequest) -> Iterator[TextPiece]:
        source = request.prompt if request.messages is None else request.messages[-1].content
        words = (source or "").split()
        limit = request.max_tokens or len(words)
        delay = float(self.settings.extra.get("delay", 0))
        finished = False
        try:
            for index, word in enumerate(words[:limit]):
                if delay:
                    time.sleep(delay)
                yield TextPiece(word if index == 0 else " " + word)
            reason = "length" if limit < len(words) else "stop"
            finished = True
            yield TextPiece("", reason, len(words), min(limit, len(words)))
        finally:
            marker = self.settings.extra.get("closed_marker")
            if not finished and marker:
                Path(marker).touch()

    def embed(self, request: EmbeddingRequest) -> Embeddings:
        rows = [[len(text), len(text.split())] for text in request.texts]
        tokens = sum(len(text.split()) for text in request.texts)
        return Embeddings(np.array(rows, dtype=np.float32), tokens)


class AsyncWords(AsyncGenerativeModel):
    openai_adapters = ("shouting",)  # a model of its own on /v1: the words in capitals

    async def generate(self, request: GenerationRequest) -> AsyncIterator[TextPiece]:
        shouts = request.adapter == "shouting"
        words = [w.upper() if shouts else w for w in (request.prompt or "").split()]
        delay = float(self.settings.extra.get("delay", 0))
        for index, word in enumerate(words):
            await asyncio.sleep(delay)
            yield TextPiece(word if index == 0 else " " + word)
        yield TextPiece("", "stop", len(words), len(words))

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        return Embeddings(np.array([[len(t)] for t in request.texts], dtype=np.float32), 0)
