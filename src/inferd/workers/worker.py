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
from typing import Any

from inferd import custom_metrics
from inferd.errors import InferdError, ModelError
from inferd.model import WorkerContext
from inferd.observability.logs import configure_logging
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest
from inferd.workers import calls_client, ipc, messages, oom_score
from inferd.workers.base import LoadedInstance
from inferd.workers.command_server import CommandServer
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.worker_streams import WorkerStreams

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


class Worker(CommandServer):
    """Serves the commands arriving on one socket until it closes."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(
            {
                messages.Predict: self._predict,
                messages.PredictTimed: self._predict,
                messages.Credit: self._credit,
                messages.Stream: self._stream,
                messages.Cancel: self._cancel,
                messages.ApplyControl: self._control,
                messages.LoadInWorker: self._load_in_worker,
                messages.Unload: self._unload_command,
                messages.Init: self._init,
            }
        )
        self._sock = sock
        self._decoder: ipc.FrameDecoder[messages.WireCommand] = ipc.FrameDecoder()
        self._send_lock = threading.Lock()
        self._models: dict[int, LoadedModel] = {}
        self._index = -1
        self._cuda_devices: str | None = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="inferd-worker-loop", daemon=True
        )
        self._streams = WorkerStreams(self._loop, self.send, self.reply_error)
        # The async predicts' tasks on the loop, by call id: a Cancel cancels one.
        self._running: dict[int, asyncio.Task[Any]] = {}

    def serve(self) -> None:
        self._loop_thread.start()
        calls_client.offer_calls(self._loop)  # runtimes may call the server's models
        try:
            while (received := ipc.receive(self._sock, self._decoder)) is not None:
                self._acknowledge(received)
                for wire in received:
                    self.handle(wire)
        finally:
            self._stop()

    def describe(self) -> str:
        return f"Worker {self._index}"

    def _acknowledge(self, received: list[messages.WireCommand]) -> None:
        """Say which requests were read before running any (messages.READ): one that
        kills this process was read, one still in the socket when it dies was not."""
        last = -1
        for wire in received:
            if type(wire) is tuple and len(wire) > 1 and wire[0] in messages.WORK_KINDS:
                last = wire[1]
        if last >= 0:
            self.send(messages.encode_reply(messages.READ, last, None))

    def _init(self, call_id: int, instance_id: int, init: messages.Init) -> None:
        # The main process's import path, so runtimes import the same modules there and
        # here; none for a worker in a model's own environment, which keeps its own.
        if init.sys_path:
            sys.path[:] = init.sys_path
        self._index = init.index
        configure_logging(init.settings)
        for message in init.kept:  # e.g. a log level changed at run time: over the settings
            message.apply_in_worker(self)
        if init.settings.metrics_enabled:
            # Custom metrics travel to the main process in front of the next reply.
            custom_metrics.start_buffering()
        self.reply(call_id, os.getpid())

    # Prediction

    def _predict(
        self, call_id: int, instance_id: int, command: messages.Predict | messages.PredictTimed
    ) -> None:
        """Run a request; a PredictTimed (it is traced) is answered with when predict
        started and ended too, a messages.WorkerTimed."""
        timed = type(command) is messages.PredictTimed
        try:
            request = ipc.unpack_request(command.request)
        except InferdError as error:  # a client's shared memory it could not read
            self.reply_error(call_id, error)
            return
        loaded = self._models.get(instance_id)
        if loaded is None:
            self.reply_error(call_id, self._not_held(instance_id))
        elif loaded.is_async and not loaded.runs_inline(request):
            predict = self._predict_async(loaded, request, timed)
            self._on_loop(call_id, self._cancellable(call_id, predict))
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
            self.reply_error(call_id, error)
        else:
            self.reply(call_id, (packed, started, time.time_ns()) if timed else packed)

    async def _predict_async(
        self, loaded: LoadedModel, request: InferenceRequest, timed: bool = False
    ) -> Any:
        started = time.time_ns() if timed else 0
        packed = ipc.pack_response(await loaded.call_async(request))
        return (packed, started, time.time_ns()) if timed else packed

    async def _cancellable(self, call_id: int, predict: Coroutine[Any, Any, Any]) -> Any:
        """``predict``, its task noted for a Cancel of ``call_id`` while it runs."""
        task = asyncio.current_task()
        assert task is not None
        self._running[call_id] = task
        try:
            return await predict
        finally:
            del self._running[call_id]

    def _stream(self, call_id: int, instance_id: int, command: messages.Stream) -> None:
        loaded = self._models.get(instance_id)
        if loaded is None:
            self.reply_error(call_id, self._not_held(instance_id))
            return
        try:
            request = ipc.unpack_request(command.request)
        except InferdError as error:  # a client's shared memory it could not read
            self.reply_error(call_id, error)
            return
        self._streams.start(call_id, loaded, request, command.credit)

    def _credit(self, call_id: int, instance_id: int, command: messages.Credit) -> None:
        self._streams.grant(call_id, command.amount)

    def _cancel(self, call_id: int, instance_id: int, command: messages.Cancel) -> None:
        """The client left: a stream stops, an async predict is cancelled (a Triton
        model's requests read is_cancelled(), the calls it made are cancelled); a
        synchronous one runs to its end."""
        running = self._running.get(call_id)
        if running is not None:  # answered once it has stopped: its slot frees then
            self._loop.call_soon_threadsafe(running.cancel)
        else:
            self._streams.cancel(call_id)

    def _control(self, call_id: int, instance_id: int, command: messages.ApplyControl) -> None:
        """On this thread, so that it takes effect after the requests read before it and
        before those read after it (a sequence's end: no request of it runs meanwhile)."""
        message = command.message
        try:
            message.apply_in_worker(self)
        except Exception as error:
            self.reply_error(call_id, ModelError(f"{type(message).__name__}: {error}"))
            return
        self.reply(call_id, None)

    def loaded(self, instance_id: int) -> LoadedModel | None:
        """What a control message reaches (base.WorkerState)."""
        return self._models.get(instance_id)

    def _not_held(self, instance_id: int) -> ModelError:
        return ModelError(f"Worker {self._index} does not hold model instance {instance_id}")

    # Loading

    def _load_in_worker(
        self, call_id: int, instance_id: int, command: messages.LoadInWorker
    ) -> None:
        self._on_loop(call_id, self._load(instance_id, command.settings, command.device))

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

    def _unload_command(self, call_id: int, instance_id: int, command: messages.Unload) -> None:
        self._on_loop(call_id, self._unload(instance_id))

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
        if done.cancelled():  # a Cancel: nobody waits for the answer, its slot does
            self.reply_error(call_id, ModelError("The request was cancelled: its client left"))
            return
        error = done.exception()
        if error is None:
            self.reply(call_id, done.result())
        else:
            self.reply_error(call_id, error)

    def send(self, pieces: list[ipc.Buffer]) -> None:
        """Under a lock, whichever thread finishes; custom metrics go in front."""
        with self._send_lock:
            metrics = custom_metrics.take()
            if metrics is not None:
                pieces = messages.encode_reply(messages.METRICS, -1, metrics) + pieces
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
    oom_score.take_role(oom_score.SPAWNED)
    # Ctrl-C reaches the whole process group: the main process decides when workers
    # stop (it drains requests first), by closing their sockets.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)  # processes a runtime starts must not hold it open
    Worker(sock).serve()


if __name__ == "__main__":
    main()
