"""Hugging Face ``transformers`` pipelines (MLServer's ``mlserver_huggingface``).

``model-settings.json``::

    {"name": "sentiment", "implementation": "inferd.runtimes.huggingface.HuggingFaceModel",
     "max_batch_size": 8, "max_batch_time": 0.01,
     "parameters": {"uri": "./distilbert-sst2", "extra": {"task": "text-classification"}}}

The pipeline is built from a folder on disk: ``extra.pretrained_model`` (a
path, relative to the model's folder or absolute), else ``parameters.uri``,
else the model's folder, holding what ``save_pretrained`` wrote. Local files
are read without contacting the Hugging Face Hub. A ``pretrained_model`` that
is not a path is taken as a Hub id and downloaded as transformers does.

``parameters.extra`` (MLServer's names): ``task`` (required, e.g.
``text-classification``), ``task_suffix`` (appended to a ``translation``
task), ``pretrained_model``, ``pretrained_tokenizer`` (default: the model's
folder), ``model_kwargs``, ``device`` (``"cpu"``, ``"cuda:0"``, a GPU index;
default: the worker's device, else CPU), ``inter_op_threads`` and
``intra_op_threads`` (PyTorch's thread pools).

Requests follow MLServer: the input named ``args`` is the pipeline's input (a
list of texts, one per row); every other input is a keyword argument of that
name. BYTES inputs are read as a list of texts unless their content type says
otherwise (``hg_json``: one JSON document, ``hg_jsonlist``: one per element);
a numeric input of one element is passed as a number. The request-level
content type ``hf`` that MLServer's client codec sets is accepted. The answer is one output,
``output``: BYTES ``[n, 1]`` tagged ``hg_jsonlist``, the pipeline's result for
each row as a JSON document. With ``max_batch_size`` set, the pipeline runs a
merged batch in batches of that size.

Streaming (``predict_stream``: the streaming endpoints ``/infer_stream`` and
``/generate_stream`` over REST, ``ModelStreamInfer`` over gRPC): a
``text-generation`` pipeline streams the text it generates, a word or so at a
time, as transformers' ``TextIteratorStreamer`` decodes it. The request is
the one ``predict`` takes, with exactly one prompt in ``args``; the other
inputs are generation arguments as for ``predict`` (``max_new_tokens``,
``do_sample``, ...; beam search and several sequences per prompt cannot
stream). Each response holds one output, ``output``: BYTES ``[1]`` tagged
``str``, the next piece of new text (never the prompt); the pieces, joined,
are the text that ``predict`` with ``return_full_text: false`` generates. A
stream closed early (the client left) stops the generation at its next token.
Other tasks refuse to stream with a 400.

The OpenAI-compatible endpoints (``/v1/completions``, ``/v1/chat/completions``,
``/v1/embeddings``) are served by ``text-generation`` and ``feature-extraction``
pipelines with no other setting: see inferd/runtimes/huggingface_generation.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import orjson

from inferd.errors import InvalidRequest, ModelNotReady
from inferd.generation import is_generation_call, piece_response, read_generation
from inferd.runtimes import common
from inferd.runtimes import huggingface_onednn as onednn
from inferd.runtimes.common import (
    import_framework,
    response,
    short_error,
    warn_unread_extra,
    with_derived_metadata,
)
from inferd.runtimes.huggingface_batching import (
    ContinuousEngine,
    EngineSettings,
    batches_continuously,
)
from inferd.runtimes.huggingface_generation import PipelineGeneration
from inferd.runtimes.huggingface_stream import generated_pieces
from inferd.tensors import codecs
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata, Tensor

logger = logging.getLogger(__name__)

ARGS_INPUT = "args"
OUTPUT_NAME = "output"
JSON_LIST = "hg_jsonlist"
JSON_SINGLE = "hg_json"
REQUEST_CONTENT_TYPE = "hf"
"""What MLServer's HuggingfaceRequestCodec puts in a request's parameters."""
EXTRA = "huggingface"
KNOWN_SETTINGS = (
    "task",
    "task_suffix",
    "pretrained_model",
    "pretrained_tokenizer",
    "model_kwargs",
    "device",
    "framework",
    "inter_op_threads",
    "intra_op_threads",
    "optimum_model",
    "openai",
    "continuous_batching",
    "max_running_sequences",
    "kv_cache_tokens",
    "onednn_linear",
)
TEXT_TASKS = (
    "text-classification",
    "sentiment-analysis",
    "token-classification",
    "ner",
    "fill-mask",
    "feature-extraction",
    "text-generation",
    "zero-shot-classification",
)
"""Tasks whose input is text, for the metadata."""
STREAMING_TASKS = ("text-generation",)
"""Tasks whose pipeline passes a streamer to ``generate()`` and makes one sequence a prompt."""
SEQUENCE_COUNTS = ("num_beams", "num_return_sequences")
"""Generation arguments that make several sequences, which one stream cannot carry."""


class HuggingFaceModel(PipelineGeneration):
    """Serves a transformers pipeline (and, through it, the OpenAI-compatible endpoints)."""

    _pipeline: Any = None
    _batch_size = 1
    _slots: asyncio.Semaphore | None = None

    async def load(self) -> bool:
        options = self._checked_options()
        # Importing torch and reading the weights take seconds.
        self._pipeline = await asyncio.to_thread(self._build_pipeline, options)
        self._batch_size = self._usable_batch_size()
        if batches_continuously(self.settings) and self.openai_endpoints:
            engine = EngineSettings.of(self.name, options)
            eos = self._pipeline.tokenizer.eos_token_id
            self._engine = ContinuousEngine(self.name, self._pipeline.model, eos, engine)
        return True

    def _checked_options(self) -> dict[str, Any]:
        extra = self.settings.extra
        warn_unread_extra(self, KNOWN_SETTINGS)
        if not isinstance(extra.get("task"), str) or not extra["task"]:
            raise ValueError(
                f"Model {self.name!r}: set parameters.extra.task to the pipeline's task, "
                "e.g. 'text-classification'"
            )
        if extra.get("optimum_model"):
            raise ValueError(
                f"Model {self.name!r}: optimum_model is not supported; export the model to "
                "ONNX and serve it with inferd.runtimes.onnx.OnnxModel"
            )
        if extra.get("framework") not in (None, "pt"):
            raise ValueError(
                f"Model {self.name!r}: framework {extra['framework']!r} is not supported; "
                "transformers pipelines run PyTorch models ('pt')"
            )
        return extra

    def _build_pipeline(self, extra: dict[str, Any]) -> Any:
        transformers = import_framework("transformers", type(self).__name__, EXTRA)
        common.no_progress_monitor()
        torch = self._set_threads(extra)
        task = extra["task"]
        if task == "translation":
            task += str(extra.get("task_suffix", ""))
        model = self._location(extra.get("pretrained_model")) or str(self.settings.uri)
        tokenizer = self._location(extra.get("pretrained_tokenizer")) or model
        pipeline = transformers.pipeline(
            task,
            model=model,
            tokenizer=tokenizer,
            model_kwargs=extra.get("model_kwargs"),
            device=extra.get("device", self.context.device),
        )
        onednn.apply_setting(torch, self.name, extra, pipeline.model)
        return pipeline

    def _location(self, name: Any) -> str | None:
        """A folder named relative to the model's folder, or a Hub id as given."""
        if name is None:
            return None
        path = Path(str(name))
        if not path.is_absolute() and (self.settings.folder / path).exists():
            return str(self.settings.folder / path)
        return str(name)

    def _set_threads(self, extra: dict[str, Any]) -> ModuleType:
        torch = import_framework("torch", type(self).__name__, EXTRA)
        if extra.get("intra_op_threads") is not None:
            torch.set_num_threads(int(extra["intra_op_threads"]))
        if extra.get("inter_op_threads") is not None:
            try:
                torch.set_num_interop_threads(int(extra["inter_op_threads"]))
            except RuntimeError as error:  # only possible before the process's first parallel op
                logger.warning("Model %r: inter_op_threads not applied: %s", self.name, error)
        return torch

    def _usable_batch_size(self) -> int:
        """``max_batch_size``, once padding works: rows of a batch must be padded to
        one length, and a tokenizer without a pad token borrows its end token."""
        wanted = max(1, self.settings.max_batch_size)
        tokenizer = getattr(self._pipeline, "tokenizer", None)
        if wanted == 1 or tokenizer is None or tokenizer.pad_token is not None:
            return wanted
        if tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
            return wanted
        logger.warning(
            "Model %r: its tokenizer has neither a pad nor an end token, so rows are run "
            "one at a time despite max_batch_size %d",
            self.name,
            wanted,
        )
        return 1

    async def unload(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            await asyncio.to_thread(engine.stop)
        pipeline, self._pipeline = self._pipeline, None
        device = getattr(pipeline, "device", None)
        if device is not None and device.type == "cuda":
            import_framework("torch", type(self).__name__, EXTRA).cuda.empty_cache()

    # Plain def: the pipeline is a plain function (see SKLearnModel.predict).
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if is_generation_call(request):
            return self.answer_embedding(request)
        if self._pipeline is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        arguments = {tensor.name: self._argument(tensor, request) for tensor in request.inputs}
        inputs = arguments.pop(ARGS_INPUT, None)
        if inputs is None and not arguments:
            raise InvalidRequest(
                f"Model {self.name!r} needs its input texts in an input named {ARGS_INPUT!r}"
            )
        positional = () if inputs is None else (inputs,)
        try:
            prediction = self._pipeline(*positional, **arguments, batch_size=self._batch_size)
        except (TypeError, ValueError) as error:  # how pipelines refuse their arguments
            raise self._refusal(request, error) from error
        return response(self, request, [json_list_output(prediction)])

    def _refusal(self, request: InferenceRequest, error: Exception) -> InvalidRequest:
        names = ", ".join(repr(tensor.name) for tensor in request.inputs)
        return InvalidRequest(
            f"Model {self.name!r} cannot use the request's inputs ({names}): {short_error(error)}"
        )

    @property
    def streams(self) -> bool:
        """Only text generation streams; other tasks answer the streaming endpoints
        with predict's one response."""
        return self.settings.extra.get("task") in STREAMING_TASKS

    # An async generator: a generation in the continuous batching engine holds no
    # slot (the engine batches every stream, up to max_concurrent_streams). The
    # others (a pipeline's stream; a generation with continuous batching off) are
    # compute-bound plain generators, stepped in a thread, each holding one of the
    # model's threads_per_worker slots for its life.
    async def predict_stream(  # type: ignore[override]  # async: see above
        self, request: InferenceRequest
    ) -> AsyncIterator[InferenceResponse]:
        engine = self._engine
        if engine is not None and is_generation_call(request):
            pieces = self.generate_batched(read_generation(request), engine)
            try:
                async for piece in pieces:
                    yield piece_response(piece)
            finally:  # closed early (the client left): the engine drops the sequence now
                await pieces.aclose()  # type: ignore[attr-defined]
            return
        if self._slots is None:  # made here: it belongs to the loop that serves
            self._slots = asyncio.Semaphore(self.settings.threads_per_worker)
        responses = common.stepped_in_thread(self.plain_stream(request), self._slots)
        try:
            async for response in responses:
                yield response
        finally:
            await responses.aclose()  # type: ignore[attr-defined]

    def plain_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        """A stream made in the calling thread: a pipeline's, or a generation in the
        runtime's own loop."""
        if is_generation_call(request):
            yield from self.answer_generation(request)
            return
        prompt, arguments = self._stream_arguments(request)
        try:
            for piece in generated_pieces(self.name, self._pipeline, prompt, arguments):
                yield response(self, request, [text_output(piece)])
        except (TypeError, ValueError) as error:  # how pipelines refuse their arguments
            raise self._refusal(request, error) from error

    def _stream_arguments(self, request: InferenceRequest) -> tuple[str, dict[str, Any]]:
        """The prompt and the generation arguments of a streaming request."""
        if self._pipeline is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        task = self.settings.extra.get("task")
        if task not in STREAMING_TASKS:
            raise InvalidRequest(
                f"Model {self.name!r} cannot stream: its task is {task!r}, and only "
                f"{', '.join(STREAMING_TASKS)} pipelines stream; call infer instead"
            )
        arguments = {tensor.name: self._argument(tensor, request) for tensor in request.inputs}
        for name in SEQUENCE_COUNTS:  # transformers' own error would only say "batch size 1"
            if arguments.get(name, 1) != 1:
                raise InvalidRequest(
                    f"Model {self.name!r} cannot stream with {name} {arguments[name]!r}: a "
                    f"stream carries one sequence; leave out {name!r} or call infer instead"
                )
        return self._one_prompt(arguments.pop(ARGS_INPUT, None)), arguments

    def _one_prompt(self, value: Any) -> str:
        if isinstance(value, list | np.ndarray) and len(value) == 1:
            value = value[0]
        if isinstance(value, str):
            return value
        if value is None:
            got = f"no input {ARGS_INPUT!r}"
        elif isinstance(value, list | np.ndarray):
            got = f"{len(value)} elements"
        else:
            got = f"{type(value).__name__}, not a text"
        raise InvalidRequest(
            f"Model {self.name!r} streams the text generated for one prompt: send exactly "
            f"one text in input {ARGS_INPUT!r} (got {got})"
        )

    def _argument(self, tensor: Tensor, request: InferenceRequest) -> Any:
        request_default = request.content_type
        if request_default == REQUEST_CONTENT_TYPE:  # "decode each input by its own type"
            request_default = None
        content_type = tensor.content_type or request_default
        if tensor.data.dtype.kind != "O":
            values = codecs.decode_tensor(tensor, content_type)
            return values.item() if values.size == 1 and tensor.name != ARGS_INPUT else values
        if content_type == JSON_SINGLE:
            return _json_documents(tensor)[0]
        if content_type == JSON_LIST:
            return _json_documents(tensor)
        return codecs.decode_tensor(tensor, content_type or codecs.STRING)

    def metadata(self) -> ModelMetadata:
        metadata = super().metadata()
        if self._pipeline is None:
            return metadata
        text = {"content_type": codecs.STRING}
        inputs = [MetadataTensor(ARGS_INPUT, "BYTES", [-1], text)]
        if self.settings.extra.get("task") not in TEXT_TASKS:
            inputs = []
        outputs = [MetadataTensor(OUTPUT_NAME, "BYTES", [-1, 1], {"content_type": JSON_LIST})]
        return with_derived_metadata(metadata, inputs, outputs)


def text_output(text: str) -> Tensor:
    """One piece of a stream's text."""
    return Tensor(
        OUTPUT_NAME, np.array([text.encode()], dtype=object), {"content_type": codecs.STRING}
    )


def json_list_output(prediction: Any) -> Tensor:
    """The pipeline's results, one JSON document per row (MLServer's hg_jsonlist)."""
    rows = prediction if isinstance(prediction, list) else [prediction]
    documents = np.empty((len(rows), 1), dtype=object)
    documents[:, 0] = [_json_document(row) for row in rows]
    return Tensor(OUTPUT_NAME, documents, {"content_type": JSON_LIST})


def _json_document(row: Any) -> bytes:
    return orjson.dumps(row, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # torch tensors, numpy scalars orjson does not know
        return value.tolist()
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")


def _json_documents(tensor: Tensor) -> list[Any]:
    documents = []
    for index, item in enumerate(tensor.data.reshape(-1).tolist()):
        try:
            documents.append(json.loads(item))
        except ValueError as error:
            raise InvalidRequest(
                f"Input {tensor.name!r}: element {index} is not a JSON document ({error})"
            ) from None
    return documents
