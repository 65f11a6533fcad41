"""Finding and applying codecs to whole requests and responses (MLServer's
``mlserver.codecs.utils``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferd.compat.mlserver.codecs.base import (
    RequestCodec,
    find_input_codec,
    find_input_codec_by_payload,
    find_request_codec,
    find_request_codec_by_payload,
)
from inferd.compat.mlserver.codecs.errors import CodecError
from inferd.compat.mlserver.types import (
    InferenceRequest,
    InferenceResponse,
    Parameters,
    RequestInput,
    ResponseOutput,
)

DefaultOutputPrefix = "output-"
DefaultInputPrefix = "input-"
DecodedParameterName = "_decoded_payload"

InputOrOutput = RequestInput | ResponseOutput


def inject_batch_dimension(shape: list[int]) -> list[int]:
    """``[N]`` is sent as ``[N, 1]``; longer shapes as they are."""
    return shape if len(shape) > 1 else [*shape, 1]


def _parameter(parameters: Any, name: str) -> Any:
    """A parameter of pydantic Parameters, or of a plain dict (inferd's settings)."""
    if parameters is None:
        return None
    if isinstance(parameters, dict):
        return parameters.get(name)
    return getattr(parameters, name, None)


def get_content_type(item: Any, metadata: Any = None) -> str | None:
    """The content type ``item`` is tagged with, else the one its metadata declares."""
    return _parameter(item.parameters, "content_type") or (
        _parameter(metadata.parameters, "content_type") if metadata is not None else None
    )


def _save_decoded(item: Any, decoded: Any) -> None:
    if not item.parameters:
        item.parameters = Parameters()
    setattr(item.parameters, DecodedParameterName, decoded)


def has_decoded(item: Any) -> bool:
    return bool(item.parameters) and hasattr(item.parameters, DecodedParameterName)


def get_decoded(item: Any) -> Any:
    if has_decoded(item):
        return getattr(item.parameters, DecodedParameterName)
    return None


def get_decoded_or_raw(item: Any) -> Any:
    """What the item was decoded to; else a tensor's data, or the request itself."""
    if has_decoded(item):
        return get_decoded(item)
    if isinstance(item, RequestInput | ResponseOutput):
        return item.data
    return item


def encode_response_output(
    payload: Any, request_output: Any, metadata_outputs: dict[str, Any] | None = None
) -> ResponseOutput | None:
    metadata = (metadata_outputs or {}).get(request_output.name)
    content_type = get_content_type(request_output, metadata)
    by_type = find_input_codec(content_type) if content_type else None
    codec = by_type if content_type else find_input_codec_by_payload(payload)
    return codec.encode_output(name=request_output.name, payload=payload) if codec else None


def encode_inference_response(payload: Any, model_settings: Any) -> InferenceResponse | None:
    codec = find_request_codec_by_payload(payload)
    if not codec:
        return None
    version = model_settings.parameters.version if model_settings.parameters else None
    response: InferenceResponse = codec.encode_response(model_settings.name, payload, version)
    return response


def decode_request_input(
    request_input: RequestInput, metadata_inputs: dict[str, Any] | None = None
) -> Any:
    metadata = (metadata_inputs or {}).get(request_input.name)
    codec = _tagged(find_input_codec, get_content_type(request_input, metadata))
    return None if codec is None else _decoded(request_input, codec.decode_input)


def decode_inference_request(
    request: InferenceRequest,
    model_settings: Any = None,
    metadata_inputs: dict[str, Any] | None = None,
) -> Any:
    """Decode each tagged input, then the request by its (or the model's) content type."""
    for request_input in request.inputs:
        decode_request_input(request_input, metadata_inputs)
    codec = _tagged(find_request_codec, get_content_type(request, model_settings))
    return request if codec is None else _decoded(request, codec.decode_request)


def _tagged(find: Callable[[str], Any], content_type: str | None) -> Any:
    """The codec of ``content_type``; None when there is none or no content type."""
    return find(content_type) if content_type else None


def _decoded(item: Any, decode: Callable[[Any], Any]) -> Any:
    """``item`` decoded, the result kept in its parameters (as MLServer keeps it)."""
    decoded = decode(item)
    _save_decoded(item, decoded)
    return decoded


class SingleInputRequestCodec(RequestCodec):
    """A request codec that reads the one input (writes the one output) with
    ``InputCodec``."""

    InputCodec: Any = None

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return cls.InputCodec is not None and bool(cls.InputCodec.can_encode(payload))

    @classmethod
    def _input_codec(cls) -> Any:
        if cls.InputCodec is None:
            raise NotImplementedError(f"No input codec found for {type(cls)} request codec")
        return cls.InputCodec

    @classmethod
    def encode_response(
        cls, model_name: str, payload: Any, model_version: str | None = None, **kwargs: Any
    ) -> InferenceResponse:
        output = cls._input_codec().encode_output(f"{DefaultOutputPrefix}1", payload, **kwargs)
        return InferenceResponse(
            model_name=model_name,
            model_version=model_version,
            parameters=Parameters(content_type=cls.ContentType),
            outputs=[output],
        )

    @classmethod
    def decode_response(cls, response: InferenceResponse) -> Any:
        return cls._decode_only(response.outputs, "output", "decode_output")

    @classmethod
    def encode_request(cls, payload: Any, **kwargs: Any) -> InferenceRequest:
        request_input = cls._input_codec().encode_input(f"{DefaultInputPrefix}1", payload, **kwargs)
        return InferenceRequest(
            inputs=[request_input], parameters=Parameters(content_type=cls.ContentType)
        )

    @classmethod
    def decode_request(cls, request: InferenceRequest) -> Any:
        return cls._decode_only(request.inputs, "input", "decode_input")

    @classmethod
    def _decode_only(cls, items: list[Any], what: str, method: str) -> Any:
        if len(items) != 1:
            raise CodecError(
                f"The '{cls.ContentType}' codec only supports a single {what} tensor "
                f"({len(items)} were received)"
            )
        item = items[0]
        if not has_decoded(item) and cls.InputCodec is not None:
            _save_decoded(item, getattr(cls.InputCodec, method)(item))
        return get_decoded_or_raw(item)
