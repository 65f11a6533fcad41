"""MLServer's ``MLModel``: the base class of an MLServer custom runtime.

inferd serves a subclass through :class:`~inferd.compat.mlmodel_runtime.MLModelRuntime`,
which calls ``load`` / ``predict`` / ``predict_stream`` / ``metadata`` /
``unload`` as MLServer does, with MLServer's pydantic types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from inferd.compat.mlserver.codecs import (
    decode_inference_request,
    decode_request_input,
    encode_inference_response,
    encode_response_output,
    get_decoded,
    has_decoded,
)
from inferd.compat.mlserver.codecs.errors import CodecNotFound
from inferd.compat.mlserver.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataModelResponse,
    MetadataTensor,
    Parameters,
    RequestInput,
    RequestOutput,
    ResponseOutput,
)


def _index(tensors: Any) -> dict[str, Any]:
    return {tensor.name: tensor for tensor in tensors or []}


def _tensors_property(field: str) -> Any:
    """The settings' ``inputs`` or ``outputs``; setting them also re-indexes them by
    name (what decode and encode look tensors up in)."""

    def read(model: Any) -> Any:
        return getattr(model._settings, field)

    def write(model: Any, value: list[MetadataTensor]) -> None:
        setattr(model._settings, field, value)
        setattr(model, f"_{field}_index", _index(value))

    return property(read, write)


class MLModel:
    """Override ``load`` and ``predict`` (and ``predict_stream`` to stream)."""

    def __init__(self, settings: Any) -> None:
        self._settings = settings
        self._inputs_index = _index(settings.inputs)
        self._outputs_index = _index(settings.outputs)
        self.ready = False

    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        raise NotImplementedError("predict() method not implemented")

    async def predict_stream(
        self, payloads: AsyncIterator[InferenceRequest]
    ) -> AsyncIterator[InferenceResponse]:
        yield await self.predict(await payloads.__anext__())

    async def unload(self) -> bool:
        return True

    @property
    def name(self) -> str:
        return str(self._settings.name)

    @property
    def version(self) -> str | None:
        parameters = self._settings.parameters
        return parameters.version if parameters else None

    @property
    def settings(self) -> Any:
        return self._settings

    inputs = _tensors_property("inputs")
    outputs = _tensors_property("outputs")

    def decode(self, request_input: RequestInput, default_codec: Any = None) -> Any:
        """The input decoded by its content type (or its metadata's), else by
        ``default_codec``, else its raw data."""
        decode_request_input(request_input, self._inputs_index)
        if has_decoded(request_input):
            return get_decoded(request_input)
        if default_codec:
            return default_codec.decode_input(request_input)
        return request_input.data

    def decode_request(self, inference_request: InferenceRequest, default_codec: Any = None) -> Any:
        """The request decoded by its (or the model's) content type, else by
        ``default_codec``, else the request itself."""
        decode_inference_request(inference_request, self._settings, self._inputs_index)
        if has_decoded(inference_request):
            return get_decoded(inference_request)
        if default_codec:
            return default_codec.decode_request(inference_request)
        return inference_request

    def encode_response(self, payload: Any, default_codec: Any = None) -> InferenceResponse:
        response = encode_inference_response(payload, self._settings)
        if response:
            return response
        if default_codec:
            encoded: InferenceResponse = default_codec.encode_response(
                self.name, payload, self.version
            )
            return encoded
        raise CodecNotFound(payload_type=str(type(payload)), is_input=False, is_request=True)

    def encode(
        self, payload: Any, request_output: RequestOutput, default_codec: Any = None
    ) -> ResponseOutput:
        output = encode_response_output(payload, request_output, self._outputs_index)
        if output:
            return output
        if default_codec:
            encoded: ResponseOutput = default_codec.encode_output(request_output.name, payload)
            return encoded
        raise CodecNotFound(name=request_output.name, is_input=False, is_request=False)

    async def metadata(self) -> MetadataModelResponse:
        settings = self._settings
        metadata = MetadataModelResponse.model_construct(
            name=self.name,
            platform=settings.platform,
            versions=list(settings.versions),
            inputs=settings.inputs,
            outputs=settings.outputs,
        )
        if settings.parameters and settings.parameters.content_type:
            metadata.parameters = Parameters(content_type=settings.parameters.content_type)
        return metadata
