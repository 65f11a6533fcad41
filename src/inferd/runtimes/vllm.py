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
processes (supervisor/hosting_rules.py), never a copy per process. vLLM schedules
and batches every stream itself: a generation holds no slot of the model (up to
``max_concurrent_streams``), and a stream closed early (the client left, its
deadline passed, the server drains) aborts its request in the engine, whose
sequence leaves the batch at the next step. The engine's figures are inferd
metrics (runtimes/vllm_metrics.py).

OpenAI requests map to vLLM's ``SamplingParams`` (:func:`sampling_arguments`):
``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``; ``n`` choices are
``n`` requests, seeded ``seed + i`` (server/openai/). Chat messages go through the
tokenizer's chat template. What the engine refuses (a prompt longer than the
context, a bad value) is a 400 naming vLLM's reason.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.errors import InvalidRequest, ModelError, ModelNotReady
from inferd.generation import (
    AsyncGenerativeModel,
    GenerationRequest,
    TextPiece,
    is_generation_call,
    piece_response,
    read_generation,
)
from inferd.runtimes import vllm_metrics, vllm_triton
from inferd.runtimes.common import import_framework
from inferd.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

EXTRA = "vllm"
ENGINE_ARGS = "engine_args"
MULTI_LORA = "multi_lora"
"""``parameters.extra`` key: LoRA adapters by name (vllm_backend's multi_lora.json)."""
KNOWN_SETTINGS = (ENGINE_ARGS, MULTI_LORA, vllm_triton.CONFIG_KEY)
FINISH_REASONS = {"stop": "stop", "length": "length"}


def sampling_arguments(request: GenerationRequest) -> dict[str, Any]:
    """vLLM ``SamplingParams`` keywords for one OpenAI choice: the one place a field of
    :class:`GenerationRequest` reaches the engine. A field added there maps here
    (``logprobs`` / ``top_logprobs`` -> ``logprobs``, ``response_format`` ->
    ``structured_outputs``); a LoRA adapter is ``pieces``' ``lora_name``, and a
    priority would be ``AsyncLLM.generate``'s ``priority``, passed where ``pieces``
    calls it."""
    arguments: dict[str, Any] = {
        "n": 1,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
    }
    if request.stop:
        arguments["stop"] = list(request.stop)
    return arguments


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

    _engine: Any = None
    _vllm: ModuleType | None = None
    _loras: dict[str, Any] | None = None

    async def load(self) -> bool:
        extra = self.settings.extra
        unknown = sorted(set(extra) - set(KNOWN_SETTINGS))
        if unknown:
            logger.warning(
                "Model %r: parameters.extra %s not used by VLLMModel (it reads %s)",
                self.name,
                ", ".join(unknown),
                ", ".join(KNOWN_SETTINGS),
            )
        arguments = engine_arguments(extra, self.settings.uri, self.settings.folder)
        self._vllm = await asyncio.to_thread(_import, "vllm")
        self._loras = vllm_triton.lora_requests(self._vllm, extra.get(MULTI_LORA), arguments)
        # Starting the engine takes seconds to minutes (its process, the weights, warm-up):
        # in a thread. The engine's output task starts with its first request, on the
        # loop that serves.
        self._engine = await asyncio.to_thread(self._start, arguments)
        self._ids = itertools.count()
        self._running: set[str] = set()
        return True

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
        prompt = self._prompt(engine, request)
        arguments = sampling_arguments(request)
        async for piece in self.pieces(prompt, arguments, None):
            yield piece

    def _prompt(self, engine: Any, request: GenerationRequest) -> Any:
        if request.messages is None:
            return request.prompt or ""
        tokenizer = engine.get_tokenizer()
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        try:
            ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        except Exception as error:  # no template, or one that refuses these messages
            raise InvalidRequest(
                f"Model {self.name!r} cannot template these messages: {error}"
            ) from None
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # a BatchEncoding
            ids = ids["input_ids"]
        # Token ids: the template's own special tokens, none added again.
        return {"prompt_token_ids": list(ids)}

    async def pieces(
        self, prompt: Any, arguments: dict[str, Any], lora_name: str | None
    ) -> AsyncIterator[TextPiece]:
        """The engine's deltas for one request as text pieces; closing this early aborts
        the request in the engine."""
        engine = self._started()
        vllm = self._vllm
        assert vllm is not None
        try:
            params = vllm.SamplingParams(
                **arguments, output_kind=vllm.sampling_params.RequestOutputKind.DELTA
            )
        except (TypeError, ValueError) as error:
            raise InvalidRequest(f"Model {self.name!r}: {error}") from None
        lora = self._lora(lora_name)
        request_id = f"inferd-{next(self._ids)}"
        self._running.add(request_id)
        generated, finished = 0, False
        outputs = engine.generate(prompt, params, request_id, lora_request=lora)
        try:
            async for output in outputs:
                choice = output.outputs[0]
                generated += len(choice.token_ids)
                finished = output.finished
                if not finished:
                    if choice.text:
                        yield TextPiece(choice.text)
                    continue
                yield TextPiece(
                    choice.text,
                    finish_reason=FINISH_REASONS.get(str(choice.finish_reason), "stop"),  # type: ignore[arg-type]
                    prompt_tokens=len(output.prompt_token_ids or ()),
                    completion_tokens=generated,
                )
        except Exception as error:
            raise self._refusal(error) from None
        finally:
            self._running.discard(request_id)
            if not finished:  # the client left, or the engine failed: stop it there now
                await outputs.aclose()
                if self._engine is not None:
                    await self._engine.abort(request_id)

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

    def _refusal(self, error: Exception) -> Exception:
        """vLLM's error as inferd's: the request's fault a 400, the engine's a 500."""
        if isinstance(error, InvalidRequest | ModelNotReady):
            return error
        client_error = getattr(_import("vllm.exceptions"), "VLLMClientError", ())
        if isinstance(error, (ValueError, TypeError, client_error)):
            return InvalidRequest(f"Model {self.name!r} refused the request: {error}")
        cause = error.__cause__ or error
        return ModelError(f"Model {self.name!r} failed to generate: {cause}")

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
