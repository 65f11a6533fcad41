"""`inferd infer --use-ssl --insecure` over gRPC and REST, against a TLS server whose
certificate no client could verify: signed by a throwaway authority and naming a
host that is not the one connected to."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inferd.tools.grpc_tls import grpc_security, server_certificate
from tests.support.certs import Authority
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .test_tool_infer import read_answers, run_infer

ROWS = 12


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("tls-infer")
    pair = Authority(folder / "pki").server("elsewhere", hosts=("elsewhere.example",))
    add_custom_model(folder / "repository", "echo", "Echo")
    tls = {"ssl_certfile": str(pair.certfile), "ssl_keyfile": str(pair.keyfile)}
    process = start_server(folder / "repository", tls, wait=None)
    try:
        with httpx.Client(verify=False, timeout=5) as http:  # no client could verify it
            url = f"https://127.0.0.1:{process.http_port}/v2/health/ready"
            wait_for(lambda: _ready(process, http, url), "the TLS server to be ready", 60)
        yield process
    finally:
        process.stop()


def _ready(process: ServerProcess, http: httpx.Client, url: str) -> bool:
    if process.process.poll() is not None:
        raise RuntimeError(f"the server exited:\n{process.log()}")
    try:
        return http.get(url).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def requests_file(tmp_path: Path) -> Path:
    lines = []
    for index in range(ROWS):
        tensor = {"name": "x", "datatype": "FP32", "shape": [1], "data": [float(index)]}
        lines.append(json.dumps({"id": f"r{index}", "inputs": [tensor]}))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def infer_over_tls(
    server: ServerProcess, transport: str, requests: Path, *flags: str
) -> tuple[int, str, Path]:
    port = server.grpc_port if transport == "grpc" else server.http_port
    output = requests.with_name(f"out-{transport}.jsonl")
    result = run_infer(
        *("-u", f"127.0.0.1:{port}", "-m", "echo", "-t", transport, "-w", "3", "-r", "1"),
        *("-i", str(requests), "-o", str(output), "--use-ssl", *flags),
    )
    return result.returncode, result.stderr, output


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_insecure_trusts_a_certificate_nobody_could_verify(
    tls_server: ServerProcess, requests_file: Path, transport: str
) -> None:
    code, stderr, output = infer_over_tls(tls_server, transport, requests_file, "--insecure")
    assert code == 0, stderr
    assert f"{ROWS} requests: {ROWS} succeeded, 0 failed" in stderr
    answers = read_answers(output)
    assert [a["outputs"][0]["data"] for a in answers] == [[float(i)] for i in range(ROWS)]


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_without_insecure_the_certificate_is_verified_and_refused(
    tls_server: ServerProcess, requests_file: Path, transport: str
) -> None:
    code, stderr, output = infer_over_tls(tls_server, transport, requests_file)
    assert code == 1
    assert f"{ROWS} requests: 0 succeeded, {ROWS} failed" in stderr
    assert all("CERTIFICATE_VERIFY_FAILED" in a["error"]["msg"] for a in read_answers(output))


def test_the_certificate_is_read_with_the_names_it_holds(tls_server: ServerProcess) -> None:
    pem, names = server_certificate("127.0.0.1", tls_server.grpc_port, 5.0)
    assert pem.startswith("-----BEGIN CERTIFICATE-----")
    assert names == ["elsewhere.example"]
    security = grpc_security("127.0.0.1", tls_server.grpc_port, verify=False)
    assert security.options == (("grpc.ssl_target_name_override", "elsewhere.example"),)


def test_insecure_names_a_server_that_does_not_answer_tls(
    server: ServerProcess, requests_file: Path
) -> None:
    """A plain-text gRPC port: the certificate cannot be read, and the run says so."""
    code, stderr, _ = infer_over_tls(server, "grpc", requests_file, "--insecure")
    assert code == 1
    assert f"could not read the TLS certificate of 127.0.0.1:{server.grpc_port}" in stderr
