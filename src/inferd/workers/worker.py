"""The worker process: receive a command, run it, send the reply.

Started by the process pool as ``python -m inferd.workers.worker FD PARENT_PID``
with one end of a UNIX socket pair as file descriptor FD. It imports inferd's
core and the runtimes it is asked to load, never the web stack.

Threads, and why:

- The main thread reads commands. A synchronous ``predict`` with
  ``threads_per_worker: 1`` runs right there: no thread hop for the common case.
- A synchronous ``predict`` with ``threads_per_worker: n > 1`` runs in a pool of
  n threads of its own, so n requests of that model run at once.
- Everything async (``load``, ``unload``, ``async def predict``) runs on one
  event loop in a background thread, so a runtime's loop-bound resources made in
  ``load`` work in ``predict``, and loading one model does not stop the others
  from answering. The exception: an MLServer runtime's ``async def predict``
  that never awaits and uses no loop API runs on the main thread like a
  synchronous one (``LoadedModel.runs_inline``, inferd.compat.inline): the hop
  to the loop thread and back would cost more than the rest of the adapter.
- Streams (``predict_stream``) run on that loop (async generators) or in
  threads of their model's own (plain generators), never on the main thread,
  which reads on: a stream's credit and cancel arrive while it runs
  (:mod:`inferd.workers.worker_streams`).
- Control messages (``base.Control``, each a feature's own: a sequence's end, a
  log level) apply on the main thread, in the order of the commands: after the
  requests sent before them (a sequence's), before anything sent after them.

The main process never sends a model more requests than its
``threads_per_worker``, so none of these needs a queue of its own. Replies are
sent under a lock, whichever thread finishes.

The worker exits when the socket reaches end-of-file (the main process closed it
or died) and is killed by the kernel when the main process dies
(``PR_SET_PDEATHSIG``), so it never outlives the server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Coroutine
from typing import Any, cast

from inferd import custom_metrics
from inferd.errors import ConfigurationError, InferdError, ModelError
from inferd.model import WorkerContext
from inferd.observability.logs import configure_logging
from inferd.settings import ModelSettings, ServerSettings
from inferd.types import InferenceRequest
from inferd.workers import calls_client, ipc
from inferd.workers.base import Control, LoadedInstance
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.worker_streams import WorkerStreams

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


class Worker:
    """Serves the commands arriving on one socket until it closes."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._decoder: ipc.FrameDecoder[ipc.Command] = ipc.FrameDecoder()
        self._send_lock = threading.Lock()
        self._models: dict[int, LoadedModel] = {}
        self._index = -1
        self._cuda_devices: str | None = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="inferd-worker-loop", daemon=True
        )
        self._streams = WorkerStreams(self._loop, self._send, self._reply_error)

    def serve(self) -> None:
        self._loop_thread.start()
        calls_client.offer_calls(self._loop)  # runtimes may call the server's models
        try:
            while (messages := ipc.receive(self._sock, self._decoder)) is not None:
                for kind, call_id, instance_id, body in messages:
                    self._handle(kind, call_id, instance_id, body)
        finally:
            self._stop()

    def _handle(self, kind: int, call_id: int, instance_id: int, body: Any) -> None:
        if kind == ipc.PREDICT:
            self._predict(call_id, instance_id, body)
        elif kind == ipc.PREDICT_TIMED:
            self._predict(call_id, instance_id, body, timed=True)
        elif kind == ipc.CREDIT:
            self._streams.grant(call_id, body)
        elif kind == ipc.STREAM:
            self._stream(call_id, instance_id, body)
        elif kind == ipc.CANCEL:
            self._streams.cancel(call_id)
        elif kind == ipc.CONTROL:
            self._control(call_id, body)
        elif kind == ipc.LOAD:
            settings, device = cast(ipc.LoadBody, body)
            self._on_loop(call_id, self._load(instance_id, settings, device))
        elif kind == ipc.UNLOAD:
            self._on_loop(call_id, self._unload(instance_id))
        elif kind == ipc.INIT:
            self._init(call_id, *cast(ipc.InitBody, body))
        else:
            self._reply_error(call_id, ModelError(f"Worker received unknown command {kind}"))

    def _init(
        self,
        call_id: int,
        index: int,
        sys_path: list[str],
        settings: ServerSettings,
        kept: list[Control],
    ) -> None:
        # The main process's import path, so runtimes import the same modules there and
        # here; none for a worker in a model's own environment, which keeps its own.
        if sys_path:
            sys.path[:] = sys_path
        self._index = index
        configure_logging(settings)
        for message in kept:  # e.g. a log level changed at run time: over the settings
            message.apply_in_worker(self)
        if settings.metrics_enabled:
            # Custom metrics travel to the main process in front of the next reply.
            custom_metrics.start_buffering()
        self._reply(call_id, os.getpid())

    # Prediction

    def _predict(
        self, call_id: int, instance_id: int, packed: ipc.PackedRequest, timed: bool = False
    ) -> None:
        """Run a request; ``timed`` (PREDICT_TIMED: it is traced): answer when predict
        started and ended too, an ipc.TimedResponse."""
        try:
            request = ipc.unpack_request(packed)
        except InferdError as error:  # a client's shared memory it could not read
            self._reply_error(call_id, error)
            return
        loaded = self._models.get(instance_id)
        if loaded is None:
            self._reply_error(call_id, self._not_held(instance_id))
        elif loaded.is_async and not loaded.runs_inline(request):
            self._on_loop(call_id, self._predict_async(loaded, request, timed))
        elif loaded.threads is not None:
            loaded.threads.submit(self._predict_sync, call_id, loaded, request, timed)
        else:
            self._predict_sync(call_id, loaded, request, timed)

    def _predict_sync(
        self, call_id: int, loaded: LoadedModel, request: InferenceRequest, timed: bool = False
    ) -> None:
        started = time.time_ns() if timed else 0
        try:
            packed = ipc.pack_response(loaded.call_sync(request))
        except Exception as error:  # an InferdError, unless something is badly wrong
            self._reply_error(call_id, error)
        else:
            self._reply(call_id, (packed, started, time.time_ns()) if timed else packed)

    async def _predict_async(
        self, loaded: LoadedModel, request: InferenceRequest, timed: bool = False
    ) -> Any:
        started = time.time_ns() if timed else 0
        packed = ipc.pack_response(await loaded.call_async(request))
        return (packed, started, time.time_ns()) if timed else packed

    def _stream(self, call_id: int, instance_id: int, body: ipc.StreamBody) -> None:
        packed, credit = body
        loaded = self._models.get(instance_id)
        if loaded is None:
            self._reply_error(call_id, self._not_held(instance_id))
            return
        try:
            request = ipc.unpack_request(packed)
        except InferdError as error:  # a client's shared memory it could not read
            self._reply_error(call_id, error)
            return
        self._streams.start(call_id, loaded, request, credit)

    def _control(self, call_id: int, message: Control) -> None:
        """On this thread, so that it takes effect after the requests read before it and
        before those read after it (a sequence's end: no request of it runs meanwhile)."""
        try:
            message.apply_in_worker(self)
        except Exception as error:
            self._reply_error(call_id, ModelError(f"{type(message).__name__}: {error}"))
            return
        self._reply(call_id, None)

    def loaded(self, instance_id: int) -> LoadedModel | None:
        """What a control message reaches (base.WorkerState)."""
        return self._models.get(instance_id)

    def _not_held(self, instance_id: int) -> ModelError:
        return ModelError(f"Worker {self._index} does not hold model instance {instance_id}")

    # Loading

    async def _load(
        self, instance_id: int, settings: ModelSettings, device: str | None
    ) -> LoadedInstance:
        self._use_device(settings, device)
        loaded = await LoadedModel.load(settings, WorkerContext(self._index, device))
        self._models[instance_id] = loaded
        return loaded.instance()

    def _use_device(self, settings: ModelSettings, device: str | None) -> None:
        """Set CUDA_VISIBLE_DEVICES for a ``cuda:N`` device before the runtime loads."""
        visible = cuda_visible_devices(device)
        if visible is None:
            return
        if self._cuda_devices not in (None, visible):
            logger.warning(
                "Worker %d already set CUDA_VISIBLE_DEVICES=%s for another model; model %r "
                "asks for %s, which may not take effect once CUDA is initialized",
                self._index,
                self._cuda_devices,
                settings.name,
                device,
            )
        self._cuda_devices = visible
        os.environ["CUDA_VISIBLE_DEVICES"] = visible

    async def _unload(self, instance_id: int) -> None:
        loaded = self._models.pop(instance_id, None)
        if loaded is not None:
            await loaded.release()

    # Replies

    def _on_loop(self, call_id: int, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run ``coroutine`` on the worker's event loop and reply when it is done."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        future.add_done_callback(lambda done: self._reply_with(call_id, done))

    def _reply_with(self, call_id: int, done: concurrent.futures.Future[Any]) -> None:
        error = done.exception()
        if error is None:
            self._reply(call_id, done.result())
        else:
            self._reply_error(call_id, error)

    def _reply(self, call_id: int, result: Any) -> None:
        try:
            pieces = ipc.encode_reply(ipc.RESULT, call_id, result)
        except Exception as error:
            message = f"Worker {self._index} cannot send the result back: {error}"
            self._reply_error(call_id, ModelError(message))
            return
        self._send(pieces)

    def _reply_error(self, call_id: int, error: BaseException) -> None:
        if not isinstance(error, InferdError | ConfigurationError):
            logger.error("Worker %d: %s", self._index, error, exc_info=error)
        self._send(ipc.encode_reply(ipc.ERROR, call_id, ipc.error_to_wire(error)))

    def _send(self, pieces: list[ipc.Buffer]) -> None:
        with self._send_lock:
            metrics = custom_metrics.take()
            if metrics is not None:
                pieces = ipc.encode_reply(ipc.METRICS, -1, metrics) + pieces
            try:
                ipc.send(self._sock, pieces)
            except OSError:
                # The main process is gone; the receive loop sees end-of-file and exits.
                logger.debug("Worker %d could not send a reply", self._index, exc_info=True)

    def _stop(self) -> None:
        with contextlib.suppress(Exception):
            self._sock.close()
        self._streams.cancel_all()  # threads waiting for credit would keep the process up
        for loaded in self._models.values():
            loaded.shut_threads(cancel_futures=True)


def cuda_visible_devices(device: str | None) -> str | None:
    """The CUDA_VISIBLE_DEVICES value for a device such as ``cuda:1`` (None: leave it)."""
    if device is None:
        return None
    kind, _, index = device.partition(":")
    if kind == "cuda" and index.isdigit():
        return index
    return None


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when the main process dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(0)  # the parent died before the signal was armed


def main(argv: list[str] | None = None) -> None:
    fd, parent_pid = (int(arg) for arg in (argv or sys.argv[1:]))
    die_with_parent(parent_pid)
    # Ctrl-C reaches the whole process group: the main process decides when workers
    # stop (it drains requests first), by closing their sockets.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)  # processes a runtime starts must not hold it open
    Worker(sock).serve()


if __name__ == "__main__":
    main()
