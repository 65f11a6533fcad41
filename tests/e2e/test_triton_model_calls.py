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

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.serverproc import ServerProcess, start_server

MODELS = Path(__file__).parent / "triton_models"
# The host runs a model with its own queue bound (in its own process, parallel_workers
# 0) and one with two instances (in two worker processes of its own).
IN_THE_HOST = "dynamic_batching { default_queue_policy { max_queue_size: 64 } }\n"
IN_WORKERS = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
CALLERS = {
    "bls_hosted": ("bls", IN_THE_HOST),
    "bls_workers": ("bls", IN_WORKERS),
    "bls_decoupled_workers": ("bls_decoupled", IN_WORKERS),
}


def _copy_as(repository: Path, source: str, name: str, extra: str) -> None:
    shutil.copytree(MODELS / source, repository / name)
    config = repository / name / "config.pbtxt"
    text = config.read_text().replace(f'name: "{source}"', f'name: "{name}"')
    config.write_text(text + extra)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("calls") / "models"
    repository.mkdir()
    for name in ("add_sub", "repeat", "sleep", "bls"):
        shutil.copytree(MODELS / name, repository / name)
    for name, (source, extra) in CALLERS.items():
        _copy_as(repository, source, name, extra)
    with start_server(repository) as started:
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
