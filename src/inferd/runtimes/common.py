"""Helpers the framework runtimes share: optional imports, artifact lookup,
tabular inputs, output selection and metadata.

A framework is imported only when a model that needs it is loaded; when it is
missing, that model's load fails with the ``pip install`` line that fixes it,
and the server and its other models carry on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from inferd.errors import InvalidRequest
from inferd.model import Model
from inferd.tensors import codecs
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata, Tensor

DERIVED_INPUT_NAME = "input-0"
"""Name reported for a model's one feature input when the artifact names none."""

NUMERIC_KINDS = "biuf"
SETTINGS_FILES = ("model-settings.json", "settings.json")
"""inferd's own files, never a model artifact (XGBoost models may be .json too)."""


class MissingExtraError(ImportError):
    """A runtime's framework is not installed."""


def warn_unread_extra(model: Model, known: Sequence[str]) -> None:
    """Warn, naming them, about the keys of the model's ``parameters.extra`` its runtime
    does not read (a typo there would otherwise be ignored without a word)."""
    unknown = sorted(set(model.settings.extra) - set(known))
    if unknown:
        logging.getLogger(type(model).__module__).warning(
            "Model %r: parameters.extra %s not used by %s (it reads %s)",
            model.name,
            ", ".join(unknown),
            type(model).__name__,
            ", ".join(known),
        )


def import_framework(module: str, runtime: str, extra: str) -> ModuleType:
    """``import module``, or a MissingExtraError that says which extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"{runtime} needs {module.split('.')[0]}, which cannot be imported ({error}); "
            f"install it with: pip install 'inferd[{extra}]'"
        ) from error


async def import_and_find(
    model: Model,
    module: str,
    extra: str,
    files: tuple[Sequence[str], Sequence[str]],
    framework: str,
) -> tuple[Any, Path]:
    """The framework (``import module``) and the model's file (``files``: its well-known
    names and its suffixes, as :func:`find_model_file` takes them).

    Importing a framework takes a while: in a thread, so the event loop keeps
    answering. The install hint comes before file errors."""
    imported = await asyncio.to_thread(import_framework, module, type(model).__name__, extra)
    return imported, find_model_file(model.settings.uri, *files, framework)


def no_progress_monitor() -> None:
    """No tqdm monitor thread (it only watches for stalled progress bars): the one
    transformers' "Loading weights" bar starts never ends (tqdm 4.70), and a thread
    alive in the loading process keeps protocol processes from being forked from it,
    so each loaded its own copy (3 copies of two tiny models took past a minute to
    start on 2 busy cores)."""
    try:
        import tqdm
    except ImportError:  # no bars, no monitor
        return
    tqdm.tqdm.monitor_interval = 0


def unusable_input(
    model: Model, error: BaseException | str, inputs: str = "input"
) -> InvalidRequest:
    """The 400 for a request the framework refused (its message, shortened)."""
    return InvalidRequest(
        f"Model {model.name!r} cannot use the request's {inputs}: {short_error(error)}"
    )


def find_model_file(
    uri: Path, well_known: Sequence[str], suffixes: Sequence[str], framework: str
) -> Path:
    """The model file at ``uri``; for a folder, its first well-known file name,
    else its only file with one of ``suffixes``."""
    if uri.is_file():
        return uri
    if not uri.is_dir():
        raise FileNotFoundError(
            f"No {framework} model at {uri}: the path does not exist; set parameters.uri "
            "in model-settings.json to the model file or its folder"
        )
    for name in well_known:
        if (uri / name).is_file():
            return uri / name
    candidates = sorted(
        path
        for path in uri.iterdir()
        if path.suffix in suffixes and path.name not in SETTINGS_FILES
    )
    if len(candidates) == 1 and candidates[0].is_file():
        return candidates[0]
    found = f"found {', '.join(path.name for path in candidates)}" if candidates else "found none"
    raise FileNotFoundError(
        f"No {framework} model in folder {uri}: looked for {', '.join(well_known)} or a "
        f"single *{', *'.join(suffixes)} file ({found}); point parameters.uri at the file"
    )


def default_content_type(model: Model) -> str | None:
    parameters = model.settings.parameters
    return parameters.content_type if parameters else None


def tabular_features(model: Model, request: InferenceRequest, count: int | None) -> Any:
    """The request as one table of ``count`` features per row: a 2-D numeric array,
    or a DataFrame (one input per column) with content type ``pd``.

    The width is checked here so that a wrong request gets a 400 naming the
    expected shape instead of the framework's own error.
    """
    content_type = request.content_type or default_content_type(model)
    expected = f"[-1, {count}]" if count is not None else "[-1, features]"
    if content_type == codecs.PANDAS:
        frame = model.decode_request(request)
        if count is not None and len(frame.columns) != count:
            raise InvalidRequest(
                f"Model {model.name!r} expects {count} columns, got {len(frame.columns)}: "
                f"{', '.join(map(str, frame.columns))}"
            )
        return frame
    if len(request.inputs) != 1:
        names = ", ".join(repr(tensor.name) for tensor in request.inputs) or "none"
        raise InvalidRequest(
            f"Model {model.name!r} takes one input of shape {expected}, got "
            f"{len(request.inputs)} ({names}); to send one input per column, set the "
            "request's parameters.content_type to 'pd'"
        )
    tensor = request.inputs[0]
    features = model.decode(tensor)
    if not isinstance(features, np.ndarray) or features.dtype.kind not in NUMERIC_KINDS:
        raise InvalidRequest(
            f"Input {tensor.name!r} of model {model.name!r} must hold numbers, got "
            f"{tensor.datatype}; send features as INT or FP data"
        )
    if features.ndim != 2 or (count is not None and features.shape[1] != count):
        per_row = f" ({count} features per row)" if count is not None else ""
        raise InvalidRequest(
            f"Input {tensor.name!r} has shape {list(features.shape)}, but model "
            f"{model.name!r} expects shape {expected}{per_row}"
        )
    return features


def requested_outputs(
    model: Model, request: InferenceRequest, offered: Sequence[str], default: Sequence[str]
) -> tuple[str, ...]:
    """The outputs the request names (checked against ``offered``), else ``default``."""
    names = tuple(dict.fromkeys(request.output_names))  # dict: dedupe, keep order
    if not names:
        return tuple(default)
    for name in names:
        if name not in offered:
            raise InvalidRequest(
                f"Model {model.name!r} has no output {name!r}; it offers {', '.join(offered)}"
            )
    return names


def cast_input(name: str, array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as ``dtype`` when that keeps its kind of number (FP64 -> FP32,
    INT32 -> INT64, INT -> FP): JSON clients rarely choose the exact width."""
    if array.dtype == dtype:
        return array
    if np.can_cast(array.dtype, dtype, casting="same_kind"):
        return array.astype(dtype)
    raise InvalidRequest(
        f"Input {name!r} holds {array.dtype} data, which cannot be used as the {dtype} "
        "the model expects; send it with a matching datatype"
    )


def response(model: Model, request: InferenceRequest, outputs: list[Tensor]) -> InferenceResponse:
    return InferenceResponse(
        outputs=outputs, model_name=model.name, model_version=model.version, id=request.id
    )


def with_derived_metadata(
    metadata: ModelMetadata, inputs: list[MetadataTensor], outputs: list[MetadataTensor]
) -> ModelMetadata:
    """Declared inputs/outputs (from the settings) win; the derived ones fill the gaps."""
    metadata.inputs = metadata.inputs or inputs
    metadata.outputs = metadata.outputs or outputs
    return metadata


def features_input(count: int | None, datatype: str) -> list[MetadataTensor]:
    if count is None:
        return []
    return [MetadataTensor(DERIVED_INPUT_NAME, datatype, [-1, int(count)])]


def short_error(error: BaseException | str, limit: int = 400) -> str:
    """A framework's error message on one line and cut short: some repeat the input."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_END = object()


async def stepped_in_thread(
    iterator: Iterator[InferenceResponse], slots: asyncio.Semaphore
) -> AsyncIterator[InferenceResponse]:
    """A compute-bound plain generator as an async one: each step in a thread off the
    event loop, one of ``slots`` held for the generator's life. Closed early, the
    generator is closed too (in a thread, once its step under way has returned)."""
    async with slots:
        step: concurrent.futures.Future[Any] | None = None
        try:
            while True:
                step = _step_threads().submit(next, iterator, _END)
                item = await asyncio.wrap_future(step)
                if item is _END:
                    return
                yield item
        finally:
            await asyncio.to_thread(_close_after, step, iterator)


def _close_after(step: concurrent.futures.Future[Any] | None, iterator: Iterator[Any]) -> None:
    if step is not None:
        concurrent.futures.wait([step])
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


# The streams' steps: as many threads as streams may hold slots across models. Made on
# first use and let go at shutdown (release_idle_step_threads): its idle threads are
# alive, and the shutdown takes a live "inferd-" thread for model code still running.
_threads: concurrent.futures.ThreadPoolExecutor | None = None


def _step_threads() -> concurrent.futures.ThreadPoolExecutor:
    global _threads
    if _threads is None:
        _threads = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="inferd-stream-step")
    return _threads


def release_idle_step_threads() -> None:
    """Let the stream steps' idle threads end (a step still running ends when its model
    code returns, and is then waited for as model code): called as the server stops."""
    global _threads
    pool, _threads = _threads, None
    if pool is not None:
        pool.shutdown(wait=False)
