"""Lists of text (content type ``str``), MLServer's ``mlserver.codecs.string``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, List  # noqa: UP035 - MLServer's TypeHints are typing.List

from inferd.compat.mlserver.codecs.base import (
    InputCodec,
    register_input_codec,
    register_request_codec,
)
from inferd.compat.mlserver.codecs.lists import ListElement, as_list, is_list_of
from inferd.compat.mlserver.codecs.utils import SingleInputRequestCodec
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


class TextListCodec(InputCodec):
    """A list of ``element`` values, one BYTES element each (the text-like codecs);
    a subclass names how one element goes on the wire and comes back:
    ``class Codec(TextListCodec, element=bytes, encode=..., decode=...)``."""

    Element: ClassVar[Any] = str

    def __init_subclass__(
        cls,
        element: Any = None,
        encode: Callable[[Any, bool], bytes | str] | None = None,
        decode: Callable[[ListElement], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        # What is not named is inherited (a user's subclass of StringCodec).
        if element is not None:
            cls.Element = element
        if encode is not None:
            cls.encode_element = staticmethod(encode)  # type: ignore[method-assign,assignment]
        if decode is not None:
            cls.decode_element = staticmethod(decode)  # type: ignore[method-assign,assignment]

    @staticmethod
    def encode_element(element: Any, use_bytes: bool) -> bytes | str:
        raise NotImplementedError

    @staticmethod
    def decode_element(element: ListElement) -> Any:
        raise NotImplementedError

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, cls.Element)

    @classmethod
    def encode_output(
        cls, name: str, payload: list[Any], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        packed = [cls.encode_element(item, use_bytes) for item in payload]
        return text_output(name, packed, cls.ContentType)

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[Any]:
        return [cls.decode_element(item) for item in as_list(response_output.data.root)]

    @classmethod
    def encode_input(
        cls, name: str, payload: list[Any], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        return as_input(cls.encode_output(name, payload, use_bytes=use_bytes))

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[Any]:
        return [cls.decode_element(item) for item in as_list(request_input.data.root)]


def _encode_text(element: str, use_bytes: bool) -> bytes | str:
    return encode_str(element) if use_bytes else element


@register_input_codec
class StringCodec(TextListCodec, element=str, encode=_encode_text, decode=decode_str):
    """A list of Python strings as a BYTES tensor."""

    ContentType = "str"
    TypeHint = List[str]  # noqa: UP006 - typing.List, as MLServer: hints must compare equal


@register_request_codec
class StringRequestCodec(SingleInputRequestCodec):
    """The request's one input (the response's one output) as a list of strings."""

    InputCodec = StringCodec
    ContentType = StringCodec.ContentType
    TypeHint = List[str]  # noqa: UP006 - typing.List, as MLServer: hints must compare equal
