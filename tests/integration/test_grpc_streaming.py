"""ModelStreamInfer in process: how streams and one-answer models share a call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from inferd.protocol import pb, pb_grpc
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES
from .conftest import write_models as write_integration_models
from .runtimes import Gated
from .test_grpc_servicer import floats_of, request

pytestmark = pytest.mark.anyio

Stub = pb_grpc.GRPCInferenceServiceStub
FINAL = "triton_final_response"


def write_models(repository: Path) -> Path:
    """The integration tests' models plus `tokens`, a model that streams."""
    write_model_folder(write_integration_models(repository), "tokens", f"{RUNTIMES}.Tokens")
    return repository


def tokens(request_id: str, count: int, final: bool = False) -> pb.ModelInferRequest:
    message = request("tokens", [0.0], id=request_id)
    message.parameters["count"].int64_param = count
    if final:
        message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


async def test_streams_answer_at_once_and_other_answers_keep_their_order(stub: Stub) -> None:
    received: list[str] = []

    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        yield request("gated", [1.0], id="held")  # answers once the gate opens
        yield tokens("streamed", 2)
        yield request("echo", [2.0], id="quick")  # done at once, but sent after "held"
        await wait_for_async(lambda: len(received) == 2, "the stream's responses")
        Gated.gate.set()

    async for answer in stub.ModelStreamInfer(requests()):
        assert not answer.error_message
        received.append(answer.infer_response.id)
    assert received == ["streamed", "streamed", "held", "quick"]


async def test_a_model_that_does_not_stream_gets_the_final_flag_too(stub: Stub) -> None:
    message = request("echo", [3.0], id="one")
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    answers = [answer.infer_response async for answer in stub.ModelStreamInfer(iter([message]))]
    assert [(a.id, a.parameters[FINAL].bool_param) for a in answers] == [
        ("one", False),
        ("one", True),
    ]
    assert floats_of(answers[0]) == [3.0]
    # The flag is the protocol's: the model never saw it.
    assert "triton_enable_empty_final_response" not in answers[0].parameters
    assert (answers[1].model_name, list(answers[1].outputs)) == ("echo", [])


async def test_an_error_before_a_stream_starts_is_answered_with_the_final_flag(
    stub: Stub,
) -> None:
    message = tokens("missing", 2, final=True)
    message.model_name = "nope"
    answers = [answer async for answer in stub.ModelStreamInfer(iter([message]))]
    assert [(a.error_message, a.infer_response.id) for a in answers] == [
        ("Request for unknown model: 'nope' is not found", "missing"),
        ("", "missing"),
    ]
    assert answers[1].infer_response.parameters[FINAL].bool_param


async def test_the_final_response_names_the_version_that_answered(stub: Stub) -> None:
    message = request("versioned", [1.0], id="v")
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    answers = [answer.infer_response async for answer in stub.ModelStreamInfer(iter([message]))]
    assert [answer.model_version for answer in answers] == ["2", "2"]
