"""The codec interfaces and the registry that finds a codec by content type,
payload or type hint (MLServer's ``mlserver.codecs.base``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, ClassVar

from inferd.compat.mlserver.types import (
    InferenceRequest,
    InferenceResponse,
    RequestInput,
    ResponseOutput,
)

logger = logging.getLogger("mlserver")


class InputCodec:
    """Converts one input (output) tensor to and from a Python value."""

    ContentType: ClassVar[str] = ""
    TypeHint: ClassVar[Any] = type(None)

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return False

    @classmethod
    def encode_output(cls, name: str, payload: Any, **kwargs: Any) -> ResponseOutput:
        raise NotImplementedError()

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> Any:
        raise NotImplementedError()

    @classmethod
    def encode_input(cls, name: str, payload: Any, **kwargs: Any) -> RequestInput:
        raise NotImplementedError()

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> Any:
        raise NotImplementedError()

    @classmethod
    def encode(cls, name: str, payload: Any) -> ResponseOutput:  # deprecated in MLServer
        return cls.encode_output(name, payload)

    @classmethod
    def decode(cls, request_input: RequestInput) -> Any:  # deprecated in MLServer
        return cls.decode_input(request_input)


class RequestCodec:
    """Converts a whole request (response) to and from a Python value."""

    ContentType: ClassVar[str] = ""
    TypeHint: ClassVar[Any] = type(None)

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return False

    @classmethod
    def encode_response(
        cls, model_name: str, payload: Any, model_version: str | None = None, **kwargs: Any
    ) -> InferenceResponse:
        raise NotImplementedError()

    @classmethod
    def decode_response(cls, response: InferenceResponse) -> Any:
        raise NotImplementedError()

    @classmethod
    def encode_request(cls, payload: Any, **kwargs: Any) -> InferenceRequest:
        raise NotImplementedError()

    @classmethod
    def decode_request(cls, request: InferenceRequest) -> Any:
        raise NotImplementedError()

    @classmethod
    def encode(
        cls, model_name: str, payload: Any, model_version: str | None = None
    ) -> InferenceResponse:  # deprecated in MLServer
        return cls.encode_response(model_name, payload, model_version)

    @classmethod
    def decode(cls, request: InferenceRequest) -> Any:  # deprecated in MLServer
        return cls.decode_request(request)


InputCodecLike = type[InputCodec] | InputCodec
RequestCodecLike = type[RequestCodec] | RequestCodec


class _Registry:
    """The codecs of one kind (input or request) by content type, and how MLServer
    finds one: by content type, else by payload, else by type hint."""

    def __init__(self) -> None:
        self.codecs: dict[str, Any] = {}

    def register(self, codec: Any) -> Any:
        """Class decorator: use ``codec`` for what is tagged with its ``ContentType``."""
        if codec.ContentType is not None:
            self.codecs[codec.ContentType] = codec
        return codec

    def find(
        self, content_type: str | None = None, payload: Any = None, type_hint: Any = None
    ) -> Any:
        # Truth tests as in MLServer: an empty payload finds nothing.
        if content_type:
            return self.codecs.get(content_type)
        if payload:
            return self.by_payload(payload)
        if type_hint:
            return self.by_type_hint(type_hint)
        return None

    def by_payload(self, payload: Any) -> Any:
        what = f"payload {type(payload)}"
        return _first(self.codecs.values(), lambda c: c.can_encode(payload), what)

    def by_type_hint(self, type_hint: Any) -> Any:
        what = f"type hint {type_hint}"
        return _first(self.codecs.values(), lambda c: c.TypeHint == type_hint, what)


def _first(codecs: Iterable[Any], matches: Any, what: str) -> Any:
    found = [codec for codec in codecs if matches(codec)]
    if not found:
        logger.warning("No codec was found for %s.", what)
        return None
    if len(found) > 1:
        logger.warning(
            "Multiple codecs (%d) were found for %s. The first one found will be used (%s).",
            len(found),
            what,
            found[0].ContentType,
        )
    return found[0]


_inputs, _requests = _Registry(), _Registry()
# MLServer's module-level functions over its two registries.
register_input_codec = _inputs.register
find_input_codec = _inputs.find
find_input_codec_by_payload = _inputs.by_payload
find_input_codec_by_type_hint = _inputs.by_type_hint
register_request_codec = _requests.register
find_request_codec = _requests.find
find_request_codec_by_payload = _requests.by_payload
find_request_codec_by_type_hint = _requests.by_type_hint
