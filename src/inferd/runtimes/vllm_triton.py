"""Triton vllm_backend's request and response tensors, for :class:`~inferd.runtimes.vllm.VLLMModel`.

A request (``/generate``, ``/generate_stream``, ``/infer``, gRPC): ``text_input`` (the
prompt, BYTES [1]), optional ``stream`` (BOOL: each delta its own response, else one
response with the whole text), ``sampling_parameters`` (BYTES [1], a JSON object of
vLLM's ``SamplingParams`` fields and ``lora_name``; without it, the request's own
parameters that are such fields), ``exclude_input_in_output`` (BOOL: default true when
streaming, else false: the prompt leads the text), and vllm_backend's additional
outputs ``return_finish_reason``, ``return_num_input_tokens`` and
``return_num_output_tokens`` (the last not when streaming). Each response holds
``text_output`` (BYTES [1]) and the outputs asked for. ``return_logprobs`` and
``return_cumulative_logprob`` are refused with a 400: logprobs do not reach this
runtime yet.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.errors import InvalidRequest
from inferd.generation import TextPiece
from inferd.runtimes.common import response
from inferd.triton.vllm_folder import REFUSED_OUTPUTS, SUPPORTED_OUTPUTS, TEXT_INPUT, TEXT_OUTPUT
from inferd.types import InferenceRequest, InferenceResponse, Tensor

if TYPE_CHECKING:
    from inferd.runtimes.vllm import VLLMModel

CONFIG_KEY = "triton_config"


@dataclass
class TritonCall:
    prompt: str
    stream: bool
    prepend_input: bool
    sampling: dict[str, Any]
    lora_name: str | None = None
    outputs: set[str] = field(default_factory=set)


def read_call(
    model: str, request: InferenceRequest, fields: Collection[str], *, streamed: bool
) -> TritonCall:
    """The call a vllm_backend request makes (``fields``: ``SamplingParams``' fields);
    InvalidRequest naming what is wrong."""
    inputs = {tensor.name: tensor.data for tensor in request.inputs}
    if TEXT_INPUT not in inputs:
        raise InvalidRequest(f"Model {model!r} needs its prompt in input {TEXT_INPUT!r}")
    prompt = _first(inputs[TEXT_INPUT])
    prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
    flags = {name: bool(_first(inputs[name])) for name in inputs if name not in _TEXTS}
    stream = flags.get("stream", False) and streamed
    prepend = not flags.get("exclude_input_in_output", stream)
    if prepend and stream:
        raise InvalidRequest("When streaming, `exclude_input_in_output` = False is not allowed.")
    for name in REFUSED_OUTPUTS:
        if flags.get(name):
            raise InvalidRequest(
                f"Model {model!r}: {name} is not supported by inferd's vLLM runtime"
            )
    if stream and flags.get("return_num_output_tokens"):
        raise InvalidRequest(
            f"Model {model!r}: return_num_output_tokens is not supported when streaming"
        )
    sampling, lora = _sampling(model, request, inputs, set(fields))
    asked = {name.removeprefix("return_") for name in SUPPORTED_OUTPUTS if flags.get(name)}
    return TritonCall(prompt, stream, prepend, sampling, lora, asked)


_TEXTS = (TEXT_INPUT, "sampling_parameters")


def _first(data: np.ndarray) -> Any:
    values = np.asarray(data).reshape(-1)
    if values.size == 0:
        raise InvalidRequest("An input of the request is empty: send one element")
    return values[0].item() if hasattr(values[0], "item") else values[0]


def _sampling(
    model: str, request: InferenceRequest, inputs: dict[str, np.ndarray], fields: set[str]
) -> tuple[dict[str, Any], str | None]:
    """``sampling_parameters`` (all of it must be vLLM's), else the request's parameters
    that name ``SamplingParams`` fields."""
    if "sampling_parameters" in inputs:
        raw = _first(inputs["sampling_parameters"])
        try:
            given = json.loads(raw)
        except (ValueError, TypeError) as error:
            raise InvalidRequest(
                f"Model {model!r}: sampling_parameters is not JSON ({error})"
            ) from None
        if not isinstance(given, dict):
            raise InvalidRequest(f"Model {model!r}: sampling_parameters must be a JSON object")
        unknown = sorted(set(given) - fields - {"lora_name"})
        if unknown:
            raise InvalidRequest(
                f"Model {model!r}: sampling_parameters has fields vLLM does not "
                f"know: {', '.join(unknown)}"
            )
    else:
        given = {k: v for k, v in request.parameters.items() if k in fields or k == "lora_name"}
    given = {k: v for k, v in given.items() if v is not None and not k.startswith("_")}
    lora = given.pop("lora_name", None)
    given.pop("output_kind", None)  # the runtime's: deltas
    given["n"] = 1  # one text_output: more sequences are more requests
    return given, None if lora is None else str(lora)


def lora_requests(vllm: ModuleType, adapters: Any, engine_args: dict[str, Any]) -> dict[str, Any]:
    """vllm_backend's ``multi_lora.json`` (name -> adapter folder) as vLLM's
    ``LoRARequest``s, ids from 1 in the file's order; only with ``enable_lora``."""
    if not adapters:
        return {}
    if str(engine_args.get("enable_lora", "")).lower() != "true":
        raise ValueError(
            "multi_lora.json names LoRA adapters but model.json does not set enable_lora: true"
        )
    if not isinstance(adapters, dict):
        raise ValueError("multi_lora.json must be an object of adapter names and folders")
    lora_request = vllm.lora.request.LoRARequest
    return {
        name: lora_request(name, index, str(path))
        for index, (name, path) in enumerate(adapters.items(), start=1)
    }


async def responses(
    model: VLLMModel, request: InferenceRequest, call: TritonCall, pieces: AsyncIterator[TextPiece]
) -> AsyncIterator[InferenceResponse]:
    """``text_output`` responses: each delta when streaming, else one with the whole text."""
    texts: list[str] = []
    last = TextPiece("")
    async for piece in pieces:
        if call.stream:
            yield response(model, request, _outputs(call, piece.text, piece, streamed=True))
        else:
            texts.append(piece.text)
            last = piece
    if not call.stream:
        text = (call.prompt if call.prepend_input else "") + "".join(texts)
        yield response(model, request, _outputs(call, text, last, streamed=False))


def _outputs(call: TritonCall, text: str, piece: TextPiece, *, streamed: bool) -> list[Tensor]:
    outputs = [Tensor(TEXT_OUTPUT, np.array([text.encode()], dtype=object))]
    if "finish_reason" in call.outputs:
        reason = piece.finish_reason if piece.finish_reason is not None else "None"
        outputs.append(Tensor("finish_reason", np.array([reason.encode()], dtype=object)))
    if "num_input_tokens" in call.outputs:
        count = piece.prompt_tokens or 0
        outputs.append(Tensor("num_input_tokens", np.array([count], dtype=np.uint32)))
    if "num_output_tokens" in call.outputs and not streamed:
        count = piece.completion_tokens or 0
        outputs.append(Tensor("num_output_tokens", np.array([count], dtype=np.uint32)))
    return outputs


def last_response(
    model: VLLMModel, request: InferenceRequest, answers: list[InferenceResponse]
) -> InferenceResponse:
    return answers[-1] if answers else response(model, request, [])
