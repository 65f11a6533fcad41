"""Every code block of the quick start, run as a reader would against a real server
of the example models (on free ports), and each answer the page shows compared with
the server's. Blocks that cannot run here say so on the page
(``<!-- quickstart-test: skip (why) -->``)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs.pages import DOCS, ROOT, Block, code_blocks
from tests.support.models import train_iris
from tests.support.serverproc import ServerProcess, start_server

QUICKSTART = DOCS / "quickstart.md"
EXAMPLES = ROOT / "examples" / "models"
BLOCKS = code_blocks(QUICKSTART.read_text())
RUN = [block for block in BLOCKS if block.language in ("bash", "python") and block.skip is None]
# curl fails on an HTTP error status, so a 4xx is a failed block, not a printed error.
BASH_PRELUDE = 'set -euo pipefail\ncurl() { command curl --fail-with-body --max-time 60 "$@"; }\n'
pytestmark = pytest.mark.timeout(300)


def write_models(repository: Path) -> Path:
    """The example repository, as scripts/serve-examples.sh serves it."""
    shutil.copytree(EXAMPLES, repository, dirs_exist_ok=True)
    train_iris(repository / "sklearn-iris" / "model.joblib")
    return repository


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with start_server(write_models(tmp_path_factory.mktemp("models"))) as running:
        yield running


def on_the_test_server(code: str, server: ServerProcess) -> str:
    """The block's code with the documented ports replaced by the test server's."""
    for documented, port in (
        ("localhost:8080", server.http_port),
        ("localhost:8081", server.grpc_port),
        ("localhost:8082", server.metrics_port),
    ):
        code = code.replace(documented, f"127.0.0.1:{port}")
    assert "localhost" not in code, f"a host the test does not serve:\n{code}"
    return code


def same_answer(shown: Any, got: Any) -> bool:
    """Equal as a person reads the page: the same classes and labels exactly, numbers to
    two decimal places (the last digits of a probability change with the scikit-learn
    and numpy builds pip picks, as the page says), and in a row of numbers the same one
    the largest (the class a reader would take)."""
    if isinstance(shown, float) or isinstance(got, float):
        return isinstance(got, int | float) and math.isclose(shown, got, rel_tol=1e-2, abs_tol=5e-3)
    if isinstance(shown, dict):
        return (
            isinstance(got, dict)
            and shown.keys() == got.keys()
            and all(same_answer(shown[key], got[key]) for key in shown)
        )
    if isinstance(shown, list):
        return (
            isinstance(got, list)
            and len(shown) == len(got)
            and all(same_answer(a, b) for a, b in zip(shown, got, strict=True))
            and _largest(shown) == _largest(got)
        )
    return bool(shown == got)


def _largest(row: list[Any]) -> int | None:
    """Where a row of numbers has its largest (None: not a row of numbers)."""
    if not row or not all(isinstance(value, int | float) for value in row):
        return None
    return max(range(len(row)), key=row.__getitem__)


def check_answer(block: Block, output: str) -> None:
    if block.shown is None:
        return
    try:
        shown, got = json.loads(block.shown), json.loads(output)
    except json.JSONDecodeError:
        assert output.strip() == block.shown.strip(), f"line {block.line}: {output!r}"
        return
    assert same_answer(shown, got), (
        f"line {block.line}: the page shows\n{block.shown}\ngot\n{output}"
    )


@pytest.mark.parametrize(
    "got, same",
    [
        ([0.9815572050622741, 0.018442780456807827, 1.4480918258509202e-8], True),
        ([0.9816568320652066, 0.018343153539750134, 1.4395043299306138e-8], True),
        ([0.97, 0.03, 0.0], False),  # another figure at the second decimal place
        ([0.49, 0.51, 0.0], False),  # another class
        ([0.98, 0.02], False),
    ],
)
def test_answers_are_compared_as_a_person_reads_them(got: list[float], same: bool) -> None:
    shown = {"data": [0.9816, 0.0183, 1.4e-8], "datatype": "FP64"}
    assert same_answer(shown, {"data": got, "datatype": "FP64"}) is same
    assert not same_answer({"data": [0]}, {"data": [1]})  # a class label is exact


def test_every_block_is_run_or_marked() -> None:
    shown = {block.shown for block in BLOCKS if block.shown is not None}
    assert len(RUN) >= 8
    for block in BLOCKS:
        assert block.language in ("bash", "python", "text"), (
            f"line {block.line}: {block.language!r}"
        )
        if block.language == "text":
            assert block.code in shown, f"line {block.line}: an answer of no block"
        if block.skip is not None:
            assert block.skip.strip(), f"line {block.line}: say why it is not run"


@pytest.mark.parametrize("block", RUN, ids=[f"line-{block.line}" for block in RUN])
def test_quickstart_block(block: Block, server: ServerProcess) -> None:
    code = on_the_test_server(block.code, server)
    command = (
        ["bash", "-c", BASH_PRELUDE + code]
        if block.language == "bash"
        else [sys.executable, "-c", code]
    )
    ran = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ran.returncode == 0, (
        f"line {block.line} exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}\n"
        f"server log:\n{server.log()[-3000:]}"
    )
    check_answer(block, ran.stdout)
