"""Protocol buffers' text format, as Triton's ``config.pbtxt`` is written.

The parser knows no schema: it turns the text into fields, each a name and the
values it was given (a field written twice, or with a ``[...]`` list, has several).
A value is a scalar token (a number, a quoted string, an identifier such as an
enum name or ``true``) or a message, itself a list of fields. What the fields mean
is :mod:`inferd.triton.config_schema`'s business.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from inferd.errors import ConfigurationError


@dataclass(slots=True)
class Scalar:
    """A scalar as written: ``text`` is the token, ``quoted`` whether it was a string."""

    text: str
    quoted: bool
    line: int


@dataclass(slots=True)
class Message:
    """A ``{ ... }`` block: its fields in order, a name may repeat."""

    fields: list[tuple[str, Scalar | Message]] = field(default_factory=list)
    line: int = 1


_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r\n]+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<word>[A-Za-z0-9_.+\-]+)
  | (?P<punct>[{}\[\]:,;<>])
    """,
    re.VERBOSE,
)

_CLOSING = {"{": "}", "<": ">"}


def parse(text: str, where: str) -> Message:
    """The fields of a whole text-format document; ConfigurationError naming ``where``
    and the line for text that is not protocol buffers' text format."""
    tokens = _tokens(text, where)
    parser = _Parser(tokens, where)
    message = parser.fields(closing=None, line=1)
    return message


def _tokens(text: str, where: str) -> list[tuple[str, str, int]]:
    tokens: list[tuple[str, str, int]] = []
    position, line = 0, 1
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ConfigurationError(
                f"{where}: line {line}: unexpected character {text[position]!r}"
            )
        kind = match.lastgroup
        assert kind is not None
        value = match.group()
        if kind != "space":
            tokens.append((kind, value, line))
        line += value.count("\n")
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str, int]], where: str) -> None:
        self._tokens = tokens
        self._at = 0
        self._where = where

    def fields(self, closing: str | None, line: int) -> Message:
        message = Message(line=line)
        while True:
            token = self._peek()
            if token is None:
                if closing is not None:
                    self._fail(f"{closing!r} missing for the block opened on line {line}")
                return message
            kind, value, token_line = token
            if closing is not None and value == closing:
                self._at += 1
                return message
            if kind != "word":
                self._fail(f"a field name expected, got {value!r}", token_line)
            self._at += 1
            self._field(message, value)
            self._skip_separator()

    def _field(self, message: Message, name: str) -> None:
        token = self._expect_more(name)
        if token[1] == ":":
            self._at += 1
            token = self._expect_more(name)
        if token[1] == "[":
            self._at += 1
            for value in self._list(name):
                message.fields.append((name, value))
            return
        message.fields.append((name, self._value(name)))

    def _list(self, name: str) -> list[Scalar | Message]:
        values: list[Scalar | Message] = []
        while True:
            token = self._expect_more(name)
            if token[1] == "]":
                self._at += 1
                return values
            values.append(self._value(name))
            token = self._expect_more(name)
            if token[1] == ",":
                self._at += 1
            elif token[1] != "]":
                self._fail(f"{name}: ',' or ']' expected in a list, got {token[1]!r}", token[2])

    def _value(self, name: str) -> Scalar | Message:
        kind, value, line = self._expect_more(name)
        self._at += 1
        if value in _CLOSING:
            return self.fields(_CLOSING[value], line)
        if kind == "string":
            return Scalar(_unquote(value), True, line)
        if kind == "word":
            return Scalar(value, False, line)
        self._fail(f"{name}: a value expected, got {value!r}", line)
        raise AssertionError  # unreachable: _fail raises

    def _skip_separator(self) -> None:
        token = self._peek()
        if token is not None and token[1] in (",", ";"):
            self._at += 1

    def _peek(self) -> tuple[str, str, int] | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _expect_more(self, name: str) -> tuple[str, str, int]:
        token = self._peek()
        if token is None:
            self._fail(f"{name}: the text ends before its value")
        assert token is not None
        return token

    def _fail(self, problem: str, line: int | None = None) -> None:
        if line is None:
            line = self._tokens[-1][2] if self._tokens else 1
        raise ConfigurationError(f"{self._where}: line {line}: {problem}")


def _unquote(token: str) -> str:
    # A quoted string's escapes are C's, as Python's for what configs hold.
    return str(ast.literal_eval(token))
