"""Raw binary inference requests: Triton's ``Inference-Header-Content-Length: 0``.

With the binary tensor data extension, a request whose JSON header is empty (the
header says 0) is the raw little-endian bytes of a model's one input and nothing
else: its name, datatype and shape come from the model's declared input, by
Triton's rules (its core's ``InferenceRequest::Normalize``):

- a model that batches gets a batch of 1 (its declared first dimension);
- one other ``-1`` dimension is deduced from the byte count; more than one is
  ambiguous and refused, as Triton refuses it;
- a BYTES input declared with one element (``[1]``) takes the whole body as that
  element (a raw image to a Python model); any other BYTES shape is refused.

A body that does not make a whole number of elements, or too many or too few for
the shape, is refused, as are models with several inputs or none declared, and a
body labelled ``application/json`` (a JSON request whose header length was
mistaken; Triton reads it as raw bytes). As in Triton, every output of such a
request is answered as raw bytes after a JSON header (``binary_data_output``).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from inferd.errors import InvalidRequest
from inferd.server.output_form import OutputForm
from inferd.server.rest.codec_generate import fit_shape
from inferd.tensors.datatypes import numpy_dtype
from inferd.tensors.encoding import array_from_bytes
from inferd.types import InferenceRequest, MetadataTensor, Tensor

NEEDS_HEADER = "send a JSON header (Inference-Header-Content-Length > 0) that names it"


def decode_raw_request(
    body: bytes,
    model: str,
    declared: Sequence[MetadataTensor],
    content_type: bytes | None,
    batched: bool = False,
) -> tuple[InferenceRequest, OutputForm]:
    """The request a raw body stands for, given the model's declared inputs (their
    first dimension the batch's when ``batched``); a body labelled JSON is refused
    (its header's length was surely meant, not 0)."""
    if content_type is not None and content_type.lower().startswith(b"application/json"):
        raise InvalidRequest(
            "Inference-Header-Content-Length: 0 makes the body the raw bytes of the "
            "model's one input, but its Content-Type is application/json: give the JSON "
            "header's length, or send the raw bytes as application/octet-stream"
        )
    if len(declared) != 1:
        names = ", ".join(repr(tensor.name) for tensor in declared) or "none"
        raise InvalidRequest(
            "A raw binary request (Inference-Header-Content-Length: 0) is the one input "
            f"of a model that has exactly one; model {model!r} declares {names}: "
            "send a JSON header that names each input"
        )
    (spec,) = declared
    shape = list(spec.shape)
    if batched and shape:
        shape[0] = 1  # a batch of one
    dims = shape[1:] if batched else shape
    if dims.count(-1) > 1:
        raise InvalidRequest(
            f"The shape of the raw input {spec.name!r} can not be deduced because there "
            f"are more than one variable-sized dimension (declared {list(spec.shape)}); "
            f"{NEEDS_HEADER} with its shape"
        )
    if spec.datatype == "BYTES":
        return _one_element(spec, shape, dims, body), OutputForm(binary_default=True)
    itemsize = numpy_dtype(spec.datatype).itemsize
    if len(body) % itemsize:
        raise InvalidRequest(
            f"Input {spec.name!r}: a raw body of {len(body)} bytes is not a whole number "
            f"of {spec.datatype} elements ({itemsize} bytes each)"
        )
    shape = fit_shape(spec.name, (len(body) // itemsize,), shape)
    data = array_from_bytes(spec.name, spec.datatype, shape, body)
    return InferenceRequest(inputs=[Tensor(spec.name, data)]), OutputForm(binary_default=True)


def _one_element(
    spec: MetadataTensor, shape: list[int], dims: list[int], body: bytes
) -> InferenceRequest:
    """A BYTES input of one element (declared ``[1]``): the whole body is that element."""
    if -1 in dims or prod(dims) != 1:
        raise InvalidRequest(
            f"For BYTE datatype raw input {spec.name!r}, the model must have input shape "
            f"[1] (it declares {list(spec.shape)}): a raw body is one element; "
            f"{NEEDS_HEADER} for more"
        )
    data = np.empty(1, dtype=object)
    data[0] = body
    return InferenceRequest(inputs=[Tensor(spec.name, data.reshape(shape))])
