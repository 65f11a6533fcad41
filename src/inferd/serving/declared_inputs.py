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

from collections.abc import Collection, Sequence

from inferd.custom_calls import is_handler_call
from inferd.errors import InvalidRequest
from inferd.generation import is_generation_call
from inferd.settings.model import MetadataTensorSettings, ModelSettings
from inferd.types import InferenceRequest, Tensor

ANY_SIZE = -1
# Where a Triton model folder's settings keep its config.pbtxt (triton/model_folder.py).
TRITON_CONFIG = "triton_config"


class DeclaredInputs:
    """The inputs one model version declares, by name: (datatype, shape), and which of
    them a request must carry (those not ``optional``)."""

    __slots__ = ("_by_name", "_model", "_names", "_required")

    def __init__(
        self,
        model: str,
        declared: Sequence[MetadataTensorSettings],
        optional: Collection[str] = (),
    ) -> None:
        self._model = model
        self._by_name = {t.name: (t.datatype, tuple(t.shape)) for t in declared}
        self._required = tuple(name for name in self._by_name if name not in optional)
        self._names = ", ".join(repr(name) for name in self._by_name)

    def check(self, request: InferenceRequest) -> None:
        """InvalidRequest, in Triton's words, when required inputs are missing (all
        named) or there are too many, or for the first input that is unknown, of
        another datatype or of another shape. A runtime's own route (a custom
        handler's call) carries the HTTP request, not the declared inputs: it is not
        checked; nor is an OpenAI-compatible generation (its one input is the packed call,
        inferd/generation.py: a vLLM folder answers /v1 beside its declared tensors)."""
        if is_handler_call(request) or is_generation_call(request):
            return
        inputs = request.inputs
        by_name = self._by_name
        if not len(self._required) <= len(inputs) <= len(by_name):
            raise InvalidRequest(self._count_error(inputs))
        for tensor in inputs:
            spec = by_name.get(tensor.name)
            if spec is None:
                raise InvalidRequest(
                    f"unexpected inference input '{tensor.name}' for model '{self._model}': "
                    f"it takes {self._names}"
                )
            datatype, shape = spec
            if tensor.datatype != datatype:
                raise InvalidRequest(
                    f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but "
                    f"model '{self._model}' expects '{datatype}'"
                )
            if not _fits(tensor.data.shape, shape):
                raise InvalidRequest(
                    f"unexpected shape for input '{tensor.name}' for model '{self._model}'. "
                    f"Expected {_dims(shape)}, got {_dims(tensor.data.shape)} (-1: any size)"
                )
        if len(inputs) < len(by_name):  # optional ones left out, or required ones
            given = {tensor.name for tensor in inputs}
            if any(name not in given for name in self._required):
                raise InvalidRequest(self._count_error(inputs))

    def _count_error(self, inputs: Sequence[Tensor]) -> str:
        """Triton's answer to a request missing required inputs, or with too many."""
        given = {tensor.name for tensor in inputs}
        missing = [name for name in self._required if name not in given]
        unknown = sorted(name for name in given if name not in self._by_name)
        total, required = len(self._by_name), len(self._required)
        expected = (
            f"expected {total} inputs"
            if total == required
            else f"expected number of inputs between {required} and {total}"
        )
        return (
            f"{expected} but got {len(inputs)} inputs for model '{self._model}'. Got input(s) "
            f"{_names(sorted(given))}, but missing required input(s) {_names(missing)}. "
            "Please provide all required input(s)."
            + (f" Not inputs of the model: {_names(unknown)}." if unknown else "")
        )


def _names(names: Sequence[str]) -> str:
    """Names as Triton lists them: ['a','b']."""
    return "[" + ",".join(f"'{name}'" for name in names) + "]"


def _dims(shape: Sequence[int]) -> str:
    """A shape as Triton writes it: [-1,16]."""
    return "[" + ",".join(str(size) for size in shape) + "]"


def _fits(shape: tuple[int, ...], declared: tuple[int, ...]) -> bool:
    if len(shape) != len(declared):
        return False
    for size, wanted in zip(shape, declared, strict=True):
        if wanted != ANY_SIZE and size != wanted:
            return False
    return True


def declared_inputs(
    model: str, declared: Sequence[MetadataTensorSettings], optional: Collection[str] = ()
) -> DeclaredInputs | None:
    """The check of a version that declares inputs; None when it declares none (its
    runtime takes whatever it is sent, as MLServer's do)."""
    return DeclaredInputs(model, declared, optional) if declared else None


def enforced_inputs(settings: ModelSettings) -> DeclaredInputs | None:
    """The check of a Triton model folder's version (its config.pbtxt's inputs, those
    marked ``optional: true`` left to the request); None for a model-settings.json's,
    whose inputs are metadata as in MLServer."""
    config = settings.extra.get(TRITON_CONFIG)
    if config is None:
        return None
    optional = {spec["name"] for spec in config.get("input", []) if spec.get("optional")}
    return declared_inputs(settings.name, settings.inputs, optional)
