"""``@decode_args``: a ``predict`` with typed Python arguments and return value
(MLServer's ``mlserver.codecs.decorator``).

Each argument is the input of the same name, decoded by the codec whose
``TypeHint`` is the argument's type; the return value (or each item of a
returned tuple) is encoded by the codec of the return annotation's type.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin, get_type_hints

from inferd.compat.mlserver.codecs.base import (
    InputCodec,
    RequestCodec,
    find_input_codec,
    find_request_codec,
)
from inferd.compat.mlserver.codecs.errors import CodecNotFound, InputsNotFound, OutputNotFound
from inferd.compat.mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, tuple):
        return list(value)
    if get_origin(value) is tuple:
        return list(get_args(value))
    return [value]


def _is_codec(codec: Any, kind: type) -> bool:
    return (isinstance(codec, type) and issubclass(codec, kind)) or isinstance(codec, kind)


def _unwrap_optional(hint: Any) -> Any:
    """``Optional[X]`` (``X | None``) as ``X``."""
    args = get_args(hint)
    if get_origin(hint) in (Union, type(int | None)) and len(args) == 2 and type(None) in args:
        return next(arg for arg in args if arg is not type(None))
    return hint


class SignatureCodec(RequestCodec):
    """Maps a function's type hints to codecs, and requests to its arguments."""

    def __init__(self, predict: Callable[..., Any]) -> None:
        hints = {name: _unwrap_optional(hint) for name, hint in get_type_hints(predict).items()}
        self._output_hints = _as_list(hints.pop("return", None))
        self._input_hints = hints
        self._input_codecs = {name: self._find(name, hint, True) for name, hint in hints.items()}
        self._output_codecs = [self._find(None, hint, False) for hint in self._output_hints]

    @staticmethod
    def _find(name: str | None, hint: Any, is_input: bool) -> Any:
        codec = find_input_codec(type_hint=hint) or find_request_codec(type_hint=hint)
        if codec is None:
            raise CodecNotFound(name=name, payload_type=str(hint), is_input=is_input)
        return codec

    def decode_request(self, request: InferenceRequest) -> dict[str, Any]:
        arguments: dict[str, Any] = {}
        extra = []
        for request_input in request.inputs:
            codec = self._input_codecs.get(request_input.name)
            if codec is None:
                extra.append(request_input)
                continue
            if not _is_codec(codec, InputCodec):
                raise CodecNotFound(name=request_input.name, is_input=True)
            arguments[request_input.name] = codec.decode_input(request_input)
        if extra:
            found = self._request_codec()
            if found is None:
                raise InputsNotFound(extra, self._input_codecs)
            name, codec = found
            arguments[name] = codec.decode_request(InferenceRequest(inputs=extra))
        return arguments

    def _request_codec(self) -> tuple[str, Any] | None:
        for name, codec in self._input_codecs.items():
            if _is_codec(codec, RequestCodec):
                return name, codec
        return None

    def encode_response(
        self, model_name: str, payload: Any, model_version: str | None = None
    ) -> InferenceResponse:
        outputs: list[ResponseOutput] = []
        for index, value in enumerate(_as_list(payload)):
            outputs += self._encode_outputs(index, value)
        return InferenceResponse(
            model_name=model_name, model_version=model_version, outputs=outputs
        )

    def _encode_outputs(self, index: int, value: Any) -> list[ResponseOutput]:
        if index >= len(self._output_codecs) or not self._output_codecs[index].can_encode(value):
            raise OutputNotFound(index, type(value), self._output_hints)
        codec = self._output_codecs[index]
        if _is_codec(codec, InputCodec):
            return [codec.encode_output(name=f"output-{index}", payload=value)]
        if _is_codec(codec, RequestCodec):
            response: InferenceResponse = codec.encode_response(model_name="", payload=value)
            return response.outputs
        return []


def decode_args(predict: Callable[..., Any]) -> Callable[[Any, InferenceRequest], Any]:
    """Wrap ``async def predict(self, a: np.ndarray, ...) -> np.ndarray`` as an
    ``async def predict(self, payload: InferenceRequest) -> InferenceResponse``."""
    codec = SignatureCodec(predict)

    @functools.wraps(predict)
    async def wrapper(self: Any, request: InferenceRequest) -> InferenceResponse:
        outputs = await predict(self, **codec.decode_request(request))
        return codec.encode_response(self.name, outputs, self.version)

    return wrapper
