"""Triton Python-backend models, BLS and an ensemble, served from a Triton repository
(tests/e2e/triton_models: config.pbtxt + 1/model.py) and driven by tritonclient.

Passes with one protocol process and with several (INFERD_TEST_PROTOCOL_PROCESSES=3):
each protocol process runs its own copy of the models, and a model's calls to
other models stay in its process.
"""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.models import write_model_folder
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

MODELS = Path(__file__).parent / "triton_models"
TIMEOUT = 30.0
FINAL = "triton_final_response"


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("triton") / "models"
    shutil.copytree(MODELS, repository)
    (repository / "pipeline" / "1").mkdir(exist_ok=True)
    (repository / "notes").mkdir()  # neither kind of model: reported in the log
    files = {"native.py": NATIVE_RUNTIME}
    write_model_folder(repository, "native", "native.CallsAddSub", files=files)
    with start_server(repository) as server:
        yield server


# An inferd runtime that calls add_sub through self.context.infer (inferd's own API).
NATIVE_RUNTIME = """
from inferd import InferenceRequest, InferenceResponse, Model


class CallsAddSub(Model):
    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        answer = await self.context.infer("add_sub", request)
        return InferenceResponse(outputs=[answer.output("OUTPUT0")])
"""


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, triton_server: ServerProcess) -> Any:
    if request.param == "http":
        return httpclient.InferenceServerClient(f"127.0.0.1:{triton_server.http_port}")
    return grpcclient.InferenceServerClient(triton_server.grpc_address)


def tensor(client: Any, name: str, array: np.ndarray, datatype: str) -> Any:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    made = module.InferInput(name, list(array.shape), datatype)
    made.set_data_from_numpy(array)
    return made


A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([4, 3, 2, 1], dtype=np.float32)


def add_sub_inputs(client: Any) -> list[Any]:
    return [tensor(client, "INPUT0", A, "FP32"), tensor(client, "INPUT1", B, "FP32")]


def test_the_repository_lists_every_triton_model(triton_server: ServerProcess) -> None:
    index = httpx.post(f"{triton_server.url}/v2/repository/index", timeout=TIMEOUT).json()
    assert {(entry["name"], entry["state"]) for entry in index} == {
        (name, "READY")
        for name in (
            "add_sub",
            "auto_batch",
            "bls",
            "bls_async",
            "bls_decoupled",
            "repeat",
            "double",
            "add_one",
            "pipeline",
            "sleep",
            "native",
            "square",
            "repeat_square",
        )
    }
    assert "notes holds no model" in triton_server.log()
    assert "add_sub initialized for add_sub" in triton_server.log()  # pb_utils.Logger


def test_add_sub_answers_with_the_dtypes_it_returned(client: Any) -> None:
    result = client.infer("add_sub", add_sub_inputs(client))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    out1 = result.as_numpy("OUTPUT1")
    assert out1.dtype == np.int32  # declared FP32: the model's own dtype wins, as in Triton
    np.testing.assert_array_equal(out1, (A - B).astype(np.int32))


def test_custom_metrics_keep_their_name_and_labels(triton_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{triton_server.http_port}")
    for _ in range(3):
        client.infer("add_sub", add_sub_inputs(client))
    url = f"http://127.0.0.1:{triton_server.metrics_port}/metrics"

    def counted() -> float:
        text = httpx.get(url, timeout=TIMEOUT).text
        line = 'add_sub_requests{model="add_sub",version="1"} '
        found = [row for row in text.splitlines() if row.startswith(line)]
        return float(found[0].split()[-1]) if found else 0.0

    # Triton's exposition: the family's own name (no _total), typed counter, and the
    # Metric's labels (the lines Triton's custom_metrics example client checks).
    wait_for(lambda: counted() >= 3, "add_sub_requests to count 3 requests", timeout=TIMEOUT)
    text = httpx.get(url, timeout=TIMEOUT).text
    assert "# TYPE add_sub_requests counter\n" in text
    assert "add_sub_requests_total" not in text and "add_sub_requests_created" not in text
    assert 'add_sub_batch_bucket{le="1.0",model="add_sub"}' in text


def test_metadata_and_config_come_from_config_pbtxt(client: Any) -> None:
    config = client.get_model_config("add_sub")
    config = config if isinstance(config, dict) else _grpc_dict(client, "add_sub")
    assert config["parameters"]["greeting"]["string_value"] == "hello"
    assert [tensor["name"] for tensor in config["input"]] == ["INPUT0", "INPUT1"]
    auto = client.get_model_config("auto_batch")
    auto = auto if isinstance(auto, dict) else _grpc_dict(client, "auto_batch")
    assert int(auto["max_batch_size"]) == 16  # from auto_complete_config


def _grpc_dict(client: Any, model: str) -> dict[str, Any]:
    return client.get_model_config(model, as_json=True)["config"]


def test_execute_gets_every_request_of_a_dynamic_batch(triton_server: ServerProcess) -> None:
    url = f"127.0.0.1:{triton_server.http_port}"

    def one(index: int) -> tuple[np.ndarray, int]:
        client = httpclient.InferenceServerClient(url)
        x = np.full((1, 2), index, dtype=np.float32)
        result = client.infer("auto_batch", [tensor(client, "X", x, "FP32")])
        return result.as_numpy("Y"), int(result.as_numpy("REQUESTS")[0, 0])

    with ThreadPoolExecutor(12) as threads:  # several per protocol process, with 3
        answers = list(threads.map(one, range(12)))
    for index, (y, _) in enumerate(answers):
        np.testing.assert_array_equal(y, np.full((1, 2), index * 10, dtype=np.float32))
    assert max(requests for _, requests in answers) > 1, answers


def test_bls_calls_another_model(client: Any) -> None:
    name = np.array([b"add_sub"], dtype=np.object_)
    inputs = [tensor(client, "MODEL_NAME", name, "BYTES"), *add_sub_inputs(client)]
    result = client.infer("bls", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    assert result.as_numpy("ERROR")[0] == b""


def test_bls_and_inferd_runtimes_call_each_other(client: Any) -> None:
    # bls (Python backend) -> native (an inferd runtime, context.infer) -> add_sub
    name = np.array([b"native"], dtype=np.object_)
    inputs = [tensor(client, "MODEL_NAME", name, "BYTES"), *add_sub_inputs(client)]
    result = client.infer("bls", inputs)
    assert result.as_numpy("ERROR")[0] == b""
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_bls_to_an_unknown_model_answers_a_response_with_an_error(client: Any) -> None:
    name = np.array([b"no_such_model"], dtype=np.object_)
    inputs = [tensor(client, "MODEL_NAME", name, "BYTES"), *add_sub_inputs(client)]
    error = client.infer("bls", inputs).as_numpy("ERROR")[0].decode()
    assert "unknown model: 'no_such_model'" in error


def test_a_client_that_leaves_cancels_the_bls_calls_its_request_made(
    triton_server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(triton_server.grpc_address)
    name = np.array([b"sleep"], dtype=np.object_)
    seconds = np.full(4, 1.5, dtype=np.float32)
    inputs = [
        tensor(client, "MODEL_NAME", name, "BYTES"),
        tensor(client, "INPUT0", seconds, "FP32"),
    ]
    inputs.append(tensor(client, "INPUT1", B, "FP32"))
    with pytest.raises(InferenceServerException, match="Deadline"):
        client.infer("bls", inputs, client_timeout=0.5)
    # exec() answered at once with a CANCELLED error (code 7), not after the 1.5 s sleep.
    wait_for(
        lambda: (
            "the call failed (code 7): The request was cancelled; cancelled: True"
            in triton_server.log()
        ),
        lambda: f"the bls call to be cancelled:\n{triton_server.log()}",
        timeout=TIMEOUT,
    )


def test_async_bls_runs_its_calls_at_once(client: Any) -> None:
    result = client.infer("bls_async", add_sub_inputs(client))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * (A + B))
    assert int(result.as_numpy("REPEATED")[0]) == len(A)  # async_exec(decoupled=True)


def test_bls_reads_a_decoupled_models_responses(client: Any) -> None:
    values = np.array([3, 4, 5], dtype=np.int32)
    result = client.infer("bls_decoupled", [tensor(client, "IN", values, "INT32")])
    assert (int(result.as_numpy("SUM")[0]), int(result.as_numpy("COUNT")[0])) == (12, 3)
    assert bool(result.as_numpy("LAST_EMPTY")[0])


def test_the_ensemble_runs_its_steps_through_their_models(client: Any) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    before = _inferences(client, "double")
    result = client.infer("pipeline", [tensor(client, "INPUT", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("DOUBLED"), x * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), x * 2 + 1)
    assert _inferences(client, "double") == before + 1  # the composing model's statistics


def _inferences(client: Any, model: str) -> int:
    stats = client.get_inference_statistics(model)
    stats = (
        stats if isinstance(stats, dict) else client.get_inference_statistics(model, as_json=True)
    )
    return int(stats["model_stats"][0]["inference_stats"]["success"].get("count", 0))


def test_a_failing_ensemble_step_is_named(client: Any) -> None:
    x = np.array([[-1, 2, 3]], dtype=np.float32)
    with pytest.raises(InferenceServerException) as error:
        client.infer("pipeline", [tensor(client, "INPUT", x, "FP32")])
    assert "Ensemble 'pipeline' step 1 (model 'add_one'): negative input" in error.value.message()
    assert error.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def stream_answers(
    server: ServerProcess, values: np.ndarray, model: str = "repeat"
) -> list[tuple[Any, Any]]:
    """What ``model`` sends for IN over ModelStreamInfer, up to and with its final flag."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        made = grpcclient.InferInput("IN", list(values.shape), "INT32")
        made.set_data_from_numpy(values)
        client.async_stream_infer(model, [made], enable_empty_final_response=True)
        got = []
        while True:
            result, error = answers.get(timeout=TIMEOUT)
            got.append((result, error))
            if error is not None or result.get_response().parameters[FINAL].bool_param:
                return got
    finally:
        client.stop_stream()
        client.close()


def test_a_decoupled_model_streams_over_grpc(triton_server: ServerProcess) -> None:
    got = stream_answers(triton_server, np.array([7, 8, 9], dtype=np.int32))
    assert all(error is None for _, error in got)
    values = [result.as_numpy("OUT") for result, _ in got]
    assert [int(v[0]) for v in values[:-1]] == [7, 8, 9]
    assert values[-1] is None  # the final flag alone, sent after execute returned


def test_a_decoupled_ensemble_sends_each_response_through_the_later_steps(
    triton_server: ServerProcess,
) -> None:
    got = stream_answers(triton_server, np.array([2, 3, 4], dtype=np.int32), "repeat_square")
    assert all(error is None for _, error in got), got
    values = [result.as_numpy("SQUARED") for result, _ in got]
    assert [int(v[0]) for v in values[:-1]] == [4, 9, 16]
    assert values[-1] is None


def test_a_request_answered_by_no_response_sends_only_the_final_flag(
    triton_server: ServerProcess,
) -> None:
    (only,) = stream_answers(triton_server, np.array([], dtype=np.int32))
    assert only[1] is None and only[0].as_numpy("OUT") is None


def test_a_decoupled_model_streams_over_rest(triton_server: ServerProcess) -> None:
    url = f"{triton_server.url}/v2/models/repeat/generate_stream"
    with httpx.stream("POST", url, json={"IN": [1, 2]}, timeout=TIMEOUT) as sse:
        assert sse.status_code == 200
        lines = [line for line in sse.iter_lines() if line.startswith("data:")]
    assert [line.count('"OUT":') for line in lines] == [1, 1]


def test_a_decoupled_model_refuses_a_unary_call(triton_server: ServerProcess) -> None:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
    answer = httpx.post(f"{triton_server.url}/v2/models/repeat/infer", json=body, timeout=30)
    assert answer.status_code == 400
    assert "decoupled" in answer.json()["error"]


def test_in_worker_processes_models_batch_and_call_models(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(MODELS, repository)
    (repository / "pipeline" / "1").mkdir(exist_ok=True)
    with start_server(repository, {"parallel_workers": 2}) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        result = client.infer("add_sub", add_sub_inputs(client))
        assert result.as_numpy("OUTPUT1").dtype == np.int32
        test_bls_calls_another_model(client)  # from a worker, through the server's socket
        test_bls_to_an_unknown_model_answers_a_response_with_an_error(client)
        test_async_bls_runs_its_calls_at_once(client)
        test_bls_reads_a_decoupled_models_responses(client)
        test_a_failing_ensemble_step_is_named(client)
        x = np.array([[1, 2, 3]], dtype=np.float32)
        answer = client.infer("pipeline", [tensor(client, "INPUT", x, "FP32")])
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT"), x * 2 + 1)

        def one(index: int) -> int:
            own = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
            x = np.full((1, 2), index, dtype=np.float32)
            answer = own.infer("auto_batch", [tensor(own, "X", x, "FP32")])
            np.testing.assert_array_equal(answer.as_numpy("Y"), x * 10)
            return int(answer.as_numpy("REQUESTS")[0, 0])

        with ThreadPoolExecutor(6) as threads:
            assert max(threads.map(one, range(6))) > 1  # batch rows cross the worker IPC


def test_a_changed_model_py_is_reloaded(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(MODELS / "add_sub", repository / "add_sub")
    with start_server(repository, {"repository_poll_secs": 0.2}) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        assert client.infer("add_sub", add_sub_inputs(client)).as_numpy("OUTPUT1").dtype == np.int32
        model_py = repository / "add_sub" / "1" / "model.py"
        model_py.write_text(model_py.read_text().replace("np.int32", "np.int64"))

        def reloaded() -> bool:
            answer = client.infer("add_sub", add_sub_inputs(client))
            return bool(answer.as_numpy("OUTPUT1").dtype == np.int64)

        wait_for(reloaded, "the changed model.py to be served", timeout=TIMEOUT)
