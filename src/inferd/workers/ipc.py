"""Messages between a caller and a worker process or the model host: framing and
tensor transport.

A message (a command or a reply: :mod:`inferd.workers.messages`) is a plain
tuple. On the wire it is one frame::

    u32 header length | u32 buffer count | u64 length of each buffer
    header: the message pickled with protocol 5
    buffers: the raw bytes of every large array in the message, back to back

Large arrays travel as pickle protocol 5 out-of-band buffers: they are
written straight from the array's memory (``writev``/``sendmsg``, no copy into
the pickle) and read straight into the bytearray that backs the received array,
so tensors never become Python lists. Small arrays go in-band: one buffer fewer
costs less than the copy it saves.

Both ends use :class:`FrameDecoder`: the caller through an asyncio buffered
protocol (``channel.Channel``, many calls multiplexed by call id), a worker
through blocking ``recv_into`` (:func:`receive`), the model host through its
edge's buffered protocol. The fork parents' channel (:mod:`inferd.workers.packets`)
sends each frame as one packet, read back whole (:func:`decode_frame`).
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any, Generic, TypeVar

import numpy as np

from inferd import errors
from inferd.errors import ConfigurationError, InferdError, ModelError
from inferd.triton import shm_system
from inferd.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

Message = TypeVar("Message")

PREFIX = struct.Struct("<II")
LENGTH_SIZE = 8
# Arrays smaller than this are pickled in-band (measured: a 16-byte tensor costs
# ~3 us more per encode + decode out-of-band than in-band).
IN_BAND_LIMIT = 2048
SCRATCH_SIZE = 256 * 1024
# The least free room the decoder's buffer offers a read.
MIN_ROOM = 4096
# sendmsg takes at most IOV_MAX (1024 on Linux) pieces per call.
MAX_PIECES = 1024

Buffer = bytes | bytearray | memoryview


def encode(message: Any) -> list[Buffer]:
    """The frame for ``message`` as pieces to hand to writev/sendmsg in order."""
    out_of_band: list[memoryview] = []

    def keep_small_in_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < IN_BAND_LIMIT:
            return True
        out_of_band.append(raw)
        return False

    header = pickle.dumps(message, protocol=5, buffer_callback=keep_small_in_band)
    count = len(out_of_band)
    if not count:
        return [PREFIX.pack(len(header), 0) + header]
    prefix = struct.pack(f"<II{count}Q", len(header), count, *(b.nbytes for b in out_of_band))
    return [prefix + header, *out_of_band]


# Requests and responses cross as tuples, and each array as (dtype, shape, raw
# buffer): ~4x cheaper than pickling the dataclasses and numpy's own reduce.

PackedTensor = tuple[str, str | None, tuple[int, ...], Any, dict[str, Any]]
"""(name, dtype name or None, shape, raw buffer, a shm_system.SharedSlice (where the bytes
lie in a client's shared memory, which the worker maps) or the data itself, parameters)."""
PackedRequest = tuple[
    list[PackedTensor],
    str | None,
    dict[str, Any],
    list[tuple[str, dict[str, Any]]],
    tuple,
    float | None,
]
"""(inputs, id, parameters, requested outputs as (name, parameters), batch rows, deadline)."""
PackedResponse = tuple[list[PackedTensor], str, str | None, str | None, dict[str, Any]]
"""(outputs, model name, model version, id, parameters)."""


def pack_tensors(tensors: list[Tensor]) -> list[PackedTensor]:
    return [(t.name, *_pack_array(t.data), t.parameters) for t in tensors]


# dtype <-> dtype.str, cached: numpy builds the string (and parses it) on every use.
_DTYPE_NAMES: dict[np.dtype[Any], str] = {}
_DTYPES: dict[str, np.dtype[Any]] = {}


def _pack_array(data: Any) -> tuple[str | None, tuple[int, ...], Any]:
    if not isinstance(data, np.ndarray) or data.dtype.hasobject or data.dtype.fields:
        return None, (), data  # BYTES (object arrays) and oddities: plain pickle
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    dtype = data.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        # Extension dtypes such as ml_dtypes.bfloat16 have the .str of raw bytes
        # ("<V2"); their registered name finds them again.
        name = dtype.str if np.dtype(dtype.str) == dtype else dtype.name
        _DTYPE_NAMES[dtype] = name
    if data.base is not None and (where := shm_system.shared_slice(data)) is not None:
        return name, data.shape, where  # a client's shared memory: the worker maps it too
    if dtype.kind == "V":  # numpy cannot export these as a buffer: send their bytes
        return name, data.shape, pickle.PickleBuffer(data.reshape(-1).view(np.uint8))
    return name, data.shape, pickle.PickleBuffer(data)


def _unpack_array(dtype_name: str | None, shape: tuple[int, ...], data: Any) -> Any:
    if dtype_name is None:
        return data
    dtype = _DTYPES.get(dtype_name)
    if dtype is None:
        dtype = _DTYPES[dtype_name] = np.dtype(dtype_name)
    if type(data) is shm_system.SharedSlice:
        data = shm_system.read_slice(data)
    return np.frombuffer(data, dtype).reshape(shape)


def unpack_tensors(packed: list[PackedTensor]) -> list[Tensor]:
    return [
        Tensor(name, _unpack_array(dtype, shape, data), params)
        for name, dtype, shape, data, params in packed
    ]


def pack_request(request: InferenceRequest) -> PackedRequest:
    outputs = [(output.name, output.parameters) for output in request.outputs]
    inputs = pack_tensors(request.inputs)
    return inputs, request.id, request.parameters, outputs, request.batch_rows, request.deadline


def unpack_request(packed: PackedRequest) -> InferenceRequest:
    inputs, request_id, parameters, outputs, rows, deadline = packed
    requested = [RequestedOutput(name, params) for name, params in outputs]
    tensors = unpack_tensors(inputs)
    return InferenceRequest(tensors, request_id, parameters, requested, rows, deadline)


def pack_response(response: InferenceResponse) -> PackedResponse:
    return (
        pack_tensors(response.outputs),
        response.model_name,
        response.model_version,
        response.id,
        response.parameters,
    )


def unpack_response(packed: PackedResponse) -> InferenceResponse:
    outputs, model_name, model_version, response_id, parameters = packed
    return InferenceResponse(
        unpack_tensors(outputs), model_name, model_version, response_id, parameters
    )


class ProtocolError(Exception):
    """The byte stream is not a sequence of valid frames."""


class _PartialFrame:
    __slots__ = ("buffers", "header", "lengths")

    def __init__(self, header: bytes, lengths: tuple[int, ...]) -> None:
        self.header = header
        self.lengths = lengths
        self.buffers: list[bytearray] = []


class FrameDecoder(Generic[Message]):
    """Turns a byte stream back into messages (commands in a worker, replies in the
    main process).

    The reader asks :meth:`get_buffer` where to put the next bytes and reports
    how many arrived with :meth:`buffer_updated`, which returns the messages
    completed. Small frames are parsed out of one scratch buffer; a large
    out-of-band buffer is read directly into its own bytearray.
    """

    def __init__(self, scratch_size: int = SCRATCH_SIZE) -> None:
        self._scratch = bytearray(scratch_size)
        self._view = memoryview(self._scratch)
        self._start = 0  # first unparsed byte in the scratch buffer
        self._end = 0  # end of the bytes received into it
        self._frame: _PartialFrame | None = None
        self._target: bytearray | None = None  # a large buffer being filled in place
        self._filled = 0

    def get_buffer(self) -> memoryview:
        if self._target is not None:
            return memoryview(self._target)[self._filled :]
        if len(self._scratch) - self._end < MIN_ROOM:
            self._make_room()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> list[Message]:
        if self._target is not None:
            self._filled += nbytes
            if self._filled < len(self._target):
                return []
            assert self._frame is not None
            self._frame.buffers.append(self._target)
            self._target = None
        else:
            self._end += nbytes
        return self._parse()

    def _make_room(self) -> None:
        unparsed = self._end - self._start
        if self._start == 0:
            # A header larger than the scratch buffer (e.g. big in-band data): grow.
            self._replace_scratch(2 * len(self._scratch))
        else:
            self._scratch[:unparsed] = self._view[self._start : self._end]
            self._start, self._end = 0, unparsed

    def _replace_scratch(self, size: int) -> None:
        # A new bytearray rather than a resize: the old one may still be exported.
        scratch = bytearray(size)
        unparsed = self._end - self._start
        scratch[:unparsed] = self._view[self._start : self._end]
        self._scratch, self._view = scratch, memoryview(scratch)
        self._start, self._end = 0, unparsed

    def _parse(self) -> list[Message]:
        messages: list[Message] = []
        while True:
            if self._frame is None:
                start = self._start
                if self._end - start < PREFIX.size:
                    break
                header_length, count = PREFIX.unpack_from(self._scratch, start)
                if count == 0:  # the common small frame: decode it in place
                    frame_end = start + PREFIX.size + header_length
                    if frame_end > self._end:
                        break
                    messages.append(_unpickle(self._view[start + PREFIX.size : frame_end], []))
                    self._start = frame_end
                    continue
                if not self._parse_header(header_length, count):
                    break
            if not self._take_buffers():
                break
            frame, self._frame = self._frame, None
            assert frame is not None
            messages.append(_unpickle(frame.header, frame.buffers))
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._scratch) > SCRATCH_SIZE:
                self._replace_scratch(SCRATCH_SIZE)  # give back what one big header took
        return messages

    def _parse_header(self, header_length: int, count: int) -> bool:
        lengths_start = self._start + PREFIX.size
        lengths_end = lengths_start + LENGTH_SIZE * count
        frame_end = lengths_end + header_length
        if frame_end > self._end:
            return False
        lengths = struct.unpack_from(f"<{count}Q", self._scratch, lengths_start)
        # Copied: the scratch may be reused before the frame's buffers have all arrived.
        self._frame = _PartialFrame(bytes(self._view[lengths_end:frame_end]), lengths)
        self._start = frame_end
        return True

    def _take_buffers(self) -> bool:
        """Move the frame's buffers out of the scratch; False while one is missing."""
        frame = self._frame
        assert frame is not None
        while len(frame.buffers) < len(frame.lengths):
            length = frame.lengths[len(frame.buffers)]
            available = self._end - self._start
            if available >= length:
                frame.buffers.append(bytearray(self._view[self._start : self._start + length]))
                self._start += length
                continue
            target = bytearray(length)
            target[:available] = self._view[self._start : self._end]
            self._start = self._end = 0
            self._target, self._filled = target, available
            return False
        return True


def decode_frame(frame: Buffer) -> Any:
    """The message of one whole frame (a packet of the fork parents' channel,
    workers/packets.py): the same decoder as a stream's, fed once; ProtocolError
    unless ``frame`` is exactly one frame."""
    decoder: FrameDecoder[Any] = FrameDecoder(len(frame) + MIN_ROOM)
    decoder.get_buffer()[: len(frame)] = frame
    messages = decoder.buffer_updated(len(frame))
    if len(messages) != 1 or decoder._end:  # a cut frame, or bytes after it
        raise ProtocolError(f"a packet of {len(frame)} bytes is not one whole frame")
    return messages[0]


def _unpickle(header: Buffer, buffers: list[bytearray]) -> Any:
    try:
        return pickle.loads(header, buffers=buffers)
    except Exception as error:
        raise ProtocolError(f"cannot decode a message: {error}") from error


# Errors cross the boundary as (class name, message, attributes) and come back as
# the same InferdError class, so a worker's 400 stays a 400.
WireError = tuple[str, str, dict[str, Any]]


def error_to_wire(error: BaseException) -> WireError:
    if isinstance(error, InferdError | ConfigurationError):
        attributes = {k: v for k, v in vars(error).items() if _is_plain(v)}
        return type(error).__name__, str(error), attributes
    return ModelError.__name__, str(error) or type(error).__name__, {}


def crosses_as_itself(error: BaseException) -> bool:
    """Whether :func:`error_from_wire` rebuilds ``error`` as its own class: one that
    ``inferd.errors`` names (any other comes back as a ModelError)."""
    return getattr(errors, type(error).__name__, None) is type(error)


def error_from_wire(wire: WireError) -> Exception:
    name, message, attributes = wire
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, InferdError | ConfigurationError)):
        return ModelError(message)
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(attributes)
    if isinstance(error, InferdError):
        error.message = message
    return error


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


# The worker's end: blocking sends and receives on its socket.


def send(sock: socket.socket, pieces: list[Buffer]) -> None:
    """Send every piece (flat byte buffers, as :func:`encode` makes) in order, with
    scatter/gather I/O, however many calls that takes."""
    while pieces:
        sent = sock.sendmsg(pieces[:MAX_PIECES])
        pieces = _unsent(pieces, sent)


def _unsent(pieces: list[Buffer], sent: int) -> list[Buffer]:
    for index, piece in enumerate(pieces):
        if sent < len(piece):
            return [memoryview(piece)[sent:], *pieces[index + 1 :]]
        sent -= len(piece)
    return []


def receive(sock: socket.socket, decoder: FrameDecoder[Message]) -> list[Message] | None:
    """Block until at least one message arrives; None when the other end closed."""
    while True:
        nbytes = sock.recv_into(decoder.get_buffer())
        if nbytes == 0:
            return None
        messages = decoder.buffer_updated(nbytes)
        if messages:
            return messages
