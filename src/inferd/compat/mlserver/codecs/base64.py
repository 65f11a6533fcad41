"""Lists of bytes sent base64-encoded (content type ``base64``), MLServer's
``mlserver.codecs.base64``."""

from __future__ import annotations

import base64
import binascii
from typing import List  # noqa: UP035 - MLServer's TypeHints are typing.List

from inferd.compat.mlserver.codecs.base import register_input_codec
from inferd.compat.mlserver.codecs.lists import ListElement
from inferd.compat.mlserver.codecs.string import TextListCodec


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
class Base64Codec(TextListCodec, element=bytes, encode=_encode_base64, decode=_decode_base64):
    """A list of bytes, base64-encoded on the wire."""

    ContentType = "base64"
    TypeHint = List[bytes]  # noqa: UP006 - typing.List, as MLServer: hints must compare equal
