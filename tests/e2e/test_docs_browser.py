"""Swagger UI in a real browser: headless Chromium (Debian's package).

The pages must render every documented operation, and every operation must work
from the page as a person would use it: expand it, "Try it out", fill in the
path parameters, "Execute", and get the server's answer shown. A screenshot
checks that the page is really drawn, not blank.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from websockets.sync.client import ClientConnection, connect

from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess

from . import test_docs

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is absent: install it with `apt-get install -y chromium`",
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,2000",
]
# A tab opened over DevTools counts as in the background: keep its timers at full speed.
DEVTOOLS_FLAGS = [
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--remote-debugging-port=0",
]
START_TIMEOUT = 30.0
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}

# Helpers run in the page. Swagger UI is React: values are set through the
# native setter and an input event, as typing would, then the field is left.
PAGE_HELPERS = """
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
async function waitFor(find, what, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const found = find();
    if (found) return found;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(20);
  }
}
function setValue(field, value) {
  field.focus();
  const prototype = Object.getPrototypeOf(field);
  Object.getOwnPropertyDescriptor(prototype, "value").set.call(field, value);
  field.dispatchEvent(new Event(field.tagName === "SELECT" ? "change" : "input", {bubbles: true}));
  field.blur();  // text fields are debounced; leaving one hands its value over at once
}
async function tryOperation(blockId, parameters) {
  const block = await waitFor(() => document.getElementById(blockId), blockId);
  if (!block.classList.contains("is-open")) block.querySelector(".opblock-summary-control").click();
  (await waitFor(() => block.querySelector(".try-out__btn"), "Try it out in " + blockId)).click();
  const execute = await waitFor(() => block.querySelector(".execute"), "Execute in " + blockId);
  for (const [name, value] of Object.entries(parameters)) {
    const selector = `tr[data-param-name="${name}"] input, tr[data-param-name="${name}"] select`;
    setValue(await waitFor(() => block.querySelector(selector), name + " in " + blockId), value);
  }
  execute.click();
  const status = await waitFor(
    () => block.querySelector(".live-responses-table tr.response .response-col_status"),
    "the answer in " + blockId,
  );
  const answer = status.textContent.trim();
  block.querySelector(".opblock-summary-control").click();  // fold it: a smaller page is faster
  return answer;
}
"""


class Page:
    """One browser tab, driven over the DevTools protocol."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    def evaluate(self, expression: str, timeout: float = 60.0) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise)."""
        message_id = next(self.ids)
        params = {"expression": expression, "awaitPromise": True, "returnByValue": True}
        self.socket.send(
            json.dumps({"id": message_id, "method": "Runtime.evaluate", "params": params})
        )
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") != message_id:
                continue  # an event
            result = reply.get("result", {})
            if "exceptionDetails" in result or "error" in reply:
                raise RuntimeError(f"{expression[:80]!r} failed in the page: {reply}")
            return result["result"].get("value")

    def wait_until_loaded(self, url: str) -> None:
        def loaded() -> bool:
            with contextlib.suppress(RuntimeError):  # the page is not there yet
                if self.evaluate("document.readyState + ' ' + location.href") == f"complete {url}":
                    self.evaluate(PAGE_HELPERS.replace("const ", "var ") + "; true")
                    return True
            return False

        wait_for(loaded, f"{url} to load in Chromium", START_TIMEOUT, 0.05)


class Chromium:
    """A headless Chromium with its DevTools endpoint on a free port."""

    def __init__(self, profile: Path) -> None:
        self.process = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, *DEVTOOLS_FLAGS, f"--user-data-dir={profile}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.port = self._devtools_port(profile / "DevToolsActivePort")

    def _devtools_port(self, port_file: Path) -> int:
        def port() -> int:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            lines = port_file.read_text().split() if port_file.exists() else []
            return int(lines[0]) if lines else 0

        return wait_for(port, "chromium to open its DevTools port", START_TIMEOUT, 0.05)

    @contextlib.contextmanager
    def open(self, url: str) -> Iterator[Page]:
        target = httpx.put(f"http://127.0.0.1:{self.port}/json/new?{url}", timeout=10).json()
        with connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as socket:
            page = Page(socket)
            page.wait_until_loaded(url)
            yield page

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# test_docs.py's fixture: module-scoped, so this module gets a server of its own
# (its clicks load and unload models).
docs_server = test_docs.docs_server


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    browser = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


def documented_operations(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(Swagger UI's element id, method, path) of each operation, in page order."""
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                block_id = f"operations-{operation['tags'][0]}-{operation['operationId']}"
                found.append((block_id, method, path))
    return found


def path_values(path: str) -> dict[str, str]:
    """What a person would type: echo for a model, iris version 1 for a version."""
    values = {"name": "iris", "version": "1"} if "{version}" in path else {"name": "echo"}
    values["file"] = "favicon-32x32.png"
    values["region"] = "docs-region"
    return {name: value for name, value in values.items() if f"{{{name}}}" in path}


def try_every_operation(page: Page, document: dict[str, Any]) -> dict[str, str]:
    operations = documented_operations(document)
    # Unload right before load, so that echo is back for the operations after them.
    unload = [op for op in operations if op[0].endswith("-repository_unload")]
    if unload:
        operations.remove(unload[0])
        load = [op[0].endswith("-repository_load") for op in operations].index(True)
        operations.insert(load, unload[0])
    statuses = {}
    for block_id, method, path in tried(operations):
        call = f"tryOperation({json.dumps(block_id)}, {json.dumps(path_values(path))})"
        statuses[f"{method.upper()} {path}"] = page.evaluate(call)
    return statuses


# The server's own page runs some forty operations (half a minute of CI on 2 cores): in
# the long set; the model pages run in CI, and test_docs checks the server's document.
@pytest.mark.parametrize(
    "page_path",
    [
        pytest.param("/v2/docs", marks=pytest.mark.long),
        "/v2/models/echo/docs",
        "/v2/models/iris/versions/1/docs",
    ],
)
def test_every_operation_renders_and_runs_from_swagger_ui(
    docs_server: ServerProcess, chromium: Chromium, page_path: str
) -> None:
    document = httpx.get(f"{docs_server.url}{page_path}/dataplane.json", timeout=10).json()
    operations = documented_operations(document)
    with chromium.open(docs_server.url + page_path) as page:
        count = f"document.querySelectorAll('.opblock').length >= {len(operations)}"
        page.evaluate(f"waitFor(() => {count}, 'the operations').then(() => true)")
        rendered = page.evaluate(
            "[...document.querySelectorAll('.opblock')].map((block) => [block.id,"
            " block.querySelector('.opblock-summary-path').dataset.path])"
        )
        assert sorted(map(tuple, rendered)) == sorted((id_, path) for id_, _, path in operations)
        statuses = try_every_operation(page, document)
    assert statuses == {
        f"{method.upper()} {path}": expected_status(path) for _, method, path in tried(operations)
    }


def tried(operations: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The operations run from the page: not OpenAI's (/v1), which need a generative model
    this docs server does not serve (test_docs checks their documented shapes)."""
    return [operation for operation in operations if not operation[2].startswith("/v1/")]


def expected_status(path: str) -> str:
    """200, but for the shared memory extension (system and CUDA), which is off on this
    server: its status answers an empty list (200) and a named region is not found (404),
    as Triton's does, while register and unregister are refused (403, with how to turn it
    on). The server's own page runs the inference routes with an example body
    that is no model's: echo, an MLServer-style model, takes it (its model-settings.json
    inputs are metadata, as in MLServer)."""
    if path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
        if path.endswith("/status"):
            return "404" if "{region}" in path else "200"
        return "403"
    return "200"


def test_the_page_is_drawn(docs_server: ServerProcess, tmp_path: Path) -> None:
    screenshot = tmp_path / "docs.png"
    command = [
        str(CHROMIUM),
        *FLAGS,
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={screenshot}",
        "--virtual-time-budget=5000",
        docs_server.url + "/v2/docs",
    ]
    subprocess.run(command, capture_output=True, timeout=120, check=True)
    with Image.open(screenshot) as image:
        assert image.format == "PNG" and image.size == (1280, 2000)
        pixels = image.convert("L")
        histogram = pixels.histogram()
    # A blank page is one colour; Swagger UI's is text, coloured method badges, lines.
    drawn = sum(histogram[:240]) / sum(histogram)
    assert drawn > 0.03, f"only {drawn:.1%} of the screenshot is not white"
    assert sum(1 for count in histogram if count) > 50
