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

_input_codecs: dict[str, Any] = {}
_request_codecs: dict[str, Any] = {}


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


def _by_payload(codecs: dict[str, Any], payload: Any) -> Any:
    return _first(codecs.values(), lambda c: c.can_encode(payload), f"payload {type(payload)}")


def _by_type_hint(codecs: dict[str, Any], type_hint: Any) -> Any:
    return _first(codecs.values(), lambda c: c.TypeHint == type_hint, f"type hint {type_hint}")


def _find(codecs: dict[str, Any], content_type: Any, payload: Any, type_hint: Any) -> Any:
    # Truth tests as in MLServer: an empty payload finds nothing.
    if content_type:
        return codecs.get(content_type)
    if payload:
        return _by_payload(codecs, payload)
    if type_hint:
        return _by_type_hint(codecs, type_hint)
    return None


def find_input_codec(
    content_type: str | None = None, payload: Any = None, type_hint: Any = None
) -> Any:
    return _find(_input_codecs, content_type, payload, type_hint)


def find_input_codec_by_payload(payload: Any) -> Any:
    return _by_payload(_input_codecs, payload)


def find_input_codec_by_type_hint(type_hint: Any) -> Any:
    return _by_type_hint(_input_codecs, type_hint)


def find_request_codec(
    content_type: str | None = None, payload: Any = None, type_hint: Any = None
) -> Any:
    return _find(_request_codecs, content_type, payload, type_hint)


def find_request_codec_by_payload(payload: Any) -> Any:
    return _by_payload(_request_codecs, payload)


def find_request_codec_by_type_hint(type_hint: Any) -> Any:
    return _by_type_hint(_request_codecs, type_hint)


def register_input_codec(codec: Any) -> Any:
    """Class decorator: use ``codec`` for inputs tagged with its ``ContentType``."""
    if codec.ContentType is not None:
        _input_codecs[codec.ContentType] = codec
    return codec


def register_request_codec(codec: Any) -> Any:
    """Class decorator: use ``codec`` for requests tagged with its ``ContentType``."""
    if codec.ContentType is not None:
        _request_codecs[codec.ContentType] = codec
    return codec
