"""Lists of datetimes as ISO 8601 text (content type ``datetime``), MLServer's
``mlserver.codecs.datetime``."""

from __future__ import annotations

from datetime import datetime
from typing import List, Union  # noqa: UP035

from inferd.compat.mlserver.codecs.base import register_input_codec
from inferd.compat.mlserver.codecs.lists import ListElement
from inferd.compat.mlserver.codecs.string import TextListCodec

_Datetime = Union[str, datetime]  # noqa: UP007 - as MLServer spells it: hints must compare equal


def _to_iso(elem: _Datetime) -> str:
    return elem if isinstance(elem, str) else elem.isoformat()


def _encode_datetime(elem: _Datetime, use_bytes: bool) -> bytes | str:
    text = _to_iso(elem)
    return text.encode("ascii") if use_bytes else text


def _decode_datetime(elem: ListElement) -> datetime:
    return datetime.fromisoformat(elem if isinstance(elem, str) else elem.decode("ascii"))


@register_input_codec
class DatetimeCodec(
    TextListCodec, element=datetime, encode=_encode_datetime, decode=_decode_datetime
):
    """A list of datetimes (or ISO strings) as BYTES ISO 8601 text."""

    ContentType = "datetime"
    TypeHint = List[_Datetime]  # noqa: UP006
