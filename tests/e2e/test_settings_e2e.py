"""`inferd start` end to end: the command line, settings precedence, refusing bad settings."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest

from inferd import __version__
from tests.support.models import add_custom_model
from tests.support.serverproc import (
    ServerProcess,
    free_ports,
    server_environment,
    spawn,
    write_settings,
)

# A refused start must be quick: it happens before any model loads or port opens.
REFUSAL_TIMEOUT = 15.0
INFERD_SCRIPT = Path(sys.executable).parent / "inferd"


def launch(
    args: list[str],
    cwd: Path,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    ports: Sequence[int] | None = None,
) -> ServerProcess:
    """Run ``python -m inferd ARGS`` in ``cwd``; the caller says where it will listen."""
    http_port, grpc_port, metrics_port = ports or free_ports(3)
    return spawn(
        [sys.executable, "-m", "inferd", *args],
        repository=cwd,
        cwd=cwd,
        log_path=log_dir / f"inferd-{http_port}.log",
        ports=(http_port, grpc_port, metrics_port),
        env=server_environment(env),
    )


@pytest.fixture
def launched() -> Iterator[list[ServerProcess]]:
    """Servers a test started with :func:`launch`; stopped when it ends."""
    servers: list[ServerProcess] = []
    yield servers
    for server in servers:
        server.stop()


def run_inferd(
    repository: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``inferd start REPOSITORY`` that is expected to exit on its own (quickly)."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "inferd", "start", str(repository)],
        capture_output=True,
        text=True,
        env=server_environment(env),
        timeout=REFUSAL_TIMEOUT,  # a start that is not refused is killed, and fails the test
    )
    assert time.monotonic() - started < REFUSAL_TIMEOUT, result.stderr
    return result


def assert_refused(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    """Exited non-zero, said why on stderr, and never opened a port."""
    assert result.returncode != 0, result.stdout + result.stderr
    for text in expected:
        assert text in result.stderr
    assert "Traceback" not in result.stderr
    assert "listening" not in result.stdout + result.stderr


def infer_x(url: str, model: str, value: int = 7) -> httpx.Response:
    body = {"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [value]}]}
    return httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)


# The command line


def test_version_and_help() -> None:
    version = subprocess.run(
        [str(INFERD_SCRIPT), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == f"inferd, version {__version__}"
    for command in ([str(INFERD_SCRIPT)], [sys.executable, "-m", "inferd"]):
        shown = subprocess.run(
            [*command, "start", "--help"], capture_output=True, text=True, check=True
        )
        assert "Usage:" in shown.stdout and "start [OPTIONS] [MODEL_REPOSITORY]" in shown.stdout
        assert "MLSERVER_" in shown.stdout


def test_start_serves_the_current_folder_by_default_with_structured_logs(
    tmp_path: Path, launched: list[ServerProcess]
) -> None:
    add_custom_model(tmp_path, "echo", "Echo")
    add_custom_model(tmp_path, "group/inner", "Echo", name=None)  # named after its folder
    ports = free_ports(3)
    write_settings(
        tmp_path,
        {
            "host": "127.0.0.1",
            "parallel_workers": 0,
            "http_port": ports[0],
            "grpc_port": ports[1],
            "metrics_port": ports[2],
            "use_structured_logging": True,
            # uvicorn's own lines are per-process detail, written at debug level only.
            "log_level": "debug",
        },
    )
    server = launch(["start"], cwd=tmp_path, log_dir=tmp_path, ports=ports)
    launched.append(server)
    server.wait_until("/v2/health/ready")
    assert infer_x(server.url, "echo").json()["outputs"][0]["data"] == [7]
    # A nested folder without a name is named after the folder holding its file.
    assert infer_x(server.url, "inner").json()["outputs"][0]["data"] == [7]
    # use_structured_logging: every line is one JSON object, uvicorn's included.
    entries = [json.loads(line) for line in server.log().splitlines()]
    messages = {(entry["logger"], entry["message"]) for entry in entries}
    assert ("inferd.server.parts", "inferd is ready") in messages
    assert any(logger.startswith("uvicorn") for logger, _ in messages)


# Precedence: INFERD_ env > MLSERVER_ env > settings.json > default


def test_the_environment_wins_over_the_file(tmp_path: Path, launched: list[ServerProcess]) -> None:
    add_custom_model(tmp_path, "echo", "Echo")
    file_port, env_port, grpc_port, metrics_port = free_ports(4)
    write_settings(
        tmp_path,
        {
            "host": "127.0.0.1",
            "parallel_workers": 0,
            "http_port": file_port,
            "grpc_port": grpc_port,
            "metrics_port": metrics_port,
            "server_name": "from-file",
            "server_version": "from-file",
        },
    )
    env = {
        "MLSERVER_HTTP_PORT": str(file_port),
        "INFERD_HTTP_PORT": str(env_port),
        "MLSERVER_SERVER_NAME": "from-mlserver-env",
        "INFERD_SERVER_NAME": "from-inferd-env",
        "MLSERVER_SERVER_VERSION": "from-mlserver-env",
        "MLSERVER_CORS_SETTINGS": json.dumps({"allow_origins": ["https://app.example"]}),
        "MLSERVER_MODEL_NAME": "renamed-by-env",
    }
    server = launch(
        ["start", str(tmp_path)],
        cwd=tmp_path,
        log_dir=tmp_path,
        env=env,
        ports=(env_port, grpc_port, metrics_port),
    )
    launched.append(server)
    server.wait_until("/v2/health/ready")
    metadata = httpx.get(server.url + "/v2", headers={"Origin": "https://app.example"})
    assert metadata.json()["name"] == "from-inferd-env"
    assert metadata.json()["version"] == "from-mlserver-env"
    assert metadata.headers["access-control-allow-origin"] == "https://app.example"
    assert infer_x(server.url, "renamed-by-env").status_code == 200
    assert infer_x(server.url, "echo").status_code == 404


# Refusing to start half-configured


def test_a_bad_settings_json_stops_the_start(tmp_path: Path) -> None:
    write_settings(tmp_path, {"http_prot": 9000, "grpc_port": "eighty-one"})
    assert_refused(
        run_inferd(tmp_path),
        str(tmp_path / "settings.json"),
        "http_prot: unknown setting; did you mean 'http_port'?",
        "grpc_port: Input should be a valid integer",
    )


def test_a_bad_model_settings_json_stops_the_start(tmp_path: Path) -> None:
    add_custom_model(tmp_path, "good", "Echo")
    broken = add_custom_model(tmp_path, "broken", "Echo", max_batch_size="lots")
    write_settings(tmp_path, {"host": "127.0.0.1", "parallel_workers": 0})
    assert_refused(
        run_inferd(tmp_path),
        str(broken / "model-settings.json"),
        "max_batch_size: Input should be a valid integer",
    )


def test_a_missing_repository_stops_the_start(tmp_path: Path) -> None:
    assert_refused(run_inferd(tmp_path / "gone"), "gone", "does not exist")
    write_settings(tmp_path, {"model_repository_root": "models"})
    assert_refused(run_inferd(tmp_path), f"Model repository {tmp_path / 'models'} is not")


def test_kafka_is_refused(tmp_path: Path) -> None:
    write_settings(tmp_path, {"kafka_enabled": True})
    assert_refused(run_inferd(tmp_path), "kafka_enabled: inferd has no Kafka server")


def test_a_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    assert_refused(
        run_inferd(tmp_path, {"MLSERVER_HTTP_PORT": "eighty"}),
        "from environment variable MLSERVER_HTTP_PORT",
    )
    assert_refused(
        run_inferd(tmp_path, {"INFERD_CORS_SETTINGS": "[not json"}),
        "INFERD_CORS_SETTINGS",
    )
    # No model-settings.json: the model comes from the environment, and is incomplete.
    assert_refused(
        run_inferd(tmp_path, {"MLSERVER_MODEL_URI": "/mnt/models"}),
        "needs both MLSERVER_MODEL_NAME",
    )


def test_a_bad_logging_settings_file_stops_the_start(tmp_path: Path) -> None:
    write_settings(tmp_path, {"logging_settings": str(tmp_path / "logging.json")})
    assert_refused(run_inferd(tmp_path), f"logging_settings: cannot read {tmp_path}")


# A settings file that breaks after the start only fails its own model's load


@pytest.fixture
def running(start: Callable[..., ServerProcess], tmp_path: Path) -> ServerProcess:
    add_custom_model(tmp_path, "steady", "Echo")
    add_custom_model(tmp_path, "neighbour", "Echo")
    return start(tmp_path)


def test_without_loading_at_start_up_model_files_are_read_on_load(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    add_custom_model(tmp_path, "good", "Echo")
    broken = add_custom_model(tmp_path, "broken", "Echo", max_batch_size="lots")
    server = start(tmp_path, settings={"load_models_at_startup": False})
    load = httpx.post(server.url + "/v2/repository/models/broken/load", timeout=30)
    assert load.status_code == 400
    assert str(broken / "model-settings.json") in load.json()["error"]
    assert httpx.post(server.url + "/v2/repository/models/good/load", timeout=30).status_code == 200
    assert infer_x(server.url, "good").status_code == 200


def test_a_settings_file_broken_later_only_fails_its_models_reload(
    running: ServerProcess,
) -> None:
    settings_file = running.repository / "steady" / "model-settings.json"
    settings_file.write_text(json.dumps({"implementation": "testmodels.Echo", "nmae": "x"}))
    reload = httpx.post(running.url + "/v2/repository/models/steady/load", timeout=30)
    assert reload.status_code == 400
    assert str(settings_file) in reload.json()["error"]
    assert "nmae: unknown setting; did you mean 'name'?" in reload.json()["error"]
    # The instance loaded at start-up keeps serving, and so does every other model.
    assert infer_x(running.url, "steady").json()["outputs"][0]["data"] == [7]
    assert infer_x(running.url, "neighbour").status_code == 200
    assert httpx.get(running.url + "/v2/health/ready").status_code == 200
