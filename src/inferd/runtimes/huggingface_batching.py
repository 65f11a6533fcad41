"""Continuous batching for the Hugging Face runtime's OpenAI-compatible generations.

A ``text-generation`` model's concurrent completions share its forward passes:
transformers' own engine (``generation/continuous_batching``: a
``ContinuousBatchingManager`` with a paged key/value cache, run by one background
thread of the process that serves the model) takes every sequence, and sequences
join and leave its running batch at token boundaries. On by default;
``parameters.extra`` (all optional):

- ``continuous_batching`` (default true): false runs one sequence per call in the
  runtime's own decoding loop, each holding one of the model's ``threads_per_worker``
  slots, as before.
- ``max_running_sequences`` (default 32): most sequences in one forward pass; more
  wait in the engine, first come first served.
- ``kv_cache_tokens`` (default 8192): the key/value cache's size in tokens, every
  sequence's prompt and completion together (its memory: 2 x layers x width x
  dtype size per token; 72 KiB for a GPT-2-small in float32). A sequence waits
  while the cache has no room for it.

What the engine does not do, this module does: per-request sampling (the engine
samples with one setting for all), seeds, and the count of tokens it generated.
A logits processor of its own (:class:`PerRequestSampling`) leaves greedy rows to the
engine's argmax and, for a row that samples, draws its token from the softmax of the
logits over ``temperature``, cut to the ``top_p`` nucleus, with a uniform number from
that request's generator (seeded by ``seed``: reproducible), and makes it the row's
argmax. The same processor scores the tokens of a request that asks for
``logprobs``: the log-softmax of the row's raw logits, before it samples, and the
token the engine then picks (the row's argmax after sampling), queued for that
request (huggingface_scores.py). Stop strings and the text are the runtime's
(huggingface_generation.py), and a stream closed early cancels its sequence in the
engine (``cancel_request``): it leaves the batch at the next step and its cache
blocks are freed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from inferd import custom_metrics
from inferd.errors import ModelError, ModelNotReady
from inferd.generation import GenerationRequest
from inferd.runtimes.common import import_framework
from inferd.runtimes.huggingface_scores import TokenScores, scores_of
from inferd.settings import ModelSettings
from inferd.settings.runtime_names import HUGGINGFACE, MLSERVER_RUNTIMES

logger = logging.getLogger(__name__)

SAMPLING = "inferd_sampling"
"""The request's key (the engine's ``logit_processor_kwargs``) that holds its sampling."""
GENERATED_TOKENS = "hf_generated_tokens"
"""The counter of tokens the engine generated (custom metric, by model)."""
DEFAULTS = {"max_running_sequences": 32, "kv_cache_tokens": 8192}
PAGE_TOKENS = 32
"""Tokens per page of the paged cache: a sequence holds whole pages (vLLM's are 16)."""
PREFILL_TOKENS = 512
"""Most tokens of one forward pass (prompts longer are prefilled in parts)."""


def batches_continuously(settings: ModelSettings) -> bool:
    """Whether ``settings`` serve generations through the engine: a Hugging Face
    ``text-generation`` model whose OpenAI endpoints and continuous batching are on."""
    implementation = MLSERVER_RUNTIMES.get(settings.implementation or "", settings.implementation)
    extra = settings.extra
    return (
        implementation == HUGGINGFACE
        and extra.get("task") == "text-generation"
        and extra.get("openai", True) is not False
        and extra.get("continuous_batching", True) is not False
    )


@dataclass(frozen=True)
class EngineSettings:
    max_running_sequences: int
    kv_cache_tokens: int

    @classmethod
    def of(cls, name: str, extra: dict[str, Any]) -> EngineSettings:
        values = {}
        for key, default in DEFAULTS.items():
            value = extra.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"Model {name!r}: parameters.extra.{key} must be a whole number above 0, "
                    f"not {value!r}"
                )
            values[key] = value
        return cls(**values)


@dataclass
class RequestSampling:
    """How one request picks its tokens (``temperature`` 0 is greedy), and whether
    they are scored (``logprobs``: how many alternatives; None: not scored)."""

    temperature: float
    top_p: float
    generator: Any  # torch.Generator, seeded by the request's seed (None: greedy)
    logprobs: int | None = None
    # Each generated token's scores, in order: the engine's thread appends, the
    # request's reader takes them as its tokens come.
    scored: deque[TokenScores] = field(default_factory=deque)


class PerRequestSampling:
    """The engine's logits processing (the interface of transformers'
    ``ContinuousBatchingLogitsProcessorList``): each row sampled as its request asks,
    greedy rows left to the engine's argmax; it also counts the tokens generated."""

    tensors_required = 3  # per row: temperature, top_p, a uniform draw (float32 as int32)
    do_processing = True

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.generated = 0  # tokens the engine made, every request's (its thread only writes)
        self._sampling = False  # whether a row of the batch being prepared samples
        self._rows: list[RequestSampling | None] = []  # the batch's, by row of its logits

    def check_kwargs(self, kwargs: dict[str, Any]) -> None:
        unknown = set(kwargs) - {SAMPLING}
        if unknown:
            raise ValueError(f"Unknown generation arguments: {sorted(unknown)}")

    def fill_defaults(self, int32_tensor: Any) -> None:
        int32_tensor.zero_()  # temperature 0 (greedy), top_p and the draw unused

    def prepare_tensor_args(self, requests_in_batch: list[Any], arg_storage: Any) -> Any:
        rows = [r.state.logit_processor_kwargs.get(SAMPLING) for r in requests_in_batch]
        rows = [row for r, row in zip(requests_in_batch, rows, strict=True) if r.has_new_token]
        self.generated += len(rows)
        self._rows = rows
        self._sampling = any(row is not None and row.temperature > 0 for row in rows)
        if not self._sampling:
            return arg_storage
        torch = self.torch
        values = torch.zeros((3, len(rows)), dtype=torch.float32)
        for i, row in enumerate(rows):
            if row is not None and row.temperature > 0:
                draw = float(torch.rand((), generator=row.generator))
                values[:, i] = torch.tensor([row.temperature, row.top_p, draw])
        arg_storage[:3, : len(rows)] = values.view(torch.int32).to(arg_storage.device)
        return arg_storage

    def __call__(self, input_ids: Any, scores: Any, arguments: Any) -> Any:
        wanted = [(i, row) for i, row in enumerate(self._rows) if row and row.logprobs is not None]
        indices = [i for i, _ in wanted]
        raw = scores[indices].clone() if wanted else None  # before sampling changes them
        if self._sampling:
            scores = self._sample(scores, arguments)
        if raw is not None:
            picked = scores[indices].argmax(dim=-1)  # what the engine's argmax then picks
            ks = [row.logprobs or 0 for _, row in wanted]
            noted = scores_of(self.torch, raw, picked, ks)
            for (_, row), scored in zip(wanted, noted, strict=True):
                row.scored.append(scored)
        return scores

    def _sample(self, scores: Any, arguments: Any) -> Any:
        """Each sampling row's token drawn, made the row's only finite score."""
        torch = self.torch
        count = scores.size(0)
        temperature, top_p, draw = arguments[:3, :count].view(torch.float32)
        rows = (temperature > 0).nonzero().squeeze(1)
        logits = scores[rows] / temperature[rows].unsqueeze(1)
        probabilities, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True)
        before = torch.cumsum(probabilities, dim=-1) - probabilities
        probabilities[before > top_p[rows].unsqueeze(1)] = 0  # the first token always stays
        cumulative = torch.cumsum(probabilities, dim=-1)
        wanted = draw[rows].unsqueeze(1) * cumulative[:, -1:]
        picked = torch.searchsorted(cumulative, wanted).clamp(max=scores.size(1) - 1)
        tokens = order.gather(1, picked).squeeze(1)
        scores[rows] = float("-inf")
        scores[rows, tokens] = 0.0
        return scores


class ContinuousEngine:
    """One model's engine, started on first use in the process that serves it (never
    in a fork parent: it runs a thread), stopped by :meth:`stop`."""

    def __init__(self, name: str, model: Any, eos: int | None, settings: EngineSettings) -> None:
        self.name = name
        self.model = model
        self.eos = -1 if eos is None else eos
        self.settings = settings
        self._manager: Any = None
        self._sampling: PerRequestSampling | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._logged = 0  # generated tokens already logged as the custom metric

    def _started(self) -> Any:
        with self._lock:
            manager = self._manager
            if manager is None or not manager.is_running():
                manager = self._manager = self._start()
            return manager

    def _start(self) -> Any:
        torch = _import("torch")
        transformers = _import("transformers")
        config_module = _import("transformers.generation.configuration_utils")
        custom_metrics.register(GENERATED_TOKENS, "Tokens generated by the engine", "counter")
        generation = transformers.GenerationConfig(do_sample=False, eos_token_id=self.eos)
        running = self.settings.max_running_sequences
        pages = -(-self.settings.kv_cache_tokens // PAGE_TOKENS)
        batching = config_module.ContinuousBatchingConfig(
            page_size=PAGE_TOKENS,
            num_blocks=pages,
            max_batch_tokens=max(PREFILL_TOKENS, running),
            max_requests_per_batch=running,
            # The sampling processor decides on the host, step by step: no graphs, no
            # double-buffered steps.
            use_cuda_graph=False,
            use_async_batching=False,
            allow_block_sharing=False,
        )
        manager = self.model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=batching
        )
        self._sampling = PerRequestSampling(torch)
        manager.logit_processor = self._sampling
        manager.start()
        logger.info(
            "Model %r: continuous batching started (%d sequences at most, %d cache tokens)",
            self.name,
            running,
            pages * PAGE_TOKENS,
        )
        return manager

    def sampling(self, request: GenerationRequest) -> RequestSampling | None:
        if request.temperature == 0:
            if request.logprobs is None:
                return None  # the engine's own argmax, nothing to note
            return RequestSampling(0.0, 1.0, None, request.logprobs)
        torch = _import("torch")
        generator = torch.Generator()
        if request.seed is not None:
            generator.manual_seed(request.seed)
        else:
            generator.seed()
        temperature, top_p = float(request.temperature), float(request.top_p)
        return RequestSampling(temperature, top_p, generator, request.logprobs)

    async def tokens(
        self, prompt: list[int], limit: int, request: GenerationRequest
    ) -> AsyncIterator[tuple[int, TokenScores | None]]:
        """The sequence's tokens as the engine makes them (scored if ``logprobs``
        asks); closing this early cancels the sequence in the engine."""
        manager = await asyncio.to_thread(self._started)  # the first start builds the cache
        request_id = f"inferd-{next(self._ids)}"
        outputs: asyncio.Queue[Any] = asyncio.Queue()
        manager.register_result_handler(request_id, outputs.put_nowait)
        sampling = self.sampling(request)
        scored = sampling.scored if sampling is not None and sampling.logprobs is not None else None
        added = manager.add_request(
            prompt,
            request_id=request_id,
            max_new_tokens=limit,
            streaming=True,
            eos_token_id=self.eos,
            **{SAMPLING: sampling},
        )
        if added is None:
            self._forget(manager, request_id)
            raise ModelNotReady(f"Model {self.name!r}: its generation engine has stopped")
        sent, finished = 0, False
        try:
            while not finished:
                output = await outputs.get()
                self._log_generated()
                if output.error is not None:
                    raise ModelError(f"Model {self.name!r} failed to generate: {output.error}")
                finished = output.is_finished()
                for token in output.generated_tokens[sent:]:
                    yield int(token), (scored.popleft() if scored else None)
                sent = len(output.generated_tokens)
        finally:
            if not finished:  # the client left, or a stop string ended it: free its place
                manager.cancel_request(request_id)
                self._forget(manager, request_id)

    def _log_generated(self) -> None:
        """Log the tokens the engine generated since the last log (every sequence's:
        a sequence cancelled but still running would count here)."""
        sampling = self._sampling
        if sampling is not None and sampling.generated > self._logged:
            total = sampling.generated
            custom_metrics.log(**{GENERATED_TOKENS: total - self._logged})
            self._logged = total

    @staticmethod
    def _forget(manager: Any, request_id: str) -> None:
        router = manager.output_router
        with router._lock:  # what register_result_handler's own cleanup takes
            router.result_handlers.pop(request_id, None)

    def stop(self) -> None:
        """Stop the engine's thread (what runs is failed) and give its cache back."""
        with self._lock:
            manager, self._manager = self._manager, None
        if manager is not None and manager.is_running():
            manager.stop(block=True, timeout=10, hard_stop=True)


def _import(module: str) -> ModuleType:
    return import_framework(module, "HuggingFaceModel", "huggingface")
