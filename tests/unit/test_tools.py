"""The pure parts of `inferd infer/bench/tune`: step specs, wire conversion, micro-batches."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from inferd.cli import infer
from inferd.protocol import pb
from inferd.tools import wire
from inferd.tools.bench import StepResult, parse_steps
from inferd.tools.benchreport import table
from inferd.tools.benchrequest import generated_request
from inferd.tools.grpc_tls import _concrete, _holds
from inferd.tools.infer import InferOptions, InferSummary
from inferd.tools.leanhttp import parse_answer
from inferd.tools.tune import TuneOptions, phases
from inferd.tools.v2client import Endpoint, header_pairs


def test_parse_steps_forms() -> None:
    assert parse_steps("8") == (8,)
    assert parse_steps("1,4,16") == (1, 4, 16)
    assert parse_steps("1:64:x2") == (1, 2, 4, 8, 16, 32, 64)
    assert parse_steps("1:10:+4") == (1, 5, 9)
    assert parse_steps("2:5") == (2, 4)
    with pytest.raises(ValueError):
        parse_steps("4:1:x2")
    with pytest.raises(ValueError):
        parse_steps("1:8:x1")


def test_endpoint_parsing() -> None:
    assert Endpoint.parse("localhost:8080").netloc == "localhost:8080"
    assert Endpoint.parse("http://h:1").port == 1
    secure = Endpoint.parse("https://h", insecure=True)
    assert secure.port == 443 and secure.tls is not None
    with pytest.raises(ValueError):
        Endpoint.parse(":80")


def test_insecure_grpc_asks_for_a_name_the_certificate_holds() -> None:
    names = ["localhost", "127.0.0.1", "::1"]
    assert _holds(names, "LOCALHOST") and _holds(names, "127.0.0.1")
    assert _holds(names, "0:0::1")  # the same address, written otherwise
    assert not _holds(names, "127.0.0.2") and not _holds(names, "inferd.example")
    assert not _holds(["*.example"], "a.example")  # overridden with a name that matches
    assert _concrete("*.example") == "insecure.example"
    assert _concrete("inferd.example") == "inferd.example"


def test_every_infer_flag_reads_an_mlserver_infer_variable() -> None:
    options = [param for param in infer.params if isinstance(param, click.Option)]
    assert len(options) > 15
    missing = [option.name for option in options if not option.envvar]
    assert missing == []
    assert all(str(option.envvar).startswith("MLSERVER_INFER_") for option in options)


def test_preserve_order_and_model_version_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[InferOptions] = []

    def run_infer(options: InferOptions) -> InferSummary:
        seen.append(options)
        return InferSummary()

    monkeypatch.setattr("inferd.tools.infer.run_infer", run_infer)
    (tmp_path / "in.jsonl").write_text("")
    arguments = ["-m", "m", "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")]
    environment = {"MLSERVER_INFER_PRESERVE_ORDER": "false", "MLSERVER_INFER_MODEL_VERSION": "7"}
    result = CliRunner().invoke(infer, arguments, env=environment)
    assert result.exit_code == 0, result.output
    assert (seen[0].ordered, seen[0].model_version) == (False, "7")
    result = CliRunner().invoke(infer, arguments, env={})
    assert (seen[1].ordered, seen[1].model_version) == (True, "")


def test_headers_and_response_heads() -> None:
    assert header_pairs(["A: 1", "b:two: x"]) == {"A": "1", "b": "two: x"}
    with pytest.raises(ValueError):
        header_pairs(["no colon"])
    parsed = parse_answer(bytearray(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\r\n"))
    assert parsed is not None and (parsed[0].status, parsed[0].retry_after) == (503, 1.0)


def request(rows: int, start: float = 0.0) -> dict:
    data = (np.arange(rows * 2) + start).tolist()
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 2], "data": data}]}


def test_merge_and_split_round_trip() -> None:
    merged, rows = wire.merge([request(1), request(2, 10), request(1, 20)])
    assert rows == [1, 2, 1]
    assert merged["inputs"][0]["shape"] == [4, 2]
    response = {"model_name": "m", "outputs": [dict(merged["inputs"][0], name="y")]}
    answers = wire.split(response, rows)
    assert [a["outputs"][0]["shape"] for a in answers] == [[1, 2], [2, 2], [1, 2]]
    assert list(answers[1]["outputs"][0]["data"]) == [10, 11, 12, 13]


def test_grpc_message_and_response_json() -> None:
    body = {"id": "7", "parameters": {"p": 1}, **request(2)}
    message = pb.ModelInferRequest.FromString(wire.grpc_message("m", "v1", body))
    assert (message.model_name, message.model_version, message.id) == ("m", "v1", "7")
    assert list(message.inputs[0].shape) == [2, 2]
    assert np.frombuffer(message.raw_input_contents[0], "<f4").tolist() == [0, 1, 2, 3]
    answer = pb.ModelInferResponse(model_name="m", id="7")
    answer.outputs.add(name="y", datatype="INT64", shape=[2])
    answer.raw_output_contents.append(np.array([5, 6], "<i8").tobytes())
    decoded = wire.grpc_response_json(answer.SerializeToString())
    assert decoded["id"] == "7" and list(decoded["outputs"][0]["data"]) == [5, 6]


def test_binary_rest_body() -> None:
    body, headers = wire.rest_body(request(1), binary=True)
    header_length = int(headers[wire.BINARY_HEADER])
    assert body[header_length:] == np.array([0, 1], "<f4").tobytes()
    assert b'"binary_data_size":8' in body[:header_length]


def test_generated_request_from_metadata() -> None:
    metadata = {
        "inputs": [
            {"name": "a", "datatype": "FP64", "shape": [-1, 4]},
            {"name": "b", "datatype": "BYTES", "shape": [-1, -1]},
        ]
    }
    generated = generated_request(metadata, 8, {})
    assert [t["shape"] for t in generated["inputs"]] == [[8, 4], [8, 1]]
    assert len(generated["inputs"][0]["data"]) == 32
    assert generated_request(metadata, 1, {"a": [2, 4]})["inputs"][0]["shape"] == [2, 4]


def test_table_has_a_line_per_step() -> None:
    step = StepResult(4, 0.0, 100, 0, 0, 50.0, 1, 2, 3, 4, 1.5, 10, 20, 3, True)
    lines = table([step, step]).splitlines()
    assert len(lines) == 3 and lines[1].split()[:2] == ["c=4", "50"]


def test_tune_phases_follow_the_guides_order() -> None:
    options = TuneOptions(repository=None, model_name="m", p99_ms=10, workers=(1, 2))  # type: ignore[arg-type]
    names = [name for name, _ in phases(options)]
    assert names == ["parallel_workers", "threads_per_worker", "batching"]
    batching = dict(phases(options))["batching"]
    assert {"max_batch_size": 8, "max_batch_time": 0.001} in batching and len(batching) == 4


def test_plot_draws_one_point_per_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    from PIL import Image

    from inferd.tools.benchreport import plot

    steps = [
        StepResult(c, 0.0, 100, 0, 0, 50.0 * c, 1, 2, 3, 4.0 * c, 1.5, 10, 20, 3, True)
        for c in (1, 2, 4)
    ]
    assert plot(steps, tmp_path / "b.png", "t") == 3
    with Image.open(tmp_path / "b.png") as image:
        assert image.format == "PNG"
