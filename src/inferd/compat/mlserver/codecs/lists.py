"""Lists of text or bytes, or one such element (MLServer's ``mlserver.codecs.lists``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

ListElement = bytes | str


def is_list_of(payload: Any, instance_type: Any) -> bool:
    return isinstance(payload, list) and all(isinstance(item, instance_type) for item in payload)


def as_list(payload: Any) -> Iterator[Any]:
    """The elements of ``payload``: a list's or an array's items, else ``payload`` alone."""
    if isinstance(payload, list):
        yield from payload
    elif hasattr(payload, "tolist") and getattr(payload, "ndim", 0) > 0:
        yield from payload.reshape(-1).tolist()
    else:
        yield payload
