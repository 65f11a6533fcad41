"""vLLM as a runtime: its in-process engine (``AsyncLLM``) behind the OpenAI-compatible
endpoints, and Triton's vllm_backend model folders served unchanged.

``model-settings.json``::

    {"name": "llm", "implementation": "inferd.runtimes.vllm.VLLMModel",
     "parameters": {"uri": "./weights",
                    "extra": {"engine_args": {"dtype": "float32", "max_model_len": 2048}}}}

``parameters.extra.engine_args`` are vLLM's engine arguments (``AsyncEngineArgs``,
what ``vllm serve`` takes as flags, snake_case); ``model`` defaults to
``parameters.uri`` (a folder ``save_pretrained`` wrote, or a Hub id), a relative
path is read from the model's folder. A Triton vllm_backend folder (``config.pbtxt``
with ``backend: "vllm"``, the engine arguments in ``<version>/model.json``) becomes
these settings (triton/model_folder.py).

One engine per server: the model runs in the model host under several protocol
processes (host/placement.py), never a copy per process. vLLM schedules
and batches every stream itself: a generation holds no slot of the model (up to
``max_concurrent_streams``), and a stream closed early (the client left, its
deadline passed, the server drains) aborts its request in the engine, whose
sequence leaves the batch at the next step. The engine's figures are inferd
metrics (runtimes/vllm_metrics.py).

OpenAI requests map to vLLM's ``SamplingParams`` (:func:`sampling_arguments`):
``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``, ``logprobs`` (vLLM's
``logprobs``: its default mode gives the raw logits' log-softmax, as the Hugging Face
runtime), ``response_format`` (vLLM's structured outputs); ``n`` choices are ``n``
requests, seeded ``seed + i`` (server/openai/). Chat messages and ``tools`` go
through the tokenizer's chat template (the server parses the calls). ``priority``
needs an engine started with ``scheduling_policy: "priority"`` (else vLLM would
ignore it: a 400). What the engine refuses (a prompt longer than the context, a bad
value) is a 400 naming vLLM's reason.

A pooling model (``engine_args`` ``runner: "pooling"``, with ``convert: "embed"`` for
a causal LM) answers ``/v1/embeddings`` instead: each text one ``AsyncLLM.encode``
request (task ``embed``), the texts of a request batched by the engine, the vector
the model's pooler makes (vLLM's default for it: last token or mean, normalized).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from inferd.errors import InvalidParameter, InvalidRequest, ModelError, ModelNotReady
from inferd.generation import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    LOGPROBS,
    PRIORITY,
    RESPONSE_FORMAT,
    TOOLS,
    AsyncGenerativeModel,
    EmbeddingRequest,
    Embeddings,
    GenerationRequest,
    TextPiece,
    is_generation_call,
    piece_response,
    read_generation,
)
from inferd.runtimes import vllm_metrics, vllm_triton
from inferd.runtimes.common import import_framework, warn_unread_extra
from inferd.runtimes.huggingface_chat import refuse_unseen_tools, template_message
from inferd.runtimes.vllm_sampling import (
    FINISH_REASONS,
    STRUCTURED,
    sampling_arguments,
    token_logprobs,
)
from inferd.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

EXTRA = "vllm"
ENGINE_ARGS = "engine_args"
MULTI_LORA = "multi_lora"
"""``parameters.extra`` key: LoRA adapters by name (vllm_backend's multi_lora.json)."""
KNOWN_SETTINGS = (ENGINE_ARGS, MULTI_LORA, vllm_triton.CONFIG_KEY)


def engine_arguments(extra: dict[str, Any], uri: str | Path | None, folder: Path) -> dict[str, Any]:
    """The engine's arguments: ``extra.engine_args`` with ``model`` defaulting to the
    model's ``uri``, a relative path read from the model's folder."""
    given = extra.get(ENGINE_ARGS, {})
    if not isinstance(given, dict):
        raise ValueError(
            f"parameters.extra.{ENGINE_ARGS} must be an object of vLLM's engine "
            f"arguments, not {type(given).__name__}"
        )
    arguments = dict(given)
    model = arguments.get("model") or uri
    if not model:
        raise ValueError(
            f"set parameters.uri or parameters.extra.{ENGINE_ARGS}.model to the "
            "model's folder or Hub id"
        )
    path = Path(str(model))
    if not path.is_absolute() and (folder / path).exists():
        model = str(folder / path)
    arguments["model"] = str(model)
    # Requests are logged by inferd; the engine's statistics feed the metrics.
    arguments.setdefault("enable_log_requests", False)
    return arguments


class VLLMModel(AsyncGenerativeModel):
    """vLLM's ``AsyncLLM``, one per model, answering the OpenAI endpoints and, for a
    Triton vllm_backend folder, Triton's ``/generate`` and ``/generate_stream``."""

    generation_features = frozenset({LOGPROBS, TOOLS, RESPONSE_FORMAT, PRIORITY})
    _engine: Any = None
    _vllm: ModuleType | None = None
    _loras: dict[str, Any] | None = None
    _priorities = False  # started with scheduling_policy "priority"
    _pooling = False  # started with runner "pooling": embeds, never generates

    async def load(self) -> bool:
        extra = self.settings.extra
        warn_unread_extra(self, KNOWN_SETTINGS)
        arguments = engine_arguments(extra, self.settings.uri, self.settings.folder)
        self._vllm = await asyncio.to_thread(_import, "vllm")
        if extra.get(MULTI_LORA):  # a submodule vllm's package does not import itself
            await asyncio.to_thread(_import, "vllm.lora.request")
        self._loras = vllm_triton.lora_requests(self._vllm, extra.get(MULTI_LORA), arguments)
        # Starting the engine takes seconds to minutes (its process, the weights, warm-up):
        # in a thread. The engine's output task starts with its first request, on the
        # loop that serves.
        self._engine = await asyncio.to_thread(self._start, arguments)
        self._ids = itertools.count()
        self._running: set[str] = set()
        # vLLM's first-come scheduler takes a priority and ignores it: honoured only here.
        self._priorities = arguments.get("scheduling_policy") == "priority"
        self._pooling = self._engine.model_config.runner_type == "pooling"
        return True

    @property
    def openai_endpoints(self) -> tuple[str, ...]:
        """A pooling model embeds, a generating one completes: what its engine runs."""
        return (EMBEDDINGS,) if self._pooling else (COMPLETIONS, CHAT)

    @property
    def openai_adapters(self) -> tuple[str, ...]:
        """multi_lora's adapters: each a model of its own name on /v1."""
        return tuple(self._loras or ())

    def _start(self, arguments: dict[str, Any]) -> Any:
        engine_args = _import("vllm.engine.arg_utils").AsyncEngineArgs(**arguments)
        async_llm = _import("vllm.v1.engine.async_llm").AsyncLLM
        version = self.settings.version or ""
        factory = vllm_metrics.stat_logger_factory(self.name, version)
        engine = async_llm.from_engine_args(engine_args, stat_loggers=[factory])
        logger.info("Model %r: vLLM's engine started on %s", self.name, arguments["model"])
        return engine

    async def unload(self) -> None:
        engine, self._engine = self._engine, None
        if engine is None:
            return
        if self._running:  # the server drains: what still runs stops in the engine now
            await engine.abort(list(self._running))
        await asyncio.to_thread(engine.shutdown)

    def _started(self) -> Any:
        if self._engine is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        return self._engine

    async def generate(self, request: GenerationRequest) -> AsyncIterator[TextPiece]:
        engine = self._started()
        if request.priority and not self._priorities:
            raise InvalidParameter(
                f"Unsupported parameter: priority is not supported by model {self.name!r} "
                "(VLLMModel): its engine schedules first come first served (start it with "
                'engine_args scheduling_policy "priority").',
                PRIORITY,
                "unsupported_parameter",
            )
        prompt = self._prompt(engine, request)
        arguments = sampling_arguments(request)
        pieces = self.pieces(prompt, arguments, request.adapter, priority=request.priority)
        try:
            async for piece in pieces:
                yield piece
        finally:  # closed early: the engine aborts the request now
            await pieces.aclose()  # type: ignore[attr-defined]

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        """One ``encode`` request per text, all at once (the engine batches them)."""
        engine = self._started()
        assert self._vllm is not None
        params = self._vllm.PoolingParams(task="embed")
        pooled = await asyncio.gather(*(self._pooled(engine, t, params) for t in request.texts))
        vectors = np.array([vector for vector, _ in pooled], dtype=np.float32)
        return Embeddings(vectors.reshape(len(pooled), -1), sum(n for _, n in pooled))

    async def _pooled(self, engine: Any, text: str, params: Any) -> tuple[Any, int]:
        """One text's vector and its prompt's token count."""
        request_id = f"inferd-{next(self._ids)}"
        self._running.add(request_id)
        try:
            async for output in engine.encode(text, params, request_id):
                if output.finished:
                    data = output.outputs.data.float().numpy()
                    return data, len(output.prompt_token_ids or ())
        except Exception as error:
            raise self._refusal(error, "embed") from None
        finally:
            self._running.discard(request_id)
        raise ModelError(f"Model {self.name!r}: vLLM's engine ended {request_id} unfinished")

    def _prompt(self, engine: Any, request: GenerationRequest) -> Any:
        if request.messages is None:
            return request.prompt or ""
        tokenizer = engine.get_tokenizer()
        refuse_unseen_tools(self.name, getattr(tokenizer, "chat_template", None), request)
        messages = [template_message(m) for m in request.messages]
        try:
            ids = tokenizer.apply_chat_template(
                messages, tools=request.tools, tokenize=True, add_generation_prompt=True
            )
        except Exception as error:  # no template, or one that refuses these messages
            raise InvalidRequest(
                f"Model {self.name!r} cannot template these messages: {error}"
            ) from None
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # a BatchEncoding
            ids = ids["input_ids"]
        # Token ids: the template's own special tokens, none added again.
        return {"prompt_token_ids": list(ids)}

    async def pieces(
        self, prompt: Any, arguments: dict[str, Any], lora_name: str | None, priority: int = 0
    ) -> AsyncIterator[TextPiece]:
        """The engine's deltas for one request as text pieces (with their tokens' log
        probabilities if ``arguments`` asks); closing this early aborts the request in
        the engine."""
        engine = self._started()
        params = self._sampling_params(arguments)
        lora = self._lora(lora_name)
        k = arguments.get("logprobs")
        request_id = f"inferd-{next(self._ids)}"
        self._running.add(request_id)
        generated, finished = 0, False
        outputs = engine.generate(prompt, params, request_id, lora_request=lora, priority=priority)
        try:
            async for output in outputs:
                choice = output.outputs[0]
                generated += len(choice.token_ids)
                finished = output.finished
                scored = None if k is None else token_logprobs(choice.token_ids, choice.logprobs, k)
                if not finished:
                    if choice.text or scored:  # tokens whose text is held back still count
                        yield TextPiece(choice.text, logprobs=scored)
                    continue
                if scored and choice.finish_reason == "stop" and choice.stop_reason is None:
                    scored = scored[:-1]  # the end token: not listed, as the HF runtime
                yield TextPiece(
                    choice.text,
                    finish_reason=FINISH_REASONS.get(str(choice.finish_reason), "stop"),  # type: ignore[arg-type]
                    prompt_tokens=len(output.prompt_token_ids or ()),
                    completion_tokens=generated,
                    logprobs=scored,
                )
        except Exception as error:
            raise self._refusal(error) from None
        finally:
            self._running.discard(request_id)
            if not finished:  # the client left, or the engine failed: stop it there now
                await outputs.aclose()
                if self._engine is not None:
                    await self._engine.abort(request_id)

    def _sampling_params(self, arguments: dict[str, Any]) -> Any:
        """vLLM's ``SamplingParams`` of ``arguments`` (a 400 for what vLLM refuses)."""
        vllm = self._vllm
        assert vllm is not None
        arguments = dict(arguments)
        try:
            if isinstance(arguments.get(STRUCTURED), dict):
                structured = vllm.sampling_params.StructuredOutputsParams
                arguments[STRUCTURED] = structured(**arguments[STRUCTURED])
            return vllm.SamplingParams(
                **arguments, output_kind=vllm.sampling_params.RequestOutputKind.DELTA
            )
        except Exception as error:  # a bad value (vLLM's validation errors are its own)
            raise InvalidRequest(f"Model {self.name!r}: {error}") from None

    def _lora(self, name: str | None) -> Any:
        if name is None:
            return None
        loras = self._loras or {}
        if name not in loras:
            known = ", ".join(sorted(loras)) or "none (multi_lora.json and enable_lora)"
            raise InvalidRequest(
                f"Model {self.name!r} has no LoRA adapter {name!r} (it has {known})"
            )
        return loras[name]

    def _refusal(self, error: Exception, what: str = "generate") -> Exception:
        """vLLM's error as inferd's: the request's fault a 400, the engine's a 500."""
        if isinstance(error, InvalidRequest | ModelNotReady):
            return error
        if isinstance(error, (ValueError, TypeError)):  # before importing vllm: unit tests
            return InvalidRequest(f"Model {self.name!r} refused the request: {error}")
        if isinstance(error, getattr(_import("vllm.exceptions"), "VLLMClientError", ())):
            return InvalidRequest(f"Model {self.name!r} refused the request: {error}")
        cause = error.__cause__ or error
        return ModelError(f"Model {self.name!r} failed to {what}: {cause}")

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        if is_generation_call(request):
            return await super().predict(request)
        responses = [r async for r in self._triton_stream(request, streamed=False)]
        return vllm_triton.last_response(self, request, responses)

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        if is_generation_call(request):
            pieces = self.generate(read_generation(request))
        else:
            async for response in self._triton_stream(request, streamed=True):
                yield response
            return
        try:
            async for piece in pieces:
                yield piece_response(piece)
        finally:  # closed early (the client left): the engine aborts it now
            await pieces.aclose()  # type: ignore[attr-defined]

    async def _triton_stream(
        self, request: InferenceRequest, *, streamed: bool
    ) -> AsyncIterator[InferenceResponse]:
        """A vllm_backend request (``text_input``, ``stream``, ``sampling_parameters``,
        ``exclude_input_in_output``): its ``text_output`` responses."""
        self._started()
        assert self._vllm is not None
        fields = self._vllm.SamplingParams.__struct_fields__
        call = vllm_triton.read_call(self.name, request, fields, streamed=streamed)
        pieces = self.pieces(call.prompt, call.sampling, call.lora_name)
        try:
            async for response in vllm_triton.responses(self, request, call, pieces):
                yield response
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]


def _import(module: str) -> ModuleType:
    return import_framework(module, "VLLMModel", EXTRA)
