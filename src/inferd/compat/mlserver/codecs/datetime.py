"""Lists of datetimes as ISO 8601 text (content type ``datetime``), MLServer's
``mlserver.codecs.datetime``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, List, Union  # noqa: UP035

from inferd.compat.mlserver.codecs.base import InputCodec, register_input_codec
from inferd.compat.mlserver.codecs.lists import ListElement, as_list, is_list_of
from inferd.compat.mlserver.codecs.string import as_input, text_output
from inferd.compat.mlserver.types import RequestInput, ResponseOutput

_Datetime = Union[str, datetime]  # noqa: UP007 - as MLServer spells it: hints must compare equal


def _to_iso(elem: _Datetime) -> str:
    return elem if isinstance(elem, str) else elem.isoformat()


def _encode_datetime(elem: _Datetime, use_bytes: bool) -> bytes | str:
    text = _to_iso(elem)
    return text.encode("ascii") if use_bytes else text


def _decode_datetime(elem: ListElement) -> datetime:
    return datetime.fromisoformat(elem if isinstance(elem, str) else elem.decode("ascii"))


@register_input_codec
class DatetimeCodec(InputCodec):
    """A list of datetimes (or ISO strings) as BYTES ISO 8601 text."""

    ContentType = "datetime"
    TypeHint = List[_Datetime]  # noqa: UP006

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return is_list_of(payload, datetime)

    @classmethod
    def encode_output(
        cls, name: str, payload: list[_Datetime], use_bytes: bool = True, **kwargs: Any
    ) -> ResponseOutput:
        packed = [_encode_datetime(item, use_bytes) for item in payload]
        return text_output(name, packed, cls.ContentType)

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> list[datetime]:
        return [_decode_datetime(item) for item in as_list(response_output.data.root)]

    @classmethod
    def encode_input(
        cls, name: str, payload: list[_Datetime], use_bytes: bool = True, **kwargs: Any
    ) -> RequestInput:
        return as_input(cls.encode_output(name, payload, use_bytes=use_bytes))

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list[datetime]:
        return [_decode_datetime(item) for item in as_list(request_input.data.root)]
