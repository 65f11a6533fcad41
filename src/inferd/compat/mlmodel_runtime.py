"""Serving an MLServer ``MLModel`` subclass as an inferd runtime.

:func:`runtime_class_for` wraps the user's class in a :class:`MLModelRuntime`
subclass that the runtime loader instantiates like any other runtime. Only
these runtimes pay for the conversion to and from MLServer's pydantic types;
inferd's own runtimes never see them.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from inferd.compat.convert import Conversion, metadata_from_mlserver, response_from_mlserver
from inferd.compat.handler_calls import call_handler
from inferd.compat.inline import never_suspends, run_to_end
from inferd.custom_calls import handler_call, is_handler_call
from inferd.errors import StatusError
from inferd.model import Model, WorkerContext
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata

# The modules an MLModel may come from: ours, or a real MLServer's.
_MLMODEL_MODULES = ("inferd.compat.mlserver.model", "mlserver.model")


def mlmodel_base(runtime: type) -> type | None:
    """The ``MLModel`` class ``runtime`` derives from, if it is an MLServer runtime."""
    for base in runtime.__mro__:
        if base.__name__ == "MLModel" and base.__module__ in _MLMODEL_MODULES:
            return base
    return None


def runtime_class_for(mlmodel_class: type, base: type) -> type[Model]:
    """An inferd runtime class that serves ``mlmodel_class``. ``predict`` is always
    offered, as in MLServer: a model that does not implement it answers with
    MLServer's NotImplementedError (its custom routes still work)."""
    namespace: dict[str, Any] = {"mlmodel_class": mlmodel_class, "mlmodel_base": base}
    return type(f"MLServer{mlmodel_class.__name__}", (MLModelRuntime,), namespace)


class MLModelRuntime(Model):
    """Calls an MLModel as MLServer does, converting requests and responses."""

    mlmodel_class: ClassVar[type]
    mlmodel_base: ClassVar[type]

    def __init__(self, settings: ModelSettings, context: WorkerContext | None = None) -> None:
        super().__init__(settings, context)
        self.mlmodel = self.mlmodel_class(settings)
        package = self.mlmodel_base.__module__.rpartition(".")[0]
        self._convert = Conversion(importlib.import_module(f"{package}.types"))
        self._metadata: ModelMetadata | None = None
        # handler name -> (HTTP method, path, bound method): its @custom_handler routes
        self._routes: dict[str, tuple[str, str, Any]] = {}
        # The MLModel's predict when it can run without an event loop (set at load).
        self._inline_predict: Any = None

    async def load(self) -> bool:
        ready = await self.mlmodel.load()
        self.mlmodel.ready = ready  # as MLServer sets it
        self._metadata = metadata_from_mlserver(await self.mlmodel.metadata())
        self._routes = _custom_handlers(self.mlmodel)
        predict = self.mlmodel.predict
        self._inline_predict = predict if never_suspends(predict) else None
        return bool(ready) if ready is not None else True

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        call = handler_call(request)
        with KEEP_STATUS:
            if call is not None:  # a request to one of its @custom_handler routes
                return await call_handler(self._routes[call.handler][2], call)
            response = await self.mlmodel.predict(self._convert.request(request))
        return response_from_mlserver(response, request.id)

    def predicts_inline(self, request: InferenceRequest) -> bool:
        """Whether :meth:`predict_inline` can answer ``request``: the MLModel's predict
        never awaits (see :mod:`inline`) and it is not a custom handler's call."""
        return self._inline_predict is not None and not is_handler_call(request)

    def predict_inline(self, request: InferenceRequest) -> InferenceResponse:
        """:meth:`predict` run to its end on the calling thread, without an event loop
        (a worker's command thread: no hand-over to its loop thread and back); only
        for a request that :meth:`predicts_inline`."""
        with KEEP_STATUS:
            response = run_to_end(self._inline_predict(self._convert.request(request)))
        return response_from_mlserver(response, request.id)

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        async def payloads() -> AsyncIterator[Any]:
            yield self._convert.request(request)

        with KEEP_STATUS:
            async for response in self.mlmodel.predict_stream(payloads()):
                yield response_from_mlserver(response, request.id)

    @property
    def wants_headers(self) -> bool:
        """Headers go in ``payload.parameters.headers`` as MLServer passes them; not
        with adaptive batching, where one call holds many requests."""
        return self.settings.max_batch_size <= 1

    @property
    def custom_routes(self) -> tuple[tuple[str, str, str], ...]:
        return tuple((method, path, name) for name, (method, path, _) in self._routes.items())

    @property
    def streams(self) -> bool:
        own = getattr(self.mlmodel_class, "predict_stream", None)
        return own is not getattr(self.mlmodel_base, "predict_stream", None)

    async def unload(self) -> None:
        await self.mlmodel.unload()

    def metadata(self) -> ModelMetadata:
        return self._metadata if self._metadata is not None else super().metadata()


class _KeepStatus:
    """Around a call into the MLModel: an ``MLServerError(msg, status_code)`` it raises
    becomes an error that keeps its status; anything else passes as it is (it
    reaches the client as a 500)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        if isinstance(error, Exception):
            status_error = _with_status(error)
            if status_error is not None:
                raise status_error from error


KEEP_STATUS = _KeepStatus()


def _with_status(error: Exception) -> StatusError | None:
    """An ``MLServerError(msg, status_code)`` as an error that keeps its status;
    None for anything else (it reaches the client as a 500)."""
    status = getattr(error, "status_code", None)
    is_mlserver_error = any(cls.__name__ == "MLServerError" for cls in type(error).__mro__)
    if is_mlserver_error and isinstance(status, int):
        return StatusError(str(error), status)
    return None


def _custom_handlers(mlmodel: Any) -> dict[str, tuple[str, str, Any]]:
    """The methods marked with ``@custom_handler`` (ours or a real MLServer's marker,
    which both keep ``rest_path`` and ``rest_method`` in ``__custom_handler__``)."""
    found = {}
    for name in dir(type(mlmodel)):
        marker = getattr(getattr(type(mlmodel), name, None), "__custom_handler__", None)
        if marker is not None:
            method = str(marker.rest_method).upper()
            found[name] = (method, str(marker.rest_path), getattr(mlmodel, name))
    return found
