"""The typed commands of the worker and host channels, and the command server base."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.errors import InvalidRequest
from inferd.settings import ModelSettings, ServerSettings
from inferd.workers import ipc, messages
from inferd.workers.command_server import CommandServer

SETTINGS = ModelSettings(name="m", implementation="x.Y")
PACKED: ipc.PackedRequest = ([], "id", {}, [])

EVERY_COMMAND: list[messages.Command] = [
    messages.Init(3, ["/x"], ServerSettings(), []),
    messages.LoadInWorker(SETTINGS, "cuda:1"),
    messages.BindHosted("m", "2"),
    messages.Unload(),
    messages.Predict(PACKED),
    messages.PredictTimed(PACKED),
    messages.PredictTraced(PACKED),
    messages.Stream(PACKED, 64),
    messages.Credit(16),
    messages.Cancel(),
    messages.ApplyControl("a control message"),  # type: ignore[arg-type]
]


def framed(call_id: int, instance_id: int, command: messages.Command) -> Any:
    """What the other end's decoder makes of the command's frame."""
    data = b"".join(
        bytes(piece) for piece in messages.encode_command(call_id, instance_id, command)
    )
    decoder: ipc.FrameDecoder[messages.WireCommand] = ipc.FrameDecoder()
    decoder.get_buffer()[: len(data)] = data
    (wire,) = decoder.buffer_updated(len(data))
    return wire


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: type(c).__name__)
def test_every_command_crosses_as_a_plain_tuple_and_comes_back_equal(
    command: messages.Command,
) -> None:
    wire = framed(5, 9, command)
    assert type(wire) is tuple, "no class reference on the wire: it costs every call"
    assert wire[:3] == (command.KIND, 5, 9)
    call_id, instance_id, back = messages.decode(wire)
    assert (call_id, instance_id) == (5, 9)
    assert type(back) is type(command)
    assert back.fields() == command.fields()


def test_kinds_are_distinct_and_each_server_takes_its_own() -> None:
    assert len({type(c).KIND for c in EVERY_COMMAND}) == len(EVERY_COMMAND)
    assert set(messages.COMMANDS.values()) == {type(c) for c in EVERY_COMMAND}
    replies = {messages.RESULT, messages.ERROR, messages.STREAMED, messages.ENDED}
    assert not replies & set(messages.COMMANDS), "a reply kind is never a command's"
    worker, host = set(messages.WORKER_COMMANDS), set(messages.HOST_COMMANDS)
    assert messages.LoadInWorker in worker - host and messages.BindHosted in host - worker
    assert messages.PredictTimed in worker - host and messages.PredictTraced in host - worker


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        ((99, 1, 0), "unknown command 99"),
        ((messages.BindHosted.KIND, 1, 0, "only a name"), "bad command BindHosted"),
        ((messages.Unload.KIND, 1, 0, "extra"), "bad command Unload"),
        ("not a tuple", "not a command"),
        ((4,), "not a command"),
    ],
)
def test_decode_says_what_is_wrong(wire: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        messages.decode(wire)


class Recording(CommandServer):
    """A command server whose handlers and sends are recorded."""

    def __init__(self) -> None:
        super().__init__({messages.Credit: self._credit, messages.Predict: self._predict})
        self.sent: list[Any] = []
        self.credits: list[tuple[int, int]] = []

    def describe(self) -> str:
        return "The test server"

    def send(self, pieces: list[ipc.Buffer]) -> None:
        data = b"".join(bytes(piece) for piece in pieces)
        decoder: ipc.FrameDecoder[messages.Reply] = ipc.FrameDecoder()
        decoder.get_buffer()[: len(data)] = data
        self.sent += decoder.buffer_updated(len(data))

    def _credit(self, call_id: int, instance_id: int, command: messages.Credit) -> None:
        self.credits.append((call_id, command.amount))

    def _predict(self, call_id: int, instance_id: int, command: messages.Predict) -> None:
        if command.request == "bad":
            raise InvalidRequest("a bad request")
        self.reply(call_id, ("answer", instance_id))


def test_a_command_server_routes_by_class_and_answers_what_it_cannot_run() -> None:
    server = Recording()
    server.handle(framed(1, 0, messages.Credit(4)))
    server.handle(framed(2, 7, messages.Predict(PACKED)))
    assert server.credits == [(1, 4)]
    assert server.sent == [(messages.RESULT, 2, ("answer", 7))]
    server.sent.clear()
    server.handle(framed(3, 0, messages.Unload()))  # not one of its commands
    server.handle(framed(4, 0, messages.Predict("bad")))  # type: ignore[arg-type]
    server.handle((99, 5, 0))
    errors = [(kind, call_id, ipc.error_from_wire(wire)) for kind, call_id, wire in server.sent]
    assert [(kind, call_id) for kind, call_id, _ in errors] == [
        (messages.ERROR, 3),
        (messages.ERROR, 4),
        (messages.ERROR, 5),
    ]
    assert "The test server does not take Unload" in str(errors[0][2])
    assert "a bad request" in str(errors[1][2])
    assert "The test server got unknown command 99" in str(errors[2][2])


def test_a_result_that_cannot_be_pickled_is_answered_with_an_error() -> None:
    server = Recording()
    server.reply(8, lambda: None)
    ((kind, call_id, wire),) = server.sent
    assert (kind, call_id) == (messages.ERROR, 8)
    assert "The test server cannot send the result back" in str(ipc.error_from_wire(wire))
