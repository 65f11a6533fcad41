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


def _to_implement(*names: str) -> list[Any]:
    """Class methods a codec must implement: each raises NotImplementedError, as MLServer's."""
    return [classmethod(_unimplemented(name)) for name in names]


def _unimplemented(name: str) -> Any:
    def method(cls: type, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{cls.__name__}.{name}")

    return method


class _Codec:
    """What both kinds of codec have: the content type they are found by, the type hint
    they decode to, and whether they can encode a payload."""

    ContentType: ClassVar[str] = ""
    TypeHint: ClassVar[Any] = type(None)

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return False


class InputCodec(_Codec):
    """Converts one input (output) tensor to and from a Python value."""

    # What a codec implements, as MLServer's: encode_output(name, payload, **kwargs),
    # decode_output(response_output), encode_input(name, payload, **kwargs), decode_input(
    # request_input).
    encode_output, decode_output, encode_input, decode_input = _to_implement(
        "encode_output", "decode_output", "encode_input", "decode_input"
    )

    @classmethod
    def encode(cls, name: str, payload: Any) -> ResponseOutput:  # deprecated in MLServer
        return cls.encode_output(name, payload)

    @classmethod
    def decode(cls, request_input: RequestInput) -> Any:  # deprecated in MLServer
        return cls.decode_input(request_input)


class RequestCodec(_Codec):
    """Converts a whole request (response) to and from a Python value."""

    # What a codec implements, as MLServer's: encode_response(model_name, payload,
    # model_version=None, **kwargs), decode_response(response), encode_request(payload,
    # **kwargs), decode_request(request).
    encode_response, decode_response, encode_request, decode_request = _to_implement(
        "encode_response", "decode_response", "encode_request", "decode_request"
    )

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
