"""Lists of bytes sent base64-encoded (content type ``base64``), MLServer's
``mlserver.codecs.base64``."""

from __future__ import annotations

import base64
import binascii
from typing import Any, List  # noqa: UP035 - MLServer's TypeHints are typing.List

from inferd.compat.mlserver.codecs.base import InputCodec, register_input_codec
from inferd.compat.mlserver.codecs.lists import ListElement, as_list, is_list_of
from inferd.compat.mlserver.codecs.string import as_input, text_output
from inferd.compat.mlserver.types import RequestInput, ResponseOutput


def _ensure_bytes(elem: ListElement) -> bytes:
    return elem.encode("ascii") if isinstance(elem, str) else elem


def _encode_base64(elem: ListElement, use_bytes: bool) -> bytes | str:
    encoded = base64.b64encode(_ensure_bytes(elem))
    return encoded if use_bytes else encoded.decode("ascii")


def _decode_base64(elem: ListElement) -> bytes:
    """The decoded bytes; an element that is not base64 is passed as it is (MLServer)."""
    raw = _ensure_bytes(elem)
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error:
        return raw


@register_input_codec
class Base64Codec(InputCodec):
    """A list of bytes, base64-encoded on the wire."""

    ContentType = "base64"
    TypeHint = List[bytes]  # noqa: UP006 - typing.List, as MLServer: hints must compare equal

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, bytes)

    @classmethod
    def encode_output(
        cls, name: str, payload: list[bytes], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        packed = [_encode_base64(item, use_bytes) for item in payload]
        return text_output(name, packed, cls.ContentType)

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[bytes]:
        return [_decode_base64(item) for item in as_list(response_output.data.root)]

    @classmethod
    def encode_input(
        cls, name: str, payload: list[bytes], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        return as_input(cls.encode_output(name, payload, use_bytes))

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[bytes]:
        return [_decode_base64(item) for item in as_list(request_input.data.root)]
