"""Open Inference Protocol protobuf messages <-> core types.

Tensor data goes straight between protobuf and numpy: raw contents through
``np.frombuffer`` (``inferd.tensors.encoding.array_from_bytes``), typed contents through
one numpy call on the repeated field (upb hands numpy a long field at once), with
no Python loop over elements except for BYTES.

Outputs travel in ``raw_output_contents`` (what tritonclient reads) unless the
request sets the boolean parameter ``raw_output`` to false; then every output
is written to its typed ``contents`` field instead. FP16 and BF16 have no typed
field, so they travel only raw.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from inferd.errors import InvalidRequest
from inferd.protocol import pb
from inferd.protocol.parameters import decode_parameters, encode_parameters
from inferd.server.output_form import PLAIN, OutputForm, taken_from_outputs
from inferd.tensors.datatypes import element_count, numpy_dtype
from inferd.tensors.encoding import array_from_bytes, array_to_bytes, bytes_items, check_shape
from inferd.triton.shm import (
    REGION,
    RegionClaim,
    check_outputs,
    read_input,
    without_location,
)
from inferd.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    ModelMetadata,
    Parameters,
    RepositoryEntry,
    RequestedOutput,
    ServerMetadata,
    Tensor,
    refuse_repeated_outputs,
    repeated_input,
)

# Request parameter that picks the output encoding: true (default) = raw bytes.
RAW_OUTPUT_PARAMETER = "raw_output"

# The InferTensorContents field that carries each datatype's typed data.
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}

# The numpy dtype each typed contents field holds on the wire.
_WIRE_DTYPE = {
    "bool_contents": np.dtype(np.bool_),
    "int_contents": np.dtype(np.int32),
    "int64_contents": np.dtype(np.int64),
    "uint_contents": np.dtype(np.uint32),
    "uint64_contents": np.dtype(np.uint64),
    "fp32_contents": np.dtype(np.float32),
    "fp64_contents": np.dtype(np.float64),
}
_SMALL_CONTENTS = 32

# ---- inference requests ---------------------------------------------------


def decode_infer_request(
    message: pb.ModelInferRequest, regions: RegionClaim | None = None
) -> tuple[InferenceRequest, OutputForm]:
    """The request, and the form its outputs are asked in (server/output_form.py: taken
    out of their parameters); inputs in shared memory are read through ``regions``,
    the request's claim (held until it ends; None: off)."""
    raw_contents = message.raw_input_contents
    if raw_contents and len(raw_contents) != len(message.inputs):
        _check_raw_count(message)  # unless inputs in shared memory make up the difference
    inputs = []
    seen: set[str] = set()
    raw_index = 0
    for tensor in message.inputs:
        name = tensor.name
        if name in seen:
            raise repeated_input(name)
        seen.add(name)
        parameters = decode_parameters(tensor.parameters) if tensor.parameters else {}
        if REGION in parameters:
            data = _array_from_shared_memory(tensor, parameters, regions)
            parameters = without_location(parameters)
        elif raw_contents:
            if raw_index == len(raw_contents):
                _check_raw_count(message)
            data = _array_from_raw(tensor, raw_contents[raw_index])
            raw_index += 1
        else:
            data = _array_from_contents(tensor)
        inputs.append(Tensor(name, data, parameters))
    if raw_index != len(raw_contents):
        _check_raw_count(message)
    form = PLAIN
    outputs = _requested_outputs(message.outputs) if message.outputs else []
    if outputs:
        form = taken_from_outputs(outputs, form)
        check_outputs(regions, outputs)
    request = InferenceRequest(
        inputs=inputs,
        id=message.id or None,
        parameters=decode_parameters(message.parameters) if message.parameters else {},
        outputs=outputs,
    )
    return request, form


def _check_raw_count(message: pb.ModelInferRequest) -> None:
    """InvalidRequest unless every input not in shared memory has one raw contents entry."""
    raw, count = len(message.raw_input_contents), len(message.inputs)
    in_memory = sum(REGION in decode_parameters(t.parameters) for t in message.inputs)
    if raw != count - in_memory:
        raise InvalidRequest(
            f"raw_input_contents has {raw} entries for {count} inputs; when raw contents "
            "are used, every input needs exactly one, in order"
            + (" (inputs in shared memory have none)" if in_memory else "")
        )


def _array_from_shared_memory(
    tensor: pb.ModelInferRequest.InferInputTensor,
    parameters: Parameters,
    regions: RegionClaim | None,
) -> np.ndarray:
    if tensor.HasField("contents") and tensor.contents.ListFields():
        raise InvalidRequest(
            f"Input {tensor.name!r} names a shared memory region and also has contents"
        )
    return read_input(regions, tensor.name, tensor.datatype, tensor.shape, parameters)


def _requested_outputs(outputs: Iterable[Any]) -> list[RequestedOutput]:
    outputs = list(outputs)
    refuse_repeated_outputs([output.name for output in outputs])
    return [RequestedOutput(o.name, decode_parameters(o.parameters)) for o in outputs]


def _array_from_raw(tensor: pb.ModelInferRequest.InferInputTensor, raw: bytes) -> np.ndarray:
    if tensor.HasField("contents") and tensor.contents.ListFields():
        raise InvalidRequest(
            f"Input {tensor.name!r} has both typed contents and raw_input_contents; "
            "a request uses one or the other for all its inputs"
        )
    return array_from_bytes(tensor.name, tensor.datatype, tensor.shape, raw)


def _array_from_contents(tensor: pb.ModelInferRequest.InferInputTensor) -> np.ndarray:
    name, datatype = tensor.name, tensor.datatype
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        numpy_dtype(datatype)  # raises for a datatype that does not exist
        raise InvalidRequest(
            f"Input {name!r}: {datatype} has no typed contents field; send it in raw_input_contents"
        )
    dims = check_shape(name, tensor.shape)
    count = element_count(dims)
    contents = tensor.contents
    values = getattr(contents, field)
    # Exactly the datatype's own field holds data (none at all for an empty tensor).
    if len(values) != count or len(contents.ListFields()) != (1 if count else 0):
        raise InvalidRequest(_misplaced_data(name, datatype, field, dims, contents))
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(dims)
    wire_dtype = _WIRE_DTYPE[field]
    # fromiter is quicker for a few elements; asarray reads a long field in one go.
    if count <= _SMALL_CONTENTS:
        array = np.fromiter(values, dtype=wire_dtype, count=count)
    else:
        array = np.asarray(values, dtype=wire_dtype)
    dtype = numpy_dtype(datatype)
    if wire_dtype.itemsize > dtype.itemsize and count:
        _check_range(name, datatype, dtype, array)
    return array.astype(dtype, copy=False).reshape(dims)


def _misplaced_data(
    name: str, datatype: str, field: str, dims: tuple[int, ...], contents: pb.InferTensorContents
) -> str:
    present = [descriptor.name for descriptor, _ in contents.ListFields()]
    if not present:
        return f"Input {name!r} has no data: put it in contents.{field} or in raw_input_contents"
    if present != [field]:
        used = ", ".join(f"contents.{other}" for other in present)
        return f"Input {name!r} is {datatype}, so its data belongs in contents.{field}, not {used}"
    return (
        f"Input {name!r}: shape {list(dims)} needs {element_count(dims)} elements, "
        f"contents.{field} has {len(getattr(contents, field))}"
    )


def _check_range(name: str, datatype: str, dtype: np.dtype, array: np.ndarray) -> None:
    """INT8/16 and UINT8/16 share 32-bit fields; refuse values that would wrap."""
    info = np.iinfo(dtype)
    if array.min() < info.min or array.max() > info.max:
        raise InvalidRequest(
            f"Input {name!r}: values out of range for {datatype} ({info.min}..{info.max})"
        )


def wants_raw_output(request: InferenceRequest) -> bool:
    value = request.parameters.get(RAW_OUTPUT_PARAMETER, True)
    if not isinstance(value, bool):
        raise InvalidRequest(
            f"Parameter {RAW_OUTPUT_PARAMETER!r} must be a bool (bool_param): "
            "true for raw_output_contents, false for typed contents"
        )
    return value


# ---- inference responses --------------------------------------------------


def encode_infer_response(
    response: InferenceResponse,
    raw: bool,
    message: pb.ModelInferResponse | None = None,
    shared: dict[str, dict[str, Any]] | None = None,
) -> pb.ModelInferResponse:
    """``response`` as a message: a new one, or ``message`` (empty) filled in place (a
    stream's answer is built inside its ModelStreamInferResponse, not copied there).

    ``shared``: the outputs written to shared memory, each with the parameters it
    answers with instead of its data (raw: an empty entry keeps the others' places)."""
    if message is None:
        message = pb.ModelInferResponse()
    message.model_name = response.model_name
    if response.model_version:
        message.model_version = response.model_version
    if response.id:
        message.id = response.id
    if response.parameters:
        for key, parameter in encode_parameters(response.parameters).items():
            message.parameters[key].CopyFrom(parameter)
    # outputs.add() builds each output in place; passing messages to a constructor copies them.
    for tensor in response.outputs:
        data = tensor.data
        datatype = tensor.datatype
        parameters = tensor.parameters
        in_memory = shared is not None and tensor.name in shared
        if in_memory:
            parameters = {**parameters, **shared[tensor.name]}  # type: ignore[index]
        output = message.outputs.add(
            name=tensor.name,
            datatype=datatype,
            shape=data.shape,
            parameters=encode_parameters(parameters) if parameters else None,
        )
        if in_memory:
            if raw:
                message.raw_output_contents.append(b"")
        elif raw:
            message.raw_output_contents.append(array_to_bytes(data))
        else:
            output.contents.CopyFrom(_typed_contents(tensor.name, datatype, data))
    return message


def _typed_contents(name: str, datatype: str, data: np.ndarray) -> pb.InferTensorContents:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidRequest(
            f"Output {name!r} is {datatype}, which has no typed contents field; "
            f"leave the {RAW_OUTPUT_PARAMETER!r} parameter unset to receive raw outputs"
        )
    # BYTES outputs may be object arrays of bytes or str, or numpy text arrays.
    values: list[Any] = (
        bytes_items(data) if field == "bytes_contents" else data.reshape(-1).tolist()
    )
    return pb.InferTensorContents(**{field: values})


# ---- metadata and repository ----------------------------------------------


def encode_server_metadata(metadata: ServerMetadata) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(
        name=metadata.name, version=metadata.version, extensions=metadata.extensions
    )


def encode_model_metadata(metadata: ModelMetadata) -> pb.ModelMetadataResponse:
    return pb.ModelMetadataResponse(
        name=metadata.name,
        versions=metadata.versions,
        platform=metadata.platform,
        inputs=_tensor_metadata(metadata.inputs),
        outputs=_tensor_metadata(metadata.outputs),
        parameters=encode_parameters(metadata.parameters),
    )


def _tensor_metadata(
    tensors: Iterable[MetadataTensor],
) -> list[pb.ModelMetadataResponse.TensorMetadata]:
    return [
        pb.ModelMetadataResponse.TensorMetadata(
            name=tensor.name,
            datatype=tensor.datatype,
            shape=tensor.shape,
            parameters=encode_parameters(tensor.parameters),
        )
        for tensor in tensors
    ]


def encode_repository_index(entries: Iterable[RepositoryEntry]) -> pb.RepositoryIndexResponse:
    return pb.RepositoryIndexResponse(
        models=[
            pb.RepositoryIndexResponse.ModelIndex(
                name=entry.name,
                version=entry.version or "",
                state=entry.state.value,
                reason=entry.reason,
            )
            for entry in entries
        ]
    )
