"""A Triton model's declared inputs, enforced before the model is called (as Triton does).

Where a Triton model folder's ``config.pbtxt`` declares inputs, a request must carry exactly
those inputs, each of its declared datatype and of a shape that fits its declared
one: the same number of dimensions, each the declared size or any size where the
declaration says ``-1``. (With batching, inferd's declared shapes include the
batch dimension, which is usually ``-1``; Triton's configuration shows them
without it, inferd/triton/config.py.) Anything else is refused with
InvalidRequest (400 / INVALID_ARGUMENT) naming the input, before the request
queues, on every protocol and entry: the dataplane checks each request it is
given (infer, streams, generate).

The ``inputs`` of a ``model-settings.json`` are not enforced: MLServer reads them
as metadata and codec hints (a custom codec may make the declared input out of
another the request sends), never refusing a request by them, and a runtime
written for MLServer must run here as it does there.

The check is built once per model version (:func:`declared_inputs`) into plain
tuples and a dictionary, so a request costs one lookup and a few integer
comparisons per input: no pydantic, nothing per element.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferd.custom_calls import is_handler_call
from inferd.errors import InvalidRequest
from inferd.settings.model import MetadataTensorSettings, ModelSettings
from inferd.types import InferenceRequest

ANY_SIZE = -1
# Where a Triton model folder's settings keep its config.pbtxt (triton/model_folder.py).
TRITON_CONFIG = "triton_config"


class DeclaredInputs:
    """The inputs one model version declares, by name: (datatype, shape)."""

    __slots__ = ("_by_name", "_model", "_names")

    def __init__(self, model: str, declared: Sequence[MetadataTensorSettings]) -> None:
        self._model = model
        self._by_name = {t.name: (t.datatype, tuple(t.shape)) for t in declared}
        self._names = ", ".join(repr(name) for name in self._by_name)

    def check(self, request: InferenceRequest) -> None:
        """InvalidRequest naming the first input that is unknown, of another datatype
        or shape, or missing. A runtime's own route (a custom handler's call) carries
        the HTTP request, not the declared inputs: it is not checked."""
        if is_handler_call(request):
            return
        by_name = self._by_name
        for tensor in request.inputs:
            spec = by_name.get(tensor.name)
            if spec is None:
                raise InvalidRequest(
                    f"Input {tensor.name!r} is not an input of model {self._model!r}, "
                    f"which declares {self._names}"
                )
            datatype, shape = spec
            if tensor.datatype != datatype:
                raise InvalidRequest(
                    f"Input {tensor.name!r} is {tensor.datatype}, but model "
                    f"{self._model!r} declares it {datatype}"
                )
            if not _fits(tensor.data.shape, shape):
                raise InvalidRequest(
                    f"Input {tensor.name!r} has shape {list(tensor.data.shape)}, which does not "
                    f"fit the shape {list(shape)} model {self._model!r} declares for it "
                    "(-1: any size)"
                )
        if len(request.inputs) != len(by_name):
            given = {tensor.name for tensor in request.inputs}
            missing = [name for name in by_name if name not in given]
            raise InvalidRequest(
                f"Input {missing[0]!r} is missing: model {self._model!r} takes {self._names}"
            )


def _fits(shape: tuple[int, ...], declared: tuple[int, ...]) -> bool:
    if len(shape) != len(declared):
        return False
    for size, wanted in zip(shape, declared, strict=True):
        if wanted != ANY_SIZE and size != wanted:
            return False
    return True


def declared_inputs(
    model: str, declared: Sequence[MetadataTensorSettings]
) -> DeclaredInputs | None:
    """The check of a version that declares inputs; None when it declares none (its
    runtime takes whatever it is sent, as MLServer's do)."""
    return DeclaredInputs(model, declared) if declared else None


def enforced_inputs(settings: ModelSettings) -> DeclaredInputs | None:
    """The check of a Triton model folder's version (its config.pbtxt's inputs); None
    for a model-settings.json's, whose inputs are metadata as in MLServer."""
    if TRITON_CONFIG not in settings.extra:
        return None
    return declared_inputs(settings.name, settings.inputs)
