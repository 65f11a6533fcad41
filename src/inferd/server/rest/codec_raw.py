"""Raw binary inference requests: Triton's ``Inference-Header-Content-Length: 0``.

With the binary tensor data extension, a request whose JSON header is empty (the
header says 0) is the raw little-endian bytes of a model's one input and nothing
else: its name, datatype and shape come from the model's declared input. The
shape is the declared one, its ``-1`` dimensions deduced from the byte count as a
flat generate value's are (the last ``-1`` takes what is left, others are 1); a
body that does not make a whole number of elements, or too many or too few for the
declared shape, is refused. BYTES inputs (whose elements carry their own lengths)
and models with several inputs, or none declared, need a JSON header and are
refused with a 400 that says so, as is a body labelled ``application/json`` (a
JSON request whose header length was mistaken; Triton reads it as raw bytes).
As in Triton, every output of such a request is answered as raw bytes after a
JSON header (``binary_data_output``).
"""

from __future__ import annotations

from collections.abc import Sequence

from inferd.errors import InvalidRequest
from inferd.server.output_form import OutputForm
from inferd.server.rest.codec_generate import fit_shape
from inferd.tensors.datatypes import numpy_dtype
from inferd.tensors.encoding import array_from_bytes
from inferd.types import InferenceRequest, MetadataTensor, Tensor

NEEDS_HEADER = "send a JSON header (Inference-Header-Content-Length > 0) that names it"


def decode_raw_request(
    body: bytes, model: str, declared: Sequence[MetadataTensor], content_type: bytes | None
) -> tuple[InferenceRequest, OutputForm]:
    """The request a raw body stands for, given the model's declared inputs; a body
    labelled JSON is refused (its header's length was surely meant, not 0)."""
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
    if spec.datatype == "BYTES":
        raise InvalidRequest(
            f"Input {spec.name!r} is BYTES, which a raw binary request cannot carry "
            f"(each element needs its length); {NEEDS_HEADER}"
        )
    itemsize = numpy_dtype(spec.datatype).itemsize
    if len(body) % itemsize:
        raise InvalidRequest(
            f"Input {spec.name!r}: a raw body of {len(body)} bytes is not a whole number "
            f"of {spec.datatype} elements ({itemsize} bytes each)"
        )
    shape = fit_shape(spec.name, (len(body) // itemsize,), spec.shape)
    data = array_from_bytes(spec.name, spec.datatype, shape, body)
    return InferenceRequest(inputs=[Tensor(spec.name, data)]), OutputForm(binary_default=True)
