"""The response cache: what makes two requests the same answer, the LRU, unloads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferd.custom_calls import HandlerCall, handler_request
from inferd.observability.stats import ModelStats
from inferd.protocol import pb
from inferd.server.grpc.codec import decode_infer_request as decode_grpc
from inferd.server.rest.codec import decode_infer_request
from inferd.serving.response_cache import ResponseCache, request_digest
from inferd.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

FEATURES = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
WORDS = [b"a", b"bc", b""]


def json_body(**request: object) -> bytes:
    body = {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 4], "data": FEATURES},
            {"name": "w", "datatype": "BYTES", "shape": [3], "data": [w.decode() for w in WORDS]},
        ],
        **request,
    }
    return json.dumps(body).encode()


def binary_body(**request: object) -> tuple[bytes, str]:
    floats = np.asarray(FEATURES, dtype="<f4").tobytes()
    words = b"".join(len(w).to_bytes(4, "little") + w for w in WORDS)
    head = {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 4]},
            {"name": "w", "datatype": "BYTES", "shape": [3]},
        ],
        **request,
    }
    head["inputs"][0]["parameters"] = {"binary_data_size": len(floats)}  # type: ignore[index]
    head["inputs"][1]["parameters"] = {"binary_data_size": len(words)}  # type: ignore[index]
    header = json.dumps(head).encode()
    return header + floats + words, str(len(header))


def grpc_request() -> InferenceRequest:
    message = pb.ModelInferRequest(model_name="m", id="g")
    for name, datatype, shape in (("x", "FP32", [2, 4]), ("w", "BYTES", [3])):
        message.inputs.add(name=name, datatype=datatype, shape=shape)
    message.raw_input_contents.append(np.asarray(FEATURES, dtype="<f4").tobytes())
    message.raw_input_contents.append(b"".join(len(w).to_bytes(4, "little") + w for w in WORDS))
    return decode_grpc(message)[0]


def base() -> InferenceRequest:
    return InferenceRequest(
        [
            Tensor("x", np.asarray(FEATURES, dtype=np.float32)),
            Tensor("w", np.asarray(WORDS, dtype=object)),
        ],
        id="1",
        parameters={"content_type": "np"},
        outputs=[RequestedOutput("y", {"top": 1})],
    )


def decode_rest(body: bytes, header_length: str | None) -> InferenceRequest:
    return decode_infer_request(body, header_length)[0]


def test_json_binary_and_grpc_encodings_of_the_same_tensors_share_a_key() -> None:
    from_json = request_digest(decode_rest(json_body(id="a"), None))
    from_binary = request_digest(decode_rest(*binary_body(id="b")))
    assert from_json is not None
    assert from_json == from_binary == request_digest(grpc_request())


def test_transport_parameters_and_the_id_are_not_part_of_the_key() -> None:
    plain = request_digest(decode_rest(json_body(), None))
    steered = decode_rest(
        json_body(
            id="other",
            parameters={"binary_data_output": True, "priority": 2, "timeout": 5000},
            outputs=[],
        ),
        None,
    )
    assert request_digest(steered) == plain
    with_outputs = base()
    binary_outputs = base()
    binary_outputs.outputs = [RequestedOutput("y", {"top": 1, "binary_data": True})]
    binary_outputs.parameters["raw_output"] = False
    assert request_digest(with_outputs) == request_digest(binary_outputs)


def changed(change: str) -> InferenceRequest:
    request = base()
    x = request.inputs[0]
    if change == "byte":
        data = x.data.copy()
        data.reshape(-1).view(np.uint8)[5] ^= 1
        x.data = data
    elif change == "shape":
        x.data = x.data.reshape(4, 2)
    elif change == "datatype":
        x.data = x.data.view(np.int32)
    elif change == "input name":
        x.name = "z"
    elif change == "input parameter":
        x.parameters = {"content_type": "str"}
    elif change == "bytes element boundary":
        request.inputs[1].data = np.asarray([b"ab", b"c", b""], dtype=object)
    elif change == "output":
        request.outputs = [RequestedOutput("z", {"top": 1})]
    elif change == "output parameter":
        request.outputs = [RequestedOutput("y", {"top": 2})]
    elif change == "no requested output":
        request.outputs = []
    elif change == "parameter":
        request.parameters = {"content_type": "pd"}
    elif change == "extra parameter":
        request.parameters["temperature"] = 0.5
    return request


@pytest.mark.parametrize(
    "change",
    [
        "byte",
        "shape",
        "datatype",
        "input name",
        "input parameter",
        "bytes element boundary",
        "output",
        "output parameter",
        "no requested output",
        "parameter",
        "extra parameter",
    ],
)
def test_any_difference_that_can_change_the_answer_changes_the_key(change: str) -> None:
    assert request_digest(base()) == request_digest(base())
    assert request_digest(changed(change)) != request_digest(base())


def test_requests_of_a_sequence_are_not_cached() -> None:
    request = base()
    request.parameters["sequence_id"] = 7
    assert request_digest(request) is None


def test_calls_to_a_runtime_s_own_routes_are_not_cached() -> None:
    # @custom_handler routes and MLflow's /invocations may change state each call.
    call = HandlerCall("bump", b"{}", "", {"accept": "*/*"})
    assert request_digest(handler_request(call)) is None


def test_a_stored_answer_keeps_the_parameters_it_was_stored_with() -> None:
    # The data plane takes a runtime's response headers out of the answer it sends
    # after storing it: a later hit must still carry them.
    cache = ResponseCache(10).bind(ModelStats("m", None))
    key, _ = cache.lookup(base())
    assert key is not None
    sent = answer(1.0)
    sent.parameters["headers"] = {"x-model": "m"}
    cache.store(key, sent)
    sent.parameters.pop("headers")
    _, hit = cache.lookup(base())
    assert hit is not None and hit.parameters == {"headers": {"x-model": "m"}}


def answer(value: float) -> InferenceResponse:
    return InferenceResponse([Tensor("y", np.asarray([value]))], "m", None, "first")


def test_a_hit_answers_with_the_new_request_id_and_counts() -> None:
    stats = ModelStats("m", None)
    cache = ResponseCache(10).bind(stats)
    first = base()
    key, cached = cache.lookup(first)
    assert key is not None and cached is None
    cache.store(key, answer(1.0))
    again = base()
    again.id = "second"
    key_again, hit = cache.lookup(again)
    assert key_again == key and hit is not None
    assert hit.id == "second" and hit.outputs[0].data.tolist() == [1.0]
    assert (stats.cache_hit_count, stats.cache_miss_count) == (1, 1)
    assert stats.cache_hit_ns > 0 and stats.cache_miss_ns > 0
    statistics = stats.to_dict()["inference_stats"]
    assert statistics["cache_hit"]["count"] == 1 and statistics["cache_miss"]["count"] == 1


def test_the_lru_keeps_cache_size_entries_for_all_versions() -> None:
    shared = ResponseCache(2)
    one, two = shared.bind(ModelStats("a", None)), shared.bind(ModelStats("b", None))
    requests = [base() for _ in range(3)]
    for index, request in enumerate(requests):
        request.inputs[0].data = request.inputs[0].data + index
    keys = []
    for cache, request in ((one, requests[0]), (two, requests[1])):
        key, _ = cache.lookup(request)
        assert key is not None
        cache.store(key, answer(0.0))
        keys.append(key)
    assert one.lookup(requests[0])[1] is not None  # now the most recently used
    key, _ = two.lookup(requests[2])
    assert key is not None
    two.store(key, answer(2.0))
    assert len(shared) == 2
    assert one.lookup(requests[0])[1] is not None
    assert two.lookup(requests[1])[1] is None  # the least recently used went


def test_the_same_request_to_another_version_misses() -> None:
    shared = ResponseCache(10)
    one, two = shared.bind(ModelStats("m", "1")), shared.bind(ModelStats("m", "2"))
    key, _ = one.lookup(base())
    assert key is not None
    one.store(key, answer(1.0))
    assert two.lookup(base())[1] is None


def test_closing_a_version_drops_its_entries_and_stores_no_more() -> None:
    shared = ResponseCache(10)
    old, other = shared.bind(ModelStats("m", None)), shared.bind(ModelStats("n", None))
    for cache in (old, other):
        key, _ = cache.lookup(base())
        assert key is not None
        cache.store(key, answer(1.0))
    late_key, _ = old.lookup(changed("byte"))
    old.close()
    assert len(shared) == 1
    assert late_key is not None
    old.store(late_key, answer(3.0))  # a request that was running during the unload
    assert len(shared) == 1
    assert other.lookup(base())[1] is not None
