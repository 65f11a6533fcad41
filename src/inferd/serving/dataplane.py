"""The protocol-neutral entry point shared by the REST and gRPC servers.

It finds the ready version in the registry and answers it through the version's
backend (serving/backends.py ``VersionCalls``): this process's dispatch, or the
model host's client for a hosted model.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from inferd.context import NO_CONTEXT, RequestContext
from inferd.dispatch.queueing import request_timeout
from inferd.errors import (
    InferdError,
    InvalidRequest,
    ModelNotFound,
    ShuttingDown,
)
from inferd.model_calls import note_deadline
from inferd.observability.stats import ModelStats, ModelStatsTable
from inferd.observability.trace_settings import TraceSettings
from inferd.serving.answers import finish, record_end
from inferd.serving.drain import STOPPED, Drain
from inferd.serving.extensions import served_extensions
from inferd.serving.on_demand import OnDemand
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository
from inferd.serving.repository_index import repository_index
from inferd.serving.runtime_headers import pass_headers, take_response_headers
from inferd.serving.version_split import VersionSplit
from inferd.settings import ServerSettings
from inferd.triton import logsettings
from inferd.triton.config import model_config
from inferd.triton.override import apply_override
from inferd.triton.shm import SharedMemoryRegistry
from inferd.types import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ModelState,
    RepositoryEntry,
    ServerMetadata,
)

logger = logging.getLogger(__name__)


class DataPlane:
    def __init__(
        self, settings: ServerSettings, registry: Registry, repository: ModelRepository
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.repository = repository
        # False until the models that load at start-up have been tried.
        self.started = False
        # A protocol process among several: no model reads ready before the process is
        # (at the start, until every process has loaded), so a client that waits for
        # its model is not sent to a process still loading it.
        self.models_ready_once_started = False
        # Statistics extension counters, plus Prometheus histograms when metrics are on.
        self.model_stats: ModelStatsTable = registry.stats
        # Inference calls in flight; closed (new ones refused) once the server drains.
        self.drain = Drain()
        # Shared memory regions (system and CUDA) clients registered (None: the extension is off).
        self.shared_memory: SharedMemoryRegistry | None = None
        if settings.shared_memory_enabled:
            self.shared_memory = SharedMemoryRegistry(settings.shared_memory_key_prefix)
        # Triton's trace settings: which inference requests are traced, per model.
        self.trace_settings = TraceSettings(settings.tracing_enabled)
        # Models loaded on their first request (load_on_request; None: off).
        self.on_demand: OnDemand | None = None
        if settings.load_on_request:
            self.on_demand = OnDemand(registry, repository, settings.max_loaded_models)
        # Requests that name no version, shared between versions (version_weights).
        self.version_split = VersionSplit(registry)

    # Health

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.started and not self.drain.closed and self.registry.all_ready()

    def model_streams(self, name: str, version: str | None = None) -> bool:
        """Whether the ready version answers the streaming endpoints with
        ``predict_stream`` (else with its one predict answer); raises if not ready.
        True for one to be loaded on request: the stream answers either kind."""
        if self.on_demand is not None and self.on_demand.to_load(name, version):
            return True
        instance = self.registry.get_ready(name, version).instance
        return instance is not None and instance.streams

    def model_predicts(self, name: str, version: str | None = None) -> bool:
        """Whether the ready version answers ``infer`` (one that only streams does not);
        raises if not ready."""
        instance = self.registry.get_ready(name, version).instance
        return instance is not None and instance.predicts

    def custom_route(self, method: str, path: str) -> tuple[str, str | None, str] | None:
        """The ready model version serving the runtime's own route ``method path``
        (MLServer's custom handlers): its name, version and handler; None if none does."""
        for found in self.registry.versions():
            instance = found.instance
            if found.state is not ModelState.READY or instance is None:
                continue
            for route_method, route_path, handler in instance.custom_routes:
                if route_path == path and route_method == method:
                    return found.name, found.version, handler
        return None

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether it is READY and taking requests (False for a repository model not loaded)."""
        try:
            found = self.registry.find(name, version)
        except ModelNotFound:
            if self.repository.holds(name, version):
                return False
            raise  # a name the repository does not hold either
        if self.models_ready_once_started and not self.started:
            return False
        return found.state is ModelState.READY and not self.drain.closed

    # Metadata

    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata(
            name=self.settings.server_name,
            version=self.settings.server_version,
            extensions=served_extensions(self.settings, self.shared_memory),
        )

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        """The runtime's metadata; its ``versions``, unless the model-settings declare
        some (MLServer's use), list the versions of ``name`` loaded (Triton's use)."""
        found = self.registry.get_ready(name, version)
        assert found.instance is not None  # set when the version became READY
        metadata = found.instance.metadata
        if metadata.versions:
            return metadata
        return dataclasses.replace(metadata, versions=self.registry.ready_versions(name))

    def model_config(self, name: str, version: str | None = None) -> dict[str, Any]:
        """Triton's model configuration of a loaded version (inferd.triton.config)."""
        found = self.registry.get_ready(name, version)
        instances = self.registry.instances(found)
        return model_config(found.settings, instances, self.settings.max_queue_size)

    def classified(self, response: InferenceResponse, counts: dict[str, int]) -> InferenceResponse:
        """``response`` with the outputs in ``counts`` answered as their top classes
        (Triton's classification extension, inferd.triton.classification)."""
        found = self.registry.find(response.model_name, response.model_version)
        assert found.classifier is not None  # set as the version loads
        return found.classifier.classified(response, counts)

    # Logging (Triton's logging extension)

    def log_settings(self, changes: dict[str, Any] | None = None) -> dict[str, Any]:
        """The server's log settings in Triton's fields, after applying ``changes``
        (in the server process and, through the pool, in every worker process)."""
        if changes:
            updated = logsettings.update_log_settings(changes)
            self.registry.control(logsettings.SetLogLevel(logging.getLogger().level))
            return updated
        return logsettings.log_settings()

    # Inference

    async def infer(
        self,
        name: str,
        version: str | None,
        request: InferenceRequest,
        context: RequestContext = NO_CONTEXT,
    ) -> InferenceResponse:
        """Run one request; ``context`` is what the server knows of it besides its
        tensors (see :class:`~inferd.context.RequestContext`).

        Refused with ShuttingDown once the server drains; one still running at the
        shutdown deadline fails with it (see :mod:`inferd.serving.drain`)."""
        task = self.drain.admit()
        try:
            note_deadline(request)  # its calls to other models end with it (model_calls)
            if self.on_demand is None:
                return await self._infer(name, version, request, context)
            async with self.on_demand.using(name, version, request_timeout(request, None)):
                return await self._infer(name, version, request, context)
        except asyncio.CancelledError:
            stopped = self.drain.stopped(task)
            if stopped is None:
                raise
            raise stopped from None
        finally:
            self.drain.leave(task)

    async def _infer(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> InferenceResponse:
        version = version or self.version_split.pick(name, context)  # after any load on request
        found = self.registry.get_ready(name, version)
        calls, stats, instance = found.calls, found.stats, found.instance
        assert calls is not None and stats is not None and instance is not None
        if not instance.predicts:
            raise InvalidRequest(_only_streams(found.name))
        if found.declared is not None:
            found.declared.check(request)
        started = time.perf_counter_ns()
        cache, cache_key = found.cache, None
        if cache is not None:  # before the headers join the parameters: not in the key
            cache_key, cached = cache.lookup(request)
            if cached is not None:
                record_end(stats, request, started)
                if instance.wants_headers:
                    take_response_headers(cached, context)
                return cached
        if instance.wants_headers:
            pass_headers(request, context)
        try:
            response = finish(await calls.submit(request, context), found, request)
        except BaseException as error:  # cancelled requests count as failed too
            record_end(stats, request, started, type(error).__name__)
            raise
        if cache is not None and cache_key is not None:
            cache.store(cache_key, response)
        record_end(stats, request, started)
        if instance.wants_headers:
            take_response_headers(response, context)
        return response

    def infer_stream(
        self,
        name: str,
        version: str | None,
        request: InferenceRequest,
        context: RequestContext = NO_CONTEXT,
    ) -> AsyncGenerator[list[InferenceResponse], None]:
        """Run one request on a streaming endpoint: the responses as the model's
        ``predict_stream`` yields them, in order, in lists of those ready together
        (send each list at once: one write for several events); or the one answer
        of a model that only predicts.

        Errors before the first response raise from the first read. Closing this
        iterator early (a client that left) stops the model's generator. As infer,
        refused once the server drains, stopped (ShuttingDown) at its deadline.
        """
        if self.on_demand is None:
            return self._infer_stream(name, version, request, context)
        return self.on_demand.stream(
            name,
            version,
            request_timeout(request, None),
            lambda: self._infer_stream(name, version, request, context),
        )

    async def _infer_stream(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> AsyncGenerator[list[InferenceResponse], None]:
        note_deadline(request)
        version = version or self.version_split.pick(name, context)
        found = self.registry.get_ready(name, version)
        calls, stats, instance = found.calls, found.stats, found.instance
        assert calls is not None and stats is not None and instance is not None
        if not instance.streams:
            yield [await self.infer(name, version, request, context)]
            return
        if found.declared is not None:
            found.declared.check(request)
        if instance.wants_headers:
            pass_headers(request, context)
        stream = self.drain.open_stream()
        started = time.perf_counter_ns()
        sent = 0
        stats.stream_opened()
        try:
            async with contextlib.aclosing(calls.stream(request, context)) as responses:
                while True:
                    stream.waiting = True  # the drain's cut may cancel this wait only
                    try:
                        ready = await anext(responses)
                    except StopAsyncIteration:
                        break
                    except asyncio.CancelledError:
                        stopped = self.drain.stopped(stream.task)
                        if stopped is None:
                            raise
                        raise stopped from None
                    finally:
                        stream.waiting = False
                    if not sent:
                        stats.stream_first_response(time.perf_counter_ns() - started)
                    sent += len(ready)
                    # A streamed response's headers stay in it (its event), as in MLServer.
                    yield [finish(response, found, request) for response in ready]
                    if stream.cut:  # cut while its reader was sending those responses
                        raise ShuttingDown(STOPPED)
        except BaseException as error:  # a client that left counts as failed, as in infer
            record_end(stats, request, started, type(error).__name__)
            raise
        finally:
            stats.stream_closed(sent)
            self.drain.close_stream(stream)
        record_end(stats, request, started)

    # Statistics

    def statistics(self, name: str | None = None, version: str | None = None) -> list[ModelStats]:
        """The statistics of every model version (``name`` empty), of every version of
        ``name`` (``version`` empty), or of one version; ModelNotFound if unknown."""
        if name and version:
            versions = [self.registry.find(name, version)]
        elif name:
            versions = [found for found in self.registry.versions() if found.name == name]
            if not versions:
                raise ModelNotFound(name)
        else:
            versions = [
                found for found in self.registry.versions() if found.state is ModelState.READY
            ]
        ordered = sorted(versions, key=lambda found: (found.name, found.version or ""))
        return [self.model_stats.of(found.name, found.version) for found in ordered]

    # Model repository

    def index(self, ready: bool | None = None) -> list[RepositoryEntry]:
        """Every model in the registry, plus those on disk that are not loaded."""
        return repository_index(self.registry, self.repository, ready)

    async def load(self, name: str, config: str | None = None) -> None:
        """(Re)load ``name`` from the repository as it is on disk now, with the
        serving settings of ``config`` (JSON: Triton's load override, see
        inferd.triton.override) when given. A failure says "failed to load"."""
        found = self.repository.to_load(name)
        if config is not None:
            limit = self.settings.max_request_size
            found = [apply_override(settings, config, limit) for settings in found]
        try:
            await self.registry.load(name, found)
        except InferdError as error:
            raise _failed_load(name, error) from None
        if self.on_demand is not None:
            self.on_demand.pinned(name)

    async def load_on_request(self, name: str, evict: str | None = None) -> None:
        """Load ``name`` as a request's first use does (unpinned, under the budget),
        unless it is loaded already: what the coordinator applies in every process."""
        if self.on_demand is None:
            await self.load(name)
        else:
            await self.on_demand.load_here(name, evict=evict)

    async def unload(self, name: str) -> None:
        await self.registry.unload(name)
        if self.on_demand is not None:
            await self.on_demand.unloaded(name)

    async def load_all(self) -> None:
        """Start-up: load every model in the repository (none with load_on_request: each
        loads on its first request); failures are logged, not raised."""
        if self.on_demand is not None:
            return
        for name, versions in _by_name(self.repository.find_all()).items():
            try:
                await self.registry.load(name, versions)
            except Exception as error:
                logger.error("Model %r did not load at start-up: %s", name, error)


def _failed_load(name: str, error: InferdError) -> InferdError:
    """The error, its message worded as Triton's: ``failed to load '<name>': why``."""
    prefix = f"failed to load '{name}'"
    if not isinstance(error, ModelNotFound) and not error.message.startswith(prefix):
        error.message = f"{prefix}: {error.message}"
        error.args = (error.message,)
    return error


def _only_streams(name: str) -> str:
    """Triton's words for a decoupled model called for one answer, then where to call it."""
    return (
        "The infer endpoint doesn't support models with decoupled transaction policy: "
        f"model {name!r} answers only by streaming; use POST /v2/models/{name}/infer_stream "
        "or /generate_stream (REST), or ModelStreamInfer (gRPC)"
    )


def _by_name(found: list) -> dict[str, list]:
    grouped: dict[str, list] = {}
    for settings in found:
        grouped.setdefault(settings.name, []).append(settings)
    return grouped
