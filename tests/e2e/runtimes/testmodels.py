"""Custom runtimes the end-to-end tests serve (copied into each test model's folder)."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import stat
import time
from collections.abc import AsyncIterator, Iterator

import numpy as np

from inferd import InferenceRequest, InferenceResponse, Model, Tensor


class Echo(Model):
    """Returns every input unchanged as an output of the same name."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        outputs = [Tensor(t.name, t.data, dict(t.parameters)) for t in request.inputs]
        return InferenceResponse(outputs=outputs, parameters=dict(request.parameters))


class LogsAtDebug(Model):
    """Logs one DEBUG line per request (its id and this process's pid); answers with
    the pid that ran it (tests/e2e/test_worker_logging.py)."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        logging.getLogger(__name__).debug("debug line of %s from pid %d", request.id, os.getpid())
        return InferenceResponse(outputs=[Tensor("pid", np.array([os.getpid()], dtype=np.int64))])


class SlowEcho(Model):
    """Echo after sleeping the request parameter ``sleep`` seconds (default: the
    ``sleep`` of its settings' extra); adds ``pid``, the process that answered.
    A request parameter ``started`` names a file it creates as it starts."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if "started" in request.parameters:
            with open(str(request.parameters["started"]), "a"):
                pass
        time.sleep(float(request.parameters.get("sleep", self.settings.extra.get("sleep", 0))))
        outputs = [Tensor(t.name, t.data) for t in request.inputs]
        outputs.append(Tensor("pid", np.array([os.getpid()], dtype=np.int64)))
        return InferenceResponse(outputs=outputs)


class ExitsOnNegative(SlowEcho):
    """SlowEcho, except that an input holding a negative number kills its process
    (``os._exit``), as a request that segfaults its worker would."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if any((t.data < 0).any() for t in request.inputs):
            os._exit(3)
        return super().predict(request)


class HoldsItsSocket(SlowEcho):
    """SlowEcho; a request parameter ``hold`` forks a child that keeps this process's
    socket to the server open after this process is killed, until a command arrives
    on it (then the child exits without reading it). The server, which sees the
    process die only when its socket closes, sends that command to a dead worker:
    one the worker never read (tests/e2e/test_workers_suspect.py)."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if request.parameters.get("hold"):
            worker = os.getpid()
            if os.fork() == 0:
                _hold_sockets_after(worker)
        return super().predict(request)


def _hold_sockets_after(worker: int) -> None:
    """In the forked child: once ``worker`` has died, wait (at most a minute) for any of
    the sockets it held to become readable, then exit, closing them."""
    try:
        deadline = time.monotonic() + 60
        while os.getppid() == worker and time.monotonic() < deadline:
            time.sleep(0.01)
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
        sockets = [fd for fd in fds if _is_socket(fd)]
        select.select(sockets, [], [], max(0.0, deadline - time.monotonic()))
    finally:
        os._exit(0)


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


class AsyncDouble(Model):
    """An async predict: doubles a numeric input ``x``; reports its version and pid."""

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = request.input("x").data
        version = self.version or ""
        return InferenceResponse(
            outputs=[
                Tensor("y", x * 2),
                Tensor("version", np.array([version.encode()], dtype=object)),
                Tensor("pid", np.array([os.getpid()], dtype=np.int64)),
            ]
        )


class ServesArtifact(Model):
    """Loads the text file at its ``uri`` and answers it as the BYTES output ``text``;
    its load takes ``extra["load_seconds"]`` (default 0) longer, as a big model's does."""

    async def load(self) -> bool:
        await asyncio.sleep(float(self.settings.extra.get("load_seconds", 0)))
        self.text = self.settings.uri.read_text()
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(outputs=[Tensor("text", np.array([self.text], dtype=object))])


class LoadsLaterInLaterProcesses(SlowEcho):
    """SlowEcho whose load takes ``extra["load_seconds"]`` times the protocol process's
    index (``INFERD_PROTOCOL_INDEX``; 0 out of one): protocol processes that finish
    loading one after the other."""

    async def load(self) -> bool:
        index = int(os.environ.get("INFERD_PROTOCOL_INDEX", "0"))
        await asyncio.sleep(float(self.settings.extra.get("load_seconds", 0)) * index)
        return True


class FailsToPredict(Model):
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        raise ValueError("this model always fails")


class FailsToLoad(Model):
    async def load(self) -> bool:
        raise RuntimeError("cannot find the weights")


class GatedLoad(Model):
    """Loads only once the file named by ``extra["gate"]`` exists in its folder.

    Lets a test hold a load in flight and look at the server meanwhile. It writes
    ``loading-<tag>`` when its load starts and ``unloaded-<tag>`` when it is
    unloaded; predict answers one BYTES output ``tag`` holding ``extra["tag"]``.
    """

    LOAD_DEADLINE = 60.0

    @property
    def tag(self) -> str:
        return str(self.settings.extra.get("tag", ""))

    async def load(self) -> bool:
        folder = self.settings.folder
        (folder / f"loading-{self.tag}").touch()
        gate = folder / str(self.settings.extra.get("gate", "gate"))
        deadline = time.monotonic() + self.LOAD_DEADLINE
        while not gate.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{gate} did not appear")
            await asyncio.sleep(0.01)
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        tag = np.array([self.tag.encode()], dtype=object)
        return InferenceResponse(outputs=[Tensor("tag", tag)])

    async def unload(self) -> None:
        (self.settings.folder / f"unloaded-{self.tag}").touch()


# Runtimes for the streaming load test (tests/e2e/test_stream_load.py).


class CountStream(Model):
    """Streams ``n`` responses for a request whose INT32 input ``n`` holds n: output
    ``i`` counts 0..n-1, ``pid`` says which process ran the stream. It lets the event
    loop run between responses, so concurrent streams interleave in their worker."""

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        count = int(request.input("n").data.reshape(-1)[0])
        pid = np.array([os.getpid()], dtype=np.int64)
        for index in range(count):
            yield InferenceResponse(
                outputs=[Tensor("i", np.array([index], dtype=np.int32)), Tensor("pid", pid)]
            )
            await asyncio.sleep(0)


# Runtimes for the worker-process tests (tests/e2e/test_workers*.py).

WEB_STACK = ("starlette", "uvicorn", "grpc", "google.protobuf", "httptools")


def _bytes_tensor(name: str, value: str) -> Tensor:
    return Tensor(name, np.array([value.encode()], dtype=object))


class WhereAmI(Model):
    """Reports where it runs: pid, worker index, device, CUDA_VISIBLE_DEVICES, and
    which web-stack modules are imported in its process.

    Its load writes ``loaded-<pid>`` (holding "<worker index> <device> <cuda>") in
    its folder; predict sleeps for the request parameter ``sleep`` seconds first.
    """

    def _where(self) -> dict[str, str]:
        return {
            "worker": str(self.context.worker_index),
            "device": str(self.context.device),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES", "unset"),
        }

    async def load(self) -> bool:
        where = self._where()
        text = f"{where['worker']} {where['device']} {where['cuda']}"
        (self.settings.folder / f"loaded-{os.getpid()}").write_text(text)
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        import sys

        time.sleep(float(request.parameters.get("sleep", 0)))
        imported = sorted(name for name in sys.modules if name.startswith(WEB_STACK))
        outputs = [Tensor("pid", np.array([os.getpid()], dtype=np.int64))]
        outputs += [_bytes_tensor(key, value) for key, value in self._where().items()]
        outputs.append(_bytes_tensor("web_modules", ",".join(imported)))
        return InferenceResponse(outputs=outputs)


class Rendezvous(Model):
    """Answers only once ``extra["parties"]`` requests are inside predict at the same
    time (a threading barrier); fails after ``extra["timeout"]`` seconds otherwise."""

    async def load(self) -> bool:
        import threading

        extra = self.settings.extra
        self.barrier = threading.Barrier(int(extra["parties"]), timeout=float(extra["timeout"]))
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        self.barrier.wait()
        return InferenceResponse(outputs=[Tensor("pid", np.array([os.getpid()], np.int64))])


class AsyncRendezvous(Model):
    """Rendezvous with an ``async def predict`` and an asyncio barrier."""

    async def load(self) -> bool:
        self.barrier = asyncio.Barrier(int(self.settings.extra["parties"]))
        return True

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        timeout = float(self.settings.extra["timeout"])
        await asyncio.wait_for(self.barrier.wait(), timeout)
        return InferenceResponse(outputs=[Tensor("pid", np.array([os.getpid()], np.int64))])


class CrashesOnLoad(Model):
    """Its load ends the process at once, as a segfault or an OOM kill would."""

    async def load(self) -> bool:
        os._exit(3)


class CrashesOnReload(Model):
    """Loads once; every later load (after a worker restart) kills its process."""

    async def load(self) -> bool:
        marker = self.settings.folder / "loaded-once"
        if marker.exists():
            os.kill(os.getpid(), 9)
        marker.touch()
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(outputs=[Tensor("pid", np.array([os.getpid()], np.int64))])


# Runtimes for the batching tests (tests/e2e/test_batching.py).


class BatchRecorder(Model):
    """y = 2x for a numeric input ``x`` (or ``text`` echoed for a BYTES input), plus
    ``batch_rows``: how many rows the batch it ran in had, on every row.

    It appends the first column of every batch it runs to ``ran.txt`` in its folder.
    A request with the parameter ``hold`` waits (polling, up to 30 s) until the file
    ``open`` exists in its folder (it touches ``holding`` first): it keeps the one slot
    busy while a test queues more. Every batch takes ``extra["delay"]`` seconds.
    """

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        folder = self.settings.folder
        await asyncio.sleep(float(self.settings.extra.get("delay", 0)))
        if request.parameters.get("hold"):
            (folder / "holding").touch()
            deadline = time.monotonic() + 30
            while not (folder / "open").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        outputs = []
        for tensor in request.inputs:
            data = tensor.data
            outputs.append(Tensor("text" if data.dtype == object else "y", data * 2))
        rows = len(request.inputs[0].data)
        outputs.append(Tensor("batch_rows", np.full(rows, rows, dtype=np.int64)))
        with (folder / "ran.txt").open("a") as ran:
            first = request.inputs[0].data.reshape(rows, -1)[:, 0]
            ran.write(" ".join(str(v) for v in first.tolist()) + "\n")
        return InferenceResponse(outputs=outputs)


class OddOutputs(Model):
    """Returns what the request parameter ``kind`` names: a numpy text array, a
    big-endian array, an array with no V2 datatype, or no response at all."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        kind = request.parameters.get("kind")
        if kind == "text":
            return InferenceResponse([Tensor("y", np.array(["h\u00e9llo", "x"]))])
        if kind == "big-endian":
            return InferenceResponse([Tensor("y", np.arange(3, dtype=">i4"))])
        if kind == "complex":
            return InferenceResponse([Tensor("y", np.array([1 + 2j]))])
        return None  # type: ignore[return-value]  # the mistake under test


# Runtimes for the streaming tests (tests/e2e/test_grpc_streaming.py).


class Tokens(Model):
    """Streams ``count`` responses (request parameter, default 3), ``delay_ms``
    apart: ``index`` i and ``text_output`` "tok<i>"; with ``fail_at`` it raises
    instead of response i. Its generator's ``finally`` touches ``stopped-<request
    id>`` in its folder: how a test sees the stream stop inside the server."""

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        plan = _TokenPlan(request)
        try:
            for index in range(plan.count):
                if index:
                    await asyncio.sleep(plan.delay)
                yield plan.response(index)
        finally:
            (self.settings.folder / f"stopped-{request.id}").touch()


class ThreadTokens(Model):
    """Tokens as a plain generator (in a thread with ``threads_per_worker`` > 1)."""

    def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        plan = _TokenPlan(request)
        try:
            for index in range(plan.count):
                if index:
                    time.sleep(plan.delay)
                yield plan.response(index)
        finally:
            (self.settings.folder / f"stopped-{request.id}").touch()


class _TokenPlan:
    def __init__(self, request: InferenceRequest) -> None:
        parameters = request.parameters
        self.count = int(parameters.get("count", 3))
        # In milliseconds: tritonclient sends no float parameters.
        self.delay = int(parameters.get("delay_ms", 0)) / 1000
        self.fail_at = parameters.get("fail_at")

    def response(self, index: int) -> InferenceResponse:
        if index == self.fail_at:
            raise ValueError(f"the stream broke at {index}")
        text = np.array([f"tok{index}".encode()], dtype=object)
        outputs = [Tensor("index", np.array([index], np.int64)), Tensor("text_output", text)]
        return InferenceResponse(outputs=outputs)


class Sleeps(Model):
    """A known service time: sleeps ``parameters.extra.seconds`` (holding its slot),
    then answers y = 2x."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        time.sleep(float(self.settings.extra.get("seconds", 0.01)))
        return InferenceResponse(outputs=[Tensor("y", request.inputs[0].data * 2)])


class AddSub(Model):
    """Triton's `simple` example: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1;
    ``source`` says where INPUT0's memory came from ("mmap": a shared memory mapping)."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        first, second = request.input("INPUT0").data, request.input("INPUT1").data
        base = first.base
        while isinstance(base, np.ndarray | memoryview):  # views down to the memory's owner
            base = base.base if isinstance(base, np.ndarray) else base.obj
        source = type(base).__name__.encode()
        return InferenceResponse(
            outputs=[
                Tensor("OUTPUT0", first + second),
                Tensor("OUTPUT1", first - second),
                Tensor("source", np.array([source], dtype=object)),
            ]
        )


class GatedAddSub(AddSub):
    """AddSub that, given request parameters ``started`` and ``gate`` (paths), creates
    ``started`` and answers only once ``gate`` exists: a test holds it in flight."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if "started" in request.parameters:
            with open(str(request.parameters["started"]), "a"):
                pass
            gate = str(request.parameters["gate"])
            deadline = time.monotonic() + 60
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().predict(request)


# Runtime for the sequence batching tests (tests/e2e/test_sequences.py).


class Accumulator(Model):
    """A running sum per sequence, kept in its process (as a stateful model keeps
    its state): ``total`` is the sum of the INT64 input ``x`` over the sequence so
    far, ``pid`` the process that answered. It fails loudly where sequence batching
    would be wrong: a request of a sequence this process never started, or two of one
    sequence running at once (predict sleeps ``extra["sleep"]`` seconds to make that
    visible). ``sequence_end`` drops the sum and appends the id to ``ended.txt``."""

    async def load(self) -> bool:
        import threading

        self.totals: dict[int | str, int] = {}
        self.running: set[int | str] = set()
        self.lock = threading.Lock()
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        sequence_id = request.parameters["sequence_id"]
        with self.lock:
            if sequence_id in self.running:
                raise RuntimeError(f"two requests of sequence {sequence_id} ran at once")
            if request.parameters.get("sequence_start"):
                self.totals[sequence_id] = 0
            elif sequence_id not in self.totals:
                raise RuntimeError(f"sequence {sequence_id} has no state in process {os.getpid()}")
            self.running.add(sequence_id)
        try:
            time.sleep(float(self.settings.extra.get("sleep", 0)))
            with self.lock:
                self.totals[sequence_id] += int(request.input("x").data.reshape(-1)[0])
                total = self.totals[sequence_id]
        finally:
            with self.lock:
                self.running.discard(sequence_id)
        return InferenceResponse(
            outputs=[
                Tensor("total", np.array([total], dtype=np.int64)),
                Tensor("pid", np.array([os.getpid()], dtype=np.int64)),
            ]
        )

    def sequence_end(self, sequence_id: int | str) -> None:
        with self.lock:
            self.totals.pop(sequence_id, None)
        with open(self.settings.folder / "ended.txt", "a") as ended:
            ended.write(f"{sequence_id}\n")


class StreamingAccumulator(Accumulator):
    """The Accumulator as a stream: one response per element of ``x``, each with the
    running total so far (a plain generator: each stream holds one of its threads)."""

    def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        sequence_id = request.parameters["sequence_id"]
        with self.lock:
            if request.parameters.get("sequence_start"):
                self.totals[sequence_id] = 0
            elif sequence_id not in self.totals:
                raise RuntimeError(f"sequence {sequence_id} has no state in process {os.getpid()}")
        for value in request.input("x").data.reshape(-1):
            time.sleep(float(self.settings.extra.get("sleep", 0)))
            with self.lock:
                self.totals[sequence_id] += int(value)
                total = self.totals[sequence_id]
            yield InferenceResponse(
                outputs=[
                    Tensor("total", np.array([total], dtype=np.int64)),
                    Tensor("pid", np.array([os.getpid()], dtype=np.int64)),
                ]
            )


class HeavyWeights(Model):
    """Holds a float64 weight matrix of ``extra["megabytes"]`` MiB (default 128), made
    in load as a big model's weights are read (which takes ``extra["load_seconds"]``
    longer, default 0); answers ``y`` = the input ``x`` (rows of the matrix's width)
    times the matrix, its first 4 columns, and ``pid``."""

    async def load(self) -> bool:
        await asyncio.sleep(float(self.settings.extra.get("load_seconds", 0)))
        megabytes = int(self.settings.extra.get("megabytes", 128))
        width = 4096
        rows = megabytes * (1 << 20) // (8 * width)
        self.weights = np.random.default_rng(0).random((rows, width))
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = np.asarray(request.input("x").data, dtype=np.float64)
        y = x @ self.weights.T  # reads every page of the weights
        pid = np.array([os.getpid()], dtype=np.int64)
        return InferenceResponse(outputs=[Tensor("y", y[:, :4]), Tensor("pid", pid)])


class ThreadOnLoad(Echo):
    """Echo whose load leaves a thread running, as some client libraries do."""

    async def load(self) -> bool:
        import threading

        self.stop = threading.Event()
        threading.Thread(target=self.stop.wait, name="left-by-load", daemon=True).start()
        return True


class ConnectsOnLoad(Echo):
    """Echo whose load opens a TCP connection to ``extra["port"]`` and keeps it, as a
    runtime holding a database or feature-store client does."""

    async def load(self) -> bool:
        import socket

        port = int(self.settings.parameters.extra["port"])
        self.connection = socket.create_connection(("127.0.0.1", port), timeout=10)
        return True


class Reflect(Model):
    """Answers what it was given besides the data (tests/e2e/test_triton_parameters.py):
    ``seen``, one BYTES element of JSON with the request's parameters and each input's
    and requested output's parameters, and ``x`` (its input ``x``, unchanged)."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        import json

        seen = {
            "request": request.parameters,
            "inputs": {t.name: t.parameters for t in request.inputs},
            "outputs": {o.name: o.parameters for o in request.outputs},
        }
        text = np.array([json.dumps(seen, sort_keys=True).encode()], dtype=object)
        return InferenceResponse(outputs=[Tensor("seen", text), request.input("x")])
