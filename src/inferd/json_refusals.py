"""Why a request body is not the JSON asked for, in inferd's own words.

msgspec and orjson word their errors as each release likes: msgspec 0.23 reports
bytes that are not UTF-8 as a ``DecodeError`` worded "Invalid UTF-8 encoded string"
where earlier releases raised ``UnicodeDecodeError``. What a client reads (and what
its tools match on) must not depend on which release pip picked, so on the error
path only (the hot path decodes once, with msgspec) the refusal is worded here:

- the encoding is checked with Python's own codec, the syntax with Python's own
  ``json`` module (both part of the interpreter, not of a pip dependency);
- a body whose shape is wrong (msgspec's ``ValidationError``) is described by the
  path and the types the error names, reworded; the rare fault of another form
  keeps msgspec's detail after inferd's words, so nothing is lost.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import msgspec

_TYPE_NAMES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def not_json_reason(
    body: bytes, library_error: Exception | None = None, what: str = "the body"
) -> str:
    """Why ``body`` (``what``), which a JSON decoder refused, is not JSON text."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"JSON must be UTF-8 text; byte {error.start} (0x{body[error.start]:02x}) is not"
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        return f"{what} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
    except _NotJsonNumber as error:
        return f"{what} is not valid JSON: {error} is not a JSON number"
    except RecursionError:
        return "the JSON is nested too deeply"
    # Valid JSON that the library still refused (a number past its range, ...).
    detail = f" ({library_error})" if library_error is not None else ""
    return f"{what} is JSON this server cannot read{detail}"


class _NotJsonNumber(ValueError):
    pass


def _refuse_constant(constant: str) -> float:
    raise _NotJsonNumber(constant)  # NaN, Infinity, -Infinity: Python's json takes them


@dataclass(frozen=True)
class ShapeFault:
    """A decoded body of the wrong shape: ``path`` (``$.inputs[0].shape``), and what
    was wrong there, as ``expected``/``got`` JSON types, a ``missing`` field, or, for
    another kind of fault, msgspec's ``detail``."""

    path: str
    expected: str | None = None
    got: str | None = None
    missing: str | None = None
    detail: str | None = None

    @property
    def field(self) -> str:
        """The field at fault, the missing one included (``$.inputs[0].name``)."""
        return f"{self.path}.{self.missing}" if self.missing else self.path

    def reason(self) -> str:
        """The fault in inferd's words."""
        if self.missing is not None:
            return f"the required field {self.field} is missing"
        if self.expected is not None:
            where = "the body" if self.path == "$" else self.path
            return f"{where} must be {self.expected}, got {self.got}"
        return f"{self.detail} at {self.path}"


_AT = re.compile(r"^(?P<what>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.S)
_EXPECTED = re.compile(r"^Expected `(?P<expected>[^`]+)`, got `(?P<got>[^`]+)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")


def shape_fault(error: msgspec.ValidationError) -> ShapeFault:
    """What ``error`` says was wrong, read from its message."""
    located = _AT.match(str(error))
    assert located is not None  # the pattern matches any text
    what, path = located["what"], located["path"] or "$"
    expected = _EXPECTED.match(what)
    if expected:
        return ShapeFault(path, _json_types(expected["expected"]), _json_types(expected["got"]))
    missing = _MISSING.match(what)
    if missing:
        return ShapeFault(path, missing=missing["field"])
    return ShapeFault(path, detail=what)


def _json_types(names: str) -> str:
    """msgspec's ``str | null`` as JSON's ``string or null``."""
    return " or ".join(_TYPE_NAMES.get(name, name) for name in names.split(" | "))
