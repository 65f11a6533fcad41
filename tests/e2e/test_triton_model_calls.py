"""Models that call models wherever each runs: a caller in the model host (its own
process, or its worker processes) calls models copied into the protocol processes;
the caller's deadline and cancellation reach its calls.

The same repository with one protocol process (a lone server: the hosted callers
run in its process and in worker processes of their own) and with several
(INFERD_TEST_PROTOCOL_PROCESSES=3: they run in the model host, add_sub and repeat
in every protocol process).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.polling import wait_for
from tests.support.serverproc import LEFT_OUT, ServerProcess, start_server

MODELS = Path(__file__).parent / "triton_models"
# With protocol processes, the model host runs a model with its own queue bound and
# one with two instances (in its own process, or its workers: the server fixture).
IN_THE_HOST = "dynamic_batching { default_queue_policy { max_queue_size: 64 } }\n"
IN_WORKERS = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
CALLERS = {
    "bls_hosted": ("bls", IN_THE_HOST),
    "bls_workers": ("bls", IN_WORKERS),
    "bls_decoupled_workers": ("bls_decoupled", IN_WORKERS),
    "caller_workers": ("caller", IN_WORKERS),
    "patient_workers": ("patient", IN_WORKERS),
}
TIMEOUT = 30.0

ADD_SUB_IO = """
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# Sleeps DELAY seconds, then calls MODEL_NAME with INPUT0 and INPUT1 (exec()).
CALLER_CONFIG = """name: "caller"
backend: "python"
input [
  { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "DELAY" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "ERROR" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
CALLER = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def get(request, name):
    return pb_utils.get_input_tensor_by_name(request, name)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep(float(get(request, "DELAY").as_numpy()[0]))
            call = pb_utils.InferenceRequest(
                model_name=get(request, "MODEL_NAME").as_numpy()[0],
                inputs=[get(request, "INPUT0"), get(request, "INPUT1")],
                requested_output_names=["OUTPUT0"],
            )
            answer = call.exec()
            out = np.zeros(4, dtype=np.float32)
            error = b""
            if answer.has_error():
                error = answer.error().message().encode()
            else:
                out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            tensors = [
                pb_utils.Tensor("OUTPUT0", out),
                pb_utils.Tensor("ERROR", np.array([error], dtype=np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
"""

# Waits until its request is cancelled (at most 20 s), logs it with INPUT0[0] as a tag.
PATIENT = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        (request,) = requests
        in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        ends = time.monotonic() + 20
        while not request.is_cancelled() and time.monotonic() < ends:
            time.sleep(0.02)
        pb_utils.Logger.log_warn(f"patient {int(in0[0])}: cancelled {request.is_cancelled()}")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in0)])]
"""

# Answers its request's timeout (microseconds) in every element of OUTPUT0.
TIMEOUT_OF = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", np.full(4, request.timeout(), dtype=np.float32))]
            )
            for request in requests
        ]
"""


def _write(repository: Path, name: str, config: str, model: str) -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(config)
    (repository / name / "1" / "model.py").write_text(model)


def _copy_as(repository: Path, source: str, name: str, extra: str) -> None:
    shutil.copytree(repository / source, repository / name)
    config = repository / name / "config.pbtxt"
    text = config.read_text().replace(f'name: "{source}"', f'name: "{name}"')
    config.write_text(text + extra)


@pytest.fixture(scope="module", params=["parallel_workers 0", "parallel_workers default"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """With ``parallel_workers: 0`` every model runs in a server's own process; left to
    its default (1), a lone server runs every model in a worker process, and with
    protocol processes the host runs its models in one (the others are copied)."""
    repository = tmp_path_factory.mktemp("calls") / "models"
    repository.mkdir()
    for name in ("add_sub", "repeat", "sleep", "bls", "bls_decoupled"):
        shutil.copytree(MODELS / name, repository / name)
    _write(repository, "caller", CALLER_CONFIG, CALLER)
    _write(repository, "patient", f'name: "patient"\nbackend: "python"\n{ADD_SUB_IO}', PATIENT)
    _write(repository, "timeout_of", f'backend: "python"\n{ADD_SUB_IO}', TIMEOUT_OF)
    for name, (source, extra) in CALLERS.items():
        _copy_as(repository, source, name, extra)
    settings = {} if request.param == "parallel_workers 0" else {"parallel_workers": LEFT_OUT}
    with start_server(repository, settings) as started:
        yield started


def tensor(name: str, array: np.ndarray, datatype: str) -> httpclient.InferInput:
    made = httpclient.InferInput(name, list(array.shape), datatype)
    made.set_data_from_numpy(array)
    return made


A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([4, 3, 2, 1], dtype=np.float32)


def bls_inputs(model: str, first: np.ndarray = A) -> list[httpclient.InferInput]:
    name = np.array([model.encode()], dtype=np.object_)
    return [
        tensor("MODEL_NAME", name, "BYTES"),
        tensor("INPUT0", first, "FP32"),
        tensor("INPUT1", B, "FP32"),
    ]


def http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=60)


@pytest.mark.parametrize("caller", ["bls_hosted", "bls_workers"])
def test_a_hosted_model_calls_a_copied_one(server: ServerProcess, caller: str) -> None:
    client = http(server)
    for _ in range(4):  # the host's workers, each bound on a protocol process of its own
        result = client.infer(caller, bls_inputs("add_sub"))
        assert result.as_numpy("ERROR")[0] == b""
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


@pytest.mark.parametrize("caller", ["bls_hosted", "bls_workers"])
def test_a_hosted_model_calling_an_unknown_one_is_told(server: ServerProcess, caller: str) -> None:
    error = http(server).infer(caller, bls_inputs("no_such_model")).as_numpy("ERROR")[0]
    assert "unknown model: 'no_such_model'" in error.decode()


def test_a_hosted_model_reads_a_copied_decoupled_models_responses(server: ServerProcess) -> None:
    values = np.array([3, 4, 5], dtype=np.int32)
    result = http(server).infer("bls_decoupled_workers", [tensor("IN", values, "INT32")])
    assert (int(result.as_numpy("SUM")[0]), int(result.as_numpy("COUNT")[0])) == (12, 3)


def caller_inputs(module: Any, callee: str, first: np.ndarray = A, delay: float = 0.0) -> list[Any]:
    made = []
    for name, array, datatype in (
        ("MODEL_NAME", np.array([callee.encode()], dtype=np.object_), "BYTES"),
        ("DELAY", np.array([delay], dtype=np.float32), "FP32"),
        ("INPUT0", first, "FP32"),
        ("INPUT1", B, "FP32"),
    ):
        made.append(module.InferInput(name, list(array.shape), datatype))
        made[-1].set_data_from_numpy(array)
    return made


@pytest.mark.parametrize("caller", ["caller", "caller_workers"])
def test_a_call_gets_what_is_left_of_its_callers_timeout(
    server: ServerProcess, caller: str
) -> None:
    client = http(server)
    result = client.infer(caller, caller_inputs(httpclient, "timeout_of"), timeout=5_000_000)
    assert result.as_numpy("ERROR")[0] == b""
    left = float(result.as_numpy("OUTPUT0")[0])
    assert 0 < left <= 5_000_000, left
    untimed = client.infer(caller, caller_inputs(httpclient, "timeout_of"))
    assert float(untimed.as_numpy("OUTPUT0")[0]) == 0  # no deadline, none carried


@pytest.mark.parametrize("caller", ["caller", "caller_workers"])
def test_a_call_made_past_the_callers_deadline_is_not_run(
    server: ServerProcess, caller: str
) -> None:
    inputs = caller_inputs(httpclient, "add_sub", delay=0.5)
    result = http(server).infer(caller, inputs, timeout=200_000)
    error = result.as_numpy("ERROR")[0].decode()
    assert "ran past its timeout before this call" in error, error


@pytest.mark.parametrize(
    ("tag", "caller", "callee"),
    [
        (11, "caller", "patient"),
        (12, "caller", "patient_workers"),
        (13, "caller_workers", "patient"),
        (14, "caller_workers", "patient_workers"),
    ],
)
def test_a_client_that_leaves_cancels_the_calls_in_flight(
    server: ServerProcess, tag: int, caller: str, callee: str
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    first = np.full(4, tag, dtype=np.float32)
    with pytest.raises(InferenceServerException, match="Deadline"):
        client.infer(caller, caller_inputs(grpcclient, callee, first), client_timeout=1.0)
    # The callee saw is_cancelled() long before its 20 s.
    wait_for(
        lambda: f"patient {tag}: cancelled True" in server.log(),
        lambda: f"{callee} to see its request cancelled:\n{server.log()[-3000:]}",
        timeout=TIMEOUT,
    )


OTHER_ENSEMBLE = """name: "other"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "add_one"
      model_version: -1
      input_map { key: "X" value: "INPUT" }
      output_map { key: "Y" value: "OUTPUT" }
    }
  ]
}
"""


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unload_dependents_unloads_an_ensembles_steps(tmp_path: Path, protocol: str) -> None:
    repository = tmp_path / "models"
    for name in ("pipeline", "double", "add_one", "add_sub"):
        shutil.copytree(MODELS / name, repository / name)
    (repository / "pipeline" / "1").mkdir(exist_ok=True)
    # A second ensemble calling add_one: that step model stays for it.
    (repository / "other" / "1").mkdir(parents=True)
    (repository / "other" / "config.pbtxt").write_text(OTHER_ENSEMBLE)
    with start_server(repository) as started:
        module: Any = httpclient if protocol == "http" else grpcclient
        address = f"127.0.0.1:{started.http_port}" if protocol == "http" else started.grpc_address
        client = module.InferenceServerClient(address)
        assert (
            "model_repository(unload_dependents)" in client.get_server_metadata()["extensions"]
            if protocol == "http"
            else client.get_server_metadata().extensions
        )

        client.unload_model("other")  # without: its steps stay
        assert _ready(client) == {"pipeline", "double", "add_one", "add_sub"}
        client.load_model("other")
        client.unload_model("pipeline", unload_dependents=True)
        # double goes with it; add_one stays, other still calls it; add_sub is no step
        assert _ready(client) == {"other", "add_one", "add_sub"}
        client.unload_model("other", unload_dependents=True)
        assert _ready(client) == {"add_sub"}


def _ready(client: Any) -> set[str]:
    index = client.get_model_repository_index()
    entries = index if isinstance(index, list) else client.get_model_repository_index(as_json=True)
    if isinstance(entries, dict):
        entries = entries.get("models", [])
    return {entry["name"] for entry in entries if entry.get("state") == "READY"}
