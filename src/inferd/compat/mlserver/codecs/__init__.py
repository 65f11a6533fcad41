"""MLServer's ``mlserver.codecs``: content types between Python values and tensors."""

from __future__ import annotations

from inferd.compat.mlserver.codecs.base import (
    InputCodec,
    InputCodecLike,
    RequestCodec,
    RequestCodecLike,
    find_input_codec,
    find_input_codec_by_payload,
    find_input_codec_by_type_hint,
    find_request_codec,
    find_request_codec_by_payload,
    find_request_codec_by_type_hint,
    register_input_codec,
    register_request_codec,
)
from inferd.compat.mlserver.codecs.base64 import Base64Codec
from inferd.compat.mlserver.codecs.datetime import DatetimeCodec
from inferd.compat.mlserver.codecs.decorator import decode_args
from inferd.compat.mlserver.codecs.errors import CodecError, CodecNotFound
from inferd.compat.mlserver.codecs.numpy import NumpyCodec, NumpyRequestCodec
from inferd.compat.mlserver.codecs.pandas import PandasCodec
from inferd.compat.mlserver.codecs.string import StringCodec, StringRequestCodec
from inferd.compat.mlserver.codecs.utils import (
    SingleInputRequestCodec,
    decode_inference_request,
    decode_request_input,
    encode_inference_response,
    encode_response_output,
    get_decoded,
    get_decoded_or_raw,
    has_decoded,
)

__all__ = [
    "Base64Codec",
    "CodecError",
    "CodecNotFound",
    "DatetimeCodec",
    "InputCodec",
    "InputCodecLike",
    "NumpyCodec",
    "NumpyRequestCodec",
    "PandasCodec",
    "RequestCodec",
    "RequestCodecLike",
    "SingleInputRequestCodec",
    "StringCodec",
    "StringRequestCodec",
    "decode_args",
    "decode_inference_request",
    "decode_request_input",
    "encode_inference_response",
    "encode_response_output",
    "find_input_codec",
    "find_input_codec_by_payload",
    "find_input_codec_by_type_hint",
    "find_request_codec",
    "find_request_codec_by_payload",
    "find_request_codec_by_type_hint",
    "get_decoded",
    "get_decoded_or_raw",
    "has_decoded",
    "register_input_codec",
    "register_request_codec",
]
