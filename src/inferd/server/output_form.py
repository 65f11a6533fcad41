"""How a client asked its outputs to be written: the edge's to honour, never the model's.

Triton's front end consumes the parameters that choose an answer's form: the binary
tensor extension's ``binary_data_output`` (request) and ``binary_data`` (output), and
the classification extension's ``classification`` (output). The codecs take them out
of the request as they decode it into an :class:`OutputForm`, so a runtime reading
``request.parameters`` or an output's parameters sees only what the user sent it
(tritonclient.http adds ``binary_data_output`` to every request that names no output),
and the edge writes the answer with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.errors import InvalidRequest
from inferd.types import RequestedOutput

BINARY_OUTPUT = "binary_data_output"  # request: every output as raw bytes (REST)
BINARY_DATA = "binary_data"  # output: this one as raw bytes, or not (REST)
BINARY_SIZE = "binary_data_size"  # input: its raw bytes after the JSON header (REST)
CLASSIFICATION = "classification"  # output: its top k classes instead of its values


@dataclass(slots=True)
class OutputForm:
    """``binary_default``: outputs go as raw bytes unless ``binary`` says otherwise for
    one (REST); ``classes``: the outputs to answer as their top k classes, k by name."""

    binary_default: bool = False
    binary: dict[str, bool] = field(default_factory=dict)
    classes: dict[str, int] = field(default_factory=dict)

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.binary_default)


PLAIN = OutputForm()
"""The form of a request that asked for nothing (shared: never changed)."""


def flag(parameters: dict[str, Any], key: str, where: str) -> bool | None:
    """``parameters[key]`` taken out of them: True, False or None (absent)."""
    value = parameters.pop(key, None)
    if value is None or isinstance(value, bool):
        return value
    raise InvalidRequest(f"{where}parameter {key!r} must be true or false, got {value!r}")


def class_count(parameters: dict[str, Any], output: str) -> int | None:
    """The ``classification`` count taken out of an output's parameters (None: absent)."""
    value = parameters.pop(CLASSIFICATION, None)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise InvalidRequest(
            f"Output {output!r}: parameter 'classification' must be an integer >= 1, got {value!r}"
        )
    return value


def taken_from_outputs(outputs: list[RequestedOutput], form: OutputForm) -> OutputForm:
    """``form`` with what the requested outputs ask of their own form (``binary_data``,
    ``classification``), taken out of their parameters; a new one if it changes PLAIN."""
    for output in outputs:
        parameters = output.parameters
        if BINARY_DATA not in parameters and CLASSIFICATION not in parameters:
            continue
        binary = flag(parameters, BINARY_DATA, f"Output {output.name!r}: ")
        classes = class_count(parameters, output.name)
        if form is PLAIN:
            form = OutputForm()
        if binary is not None:
            form.binary[output.name] = binary
        if classes is not None:
            form.classes[output.name] = classes
    return form
