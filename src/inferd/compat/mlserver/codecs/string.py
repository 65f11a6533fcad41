"""Lists of text (content type ``str``), MLServer's ``mlserver.codecs.string``."""

from __future__ import annotations

from typing import Any, List  # noqa: UP035 - MLServer's TypeHints are typing.List

from inferd.compat.mlserver.codecs.base import (
    InputCodec,
    register_input_codec,
    register_request_codec,
)
from inferd.compat.mlserver.codecs.lists import ListElement, as_list, is_list_of
from inferd.compat.mlserver.codecs.utils import InputOrOutput, SingleInputRequestCodec
from inferd.compat.mlserver.types import Parameters, RequestInput, ResponseOutput

_ENCODING = "utf-8"


def encode_str(elem: str) -> bytes:
    return elem.encode(_ENCODING)


def decode_str(encoded: ListElement | None, str_codec: str = _ENCODING) -> str | None:
    if encoded is None:
        return None
    if isinstance(encoded, bytes):
        return encoded.decode(str_codec)
    if isinstance(encoded, str):
        return encoded
    return ""


def _decode(item: InputOrOutput) -> list[Any]:
    return [decode_str(element) for element in as_list(item.data.root)]


def text_output(name: str, data: list[Any], content_type: str) -> ResponseOutput:
    """A BYTES ``[n, 1]`` output tagged ``content_type`` (shared by the text-like codecs)."""
    fields: dict[str, Any] = {"name": name, "datatype": "BYTES", "data": data}
    return ResponseOutput(
        **fields, shape=[len(data), 1], parameters=Parameters(content_type=content_type)
    )


def as_input(output: ResponseOutput) -> RequestInput:
    return RequestInput(
        name=output.name,
        datatype=output.datatype,
        shape=output.shape,
        data=output.data,
        parameters=output.parameters,
    )


@register_input_codec
class StringCodec(InputCodec):
    """A list of Python strings as a BYTES tensor."""

    ContentType = "str"
    TypeHint = List[str]  # noqa: UP006 - typing.List, as MLServer: hints must compare equal

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, str)

    @classmethod
    def encode_output(
        cls, name: str, payload: list[str], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        packed = [encode_str(item) for item in payload] if use_bytes else list(payload)
        return text_output(name, packed, cls.ContentType)

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[Any]:
        return _decode(response_output)

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[Any]:
        return _decode(request_input)

    @classmethod
    def encode_input(
        cls, name: str, payload: list[str], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        return as_input(cls.encode_output(name, payload, use_bytes))


@register_request_codec
class StringRequestCodec(SingleInputRequestCodec):
    """The request's one input (the response's one output) as a list of strings."""

    InputCodec = StringCodec
    ContentType = StringCodec.ContentType
    TypeHint = List[str]  # noqa: UP006 - typing.List, as MLServer: hints must compare equal
