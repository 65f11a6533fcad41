"""Framing and tensor transport between the main process and its workers."""

from __future__ import annotations

import asyncio
import pickle
import random
import socket
import threading
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from inferd.errors import (
    ConfigurationError,
    InvalidRequest,
    ModelError,
    ModelNotFound,
    Overloaded,
    WorkerLost,
)
from inferd.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from inferd.workers import ipc, messages
from inferd.workers.channel import Channel


def frame_bytes(message: Any) -> bytes:
    return b"".join(bytes(piece) for piece in ipc.encode(message))


def feed(decoder: ipc.FrameDecoder, data: bytes, chunk_sizes: list[int]) -> list[Any]:
    """Deliver ``data`` as a stream would, in chunks no larger than the reader asks for."""
    messages, position, sizes = [], 0, iter(chunk_sizes)
    while position < len(data):
        target = decoder.get_buffer()
        size = min(next(sizes, len(data)), len(target), len(data) - position)
        target[:size] = data[position : position + size]
        position += size
        messages += decoder.buffer_updated(size)
    return messages


ARRAYS = {
    "small float": np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32),
    "large int": np.arange(100_000, dtype=np.int64).reshape(100, 1000),
    "bool": np.array([True, False, True]),
    "fp16": np.array([0.5, -1.25], dtype=np.float16),
    "bf16": np.array([0.5, -1.25], dtype=ml_dtypes.bfloat16),
    "raw void": np.zeros(3, dtype="V2"),
    "big-endian": np.arange(600, dtype=">i4"),
    "fortran order": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "a strided view": np.arange(2000.0)[::2],
    "empty": np.zeros((0, 3), dtype=np.float32),
    "0-d": np.array(7, dtype=np.uint8),
    "bytes": np.array([b"a", b"", "héllo".encode()], dtype=object),
}


@pytest.mark.parametrize("name", list(ARRAYS))
def test_arrays_arrive_equal_with_their_dtype_and_shape(name: str) -> None:
    array = ARRAYS[name]
    request = InferenceRequest([Tensor("t", array, {"content_type": "np"})], id="r1")
    (message,) = feed(ipc.FrameDecoder(), frame_bytes(ipc.pack_request(request)), [1 << 30])
    (tensor,) = ipc.unpack_request(message).inputs
    assert tensor.name == "t" and tensor.parameters == {"content_type": "np"}
    assert tensor.data.dtype == array.dtype and tensor.data.shape == array.shape
    np.testing.assert_array_equal(tensor.data, array)


def test_a_large_array_travels_out_of_band_and_arrives_writable() -> None:
    array = np.arange(10_000, dtype=np.float64)
    pieces = ipc.encode(ipc.pack_tensors([Tensor("t", array)]))
    assert len(pieces) == 2 and bytes(pieces[1]) == array.tobytes(), "sent from the array"
    assert len(pieces[0]) < 200, "the pickle holds no tensor data"
    (packed,) = feed(ipc.FrameDecoder(), b"".join(bytes(p) for p in pieces), [4096] * 1000)
    (tensor,) = ipc.unpack_tensors(packed)
    assert tensor.data.flags.writeable
    owner = tensor.data
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    assert isinstance(owner, memoryview) and isinstance(owner.obj, bytearray), "a view, no copy"


def test_requests_and_responses_keep_every_field() -> None:
    request = InferenceRequest(
        [Tensor("a", np.ones(3)), Tensor("b", ARRAYS["bytes"])],
        id="42",
        parameters={"content_type": "pd", "n": 1},
        outputs=[RequestedOutput("y", {"binary_data": True})],
    )
    wire = pickle.loads(pickle.dumps(ipc.pack_request(request), protocol=5))
    back = ipc.unpack_request(wire)
    assert [t.name for t in back.inputs] == ["a", "b"]
    for got, sent in zip(back.inputs, request.inputs, strict=True):
        np.testing.assert_array_equal(got.data, sent.data)
    assert back.id == request.id and back.parameters == request.parameters
    assert back.outputs == request.outputs
    response = InferenceResponse([Tensor("y", np.zeros(2))], "m", "1", "42", {"p": "q"})
    back = ipc.unpack_response(ipc.pack_response(response))
    fields = (back.model_name, back.model_version, back.id, back.parameters)
    assert fields == ("m", "1", "42", {"p": "q"})
    np.testing.assert_array_equal(back.outputs[0].data, np.zeros(2))


def test_a_stream_cut_anywhere_yields_the_same_messages() -> None:
    sent = [
        (messages.Predict.KIND, i, 7, ipc.pack_tensors([Tensor("t", ARRAYS[name])]))
        for i, name in enumerate(ARRAYS)
    ]
    data = b"".join(
        b"".join(messages.encode_command(call_id, 7, messages.Predict(packed)))
        for _, call_id, _, packed in sent
    )
    rng = random.Random(1)
    for chunks in ([1] * len(data), [rng.randint(1, 5000) for _ in range(len(data))], [1 << 30]):
        received = feed(ipc.FrameDecoder(scratch_size=8192), data, chunks)
        assert [m[:3] for m in received] == [m[:3] for m in sent]
        for got, name in zip(received, ARRAYS, strict=True):
            (tensor,) = ipc.unpack_tensors(got[3])
            np.testing.assert_array_equal(tensor.data, ARRAYS[name])


def test_a_header_larger_than_the_scratch_buffer() -> None:
    words = np.array([f"word {i}".encode() for i in range(20_000)], dtype=object)
    data = frame_bytes(ipc.pack_tensors([Tensor("w", words)]))
    assert len(data) > 100_000
    (packed,) = feed(ipc.FrameDecoder(scratch_size=8192), data, [3000] * 1000)
    np.testing.assert_array_equal(ipc.unpack_tensors(packed)[0].data, words)


def test_garbage_is_a_protocol_error() -> None:
    decoder = ipc.FrameDecoder()
    data = ipc.PREFIX.pack(3, 0) + b"\x00\x01\x02"
    with pytest.raises(ipc.ProtocolError, match="cannot decode a message"):
        feed(decoder, data, [1 << 30])


@pytest.mark.parametrize("name", ["small float", "large int", "bytes"])
def test_one_whole_frame_decodes_to_its_message(name: str) -> None:
    # A packet of the fork parents' channel: a large array rides out-of-band there too.
    message = ("m", ipc.pack_tensors([Tensor("t", ARRAYS[name])]))
    back = ipc.decode_frame(frame_bytes(message))
    assert back[0] == "m"
    np.testing.assert_array_equal(ipc.unpack_tensors(back[1])[0].data, ARRAYS[name])


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        frame_bytes(("m", ARRAYS["large int"]))[:-1],  # its out-of-band buffer cut
        frame_bytes("m")[:-1],  # its header cut
        frame_bytes("m") + frame_bytes("n"),  # two frames
        frame_bytes("m") + b"\x00",
    ],
    ids=["empty", "buffer cut", "header cut", "two frames", "a byte after it"],
)
def test_what_is_not_one_whole_frame_is_a_protocol_error(frame: bytes) -> None:
    with pytest.raises(ipc.ProtocolError, match="not one whole frame"):
        ipc.decode_frame(frame)


@pytest.mark.parametrize(
    "error",
    [
        InvalidRequest("bad input"),
        ModelError("Model 'm' failed: ValueError: nope"),
        ModelNotFound("m", "2"),
        Overloaded("busy", retry_after=3.0),
        WorkerLost("gone"),
    ],
)
def test_inferd_errors_come_back_as_the_same_class_and_message(error: Exception) -> None:
    back = ipc.error_from_wire(pickle.loads(pickle.dumps(ipc.error_to_wire(error))))
    assert type(back) is type(error) and str(back) == str(error)
    assert vars(back) == vars(error)


def test_configuration_errors_stay_and_other_errors_become_model_errors() -> None:
    config = ipc.error_from_wire(ipc.error_to_wire(ConfigurationError("x")))
    assert type(config) is ConfigurationError and str(config) == "x"
    back = ipc.error_from_wire(ipc.error_to_wire(ValueError("boom")))
    assert type(back) is ModelError and back.message == "boom"
    assert type(ipc.error_from_wire(("KeyboardInterrupt", "x", {}))) is ModelError


def test_send_and_receive_a_message_larger_than_the_socket_buffer() -> None:
    left, right = socket.socketpair()
    array = np.random.default_rng(0).random((1000, 1000))
    pieces = messages.encode_reply(messages.RESULT, 1, ipc.pack_tensors([Tensor("t", array)]))
    sender = threading.Thread(target=ipc.send, args=(left, pieces))
    sender.start()
    (message,) = ipc.receive(right, ipc.FrameDecoder()) or []
    sender.join()
    np.testing.assert_array_equal(ipc.unpack_tensors(message[2])[0].data, array)
    left.close()
    assert ipc.receive(right, ipc.FrameDecoder()) is None, "end-of-file"
    right.close()


def answer_in_reverse(sock: socket.socket, count: int) -> None:
    """A fake worker: reads ``count`` commands, answers them last first, then closes."""
    decoder: ipc.FrameDecoder[messages.WireCommand] = ipc.FrameDecoder()
    commands: list[messages.WireCommand] = []
    while len(commands) < count:
        commands += ipc.receive(sock, decoder) or []
    for wire in reversed(commands):
        call_id, instance_id, command = messages.decode(wire)
        if command.fields() == ("fail", None):
            error = ipc.error_to_wire(InvalidRequest("no"))
            ipc.send(sock, messages.encode_reply(messages.ERROR, call_id, error))
        else:
            answer = (type(command).__name__, instance_id, command.fields())
            ipc.send(sock, messages.encode_reply(messages.RESULT, call_id, answer))
    sock.close()


@pytest.mark.anyio
async def test_a_channel_matches_replies_to_calls_and_fails_the_rest_when_closed() -> None:
    ours, theirs = socket.socketpair()
    closed = asyncio.Event()
    channel = await Channel.open(ours, lambda: "worker gone", closed.set)
    worker = threading.Thread(target=answer_in_reverse, args=(theirs, 3))
    worker.start()
    results = await asyncio.gather(
        channel.call(messages.Predict("a"), 1),  # type: ignore[arg-type]
        channel.call(messages.BindHosted("fail", None), 2),
        channel.call(messages.Unload(), 3),
        return_exceptions=True,
    )
    assert results[0] == ("Predict", 1, ("a",)) and results[2] == ("Unload", 3, ())
    assert isinstance(results[1], InvalidRequest) and results[1].message == "no"
    await asyncio.wait_for(closed.wait(), 5)
    worker.join()
    with pytest.raises(WorkerLost, match="worker gone"):
        await channel.call(messages.Unload(), 1)


@pytest.mark.anyio
async def test_calls_in_flight_fail_with_worker_lost_when_the_worker_dies() -> None:
    ours, theirs = socket.socketpair()
    channel = await Channel.open(ours, lambda: "worker 0 died", lambda: None)
    call = asyncio.ensure_future(channel.call(messages.Unload(), 1))
    await asyncio.sleep(0.01)
    theirs.close()
    with pytest.raises(WorkerLost, match="worker 0 died"):
        await asyncio.wait_for(call, 5)
