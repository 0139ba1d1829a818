"""A small reader of GraphQL documents: one operation of fields, aliases, arguments and
variables (with defaults), as the GraphQL specification's grammar has them; no fragments,
directives or mutations. Enough for a test server to answer exactly the fields asked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(
    r'(?P<skip>[\s,]+|#[^\n]*)|(?P<punct>\.\.\.|[{}():=$!\[\]])|(?P<string>"(?:[^"\\]|\\.)*")'
    r"|(?P<number>-?\d+(?:\.\d+)?)|(?P<name>[_A-Za-z]\w*)"
)


class GraphQLError(Exception):
    def __init__(self, message: str, *, code: str | None = None, at: int | None = None):
        super().__init__(message)
        self.code, self.at = code, at


@dataclass
class Field:
    name: str
    alias: str
    args: dict[str, Any] = field(default_factory=dict)
    selections: list[Field] | None = None


class Parser:
    def __init__(self, text: str, variables: dict[str, Any]) -> None:
        self.text, self.variables, self.tokens = text, dict(variables), []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise GraphQLError(f'Parse error on "{text[pos]}"', at=pos)
            if m.lastgroup != "skip":
                self.tokens.append((m.lastgroup or "", m.group(), pos))
            pos = m.end()
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str, str, int]:
        if self.i >= len(self.tokens):
            raise GraphQLError("syntax error, unexpected end of file", at=len(self.text))
        tok = self.tokens[self.i]
        if expected is not None and tok[1] != expected:
            raise GraphQLError(
                f'syntax error, unexpected {tok[1]!r}, expecting "{expected}"', at=tok[2]
            )
        self.i += 1
        return tok

    def document(self) -> list[Field]:
        if self.peek() == "query":
            self.take()
            if self.tokens[self.i][0] == "name":
                self.take()
            if self.peek() == "(":
                self.variable_definitions()
        elif self.peek() != "{":
            raise GraphQLError(
                f"syntax error, unexpected {self.peek() or 'end of file'!r}",
                at=self.tokens[self.i][2] if self.peek() else len(self.text),
            )
        selections = self.selection_set()
        if self.i != len(self.tokens):
            raise GraphQLError(
                "syntax error, unexpected text after the operation", at=self.tokens[self.i][2]
            )
        return selections

    def variable_definitions(self) -> None:
        self.take("(")
        while self.peek() != ")":
            self.take("$")
            name = self.take()[1]
            self.take(":")
            while self.peek() not in ("=", ")", "$"):
                self.take()  # the type: Int, String!, [ID!]
            if self.peek() == "=":
                self.take()
                self.variables.setdefault(name, self.value())
        self.take(")")

    def selection_set(self) -> list[Field]:
        self.take("{")
        fields: list[Field] = []
        while self.peek() != "}":
            if self.peek() == "...":
                raise GraphQLError(
                    "fragments are not supported by this test server", at=self.tokens[self.i][2]
                )
            kind, name, at = self.take()
            if kind != "name":
                raise GraphQLError(f"syntax error, unexpected {name!r}", at=at)
            alias = name
            if self.peek() == ":":
                self.take()
                name = self.take()[1]
            current = Field(name=name, alias=alias)
            if self.peek() == "(":
                self.take()
                while self.peek() != ")":
                    key = self.take()[1]
                    self.take(":")
                    current.args[key] = self.value()
                self.take(")")
            if self.peek() == "{":
                current.selections = self.selection_set()
            fields.append(current)
        self.take("}")
        return fields

    def value(self) -> Any:
        kind, text, at = self.take()
        if text == "$":
            name = self.take()[1]
            return self.variables.get(name)
        if kind == "string":
            return json.loads(text)  # GraphQL's string escapes are JSON's
        if kind == "number":
            return float(text) if "." in text else int(text)
        if text == "[":
            items = []
            while self.peek() != "]":
                items.append(self.value())
            self.take("]")
            return items
        if kind == "name":
            return {"true": True, "false": False, "null": None}.get(text, text)
        raise GraphQLError(f"syntax error, unexpected {text!r}", at=at)


def error_json(exc: GraphQLError, text: str) -> dict[str, Any]:
    error: dict[str, Any] = {"message": str(exc)}
    if exc.at is not None:
        line = text.count("\n", 0, exc.at) + 1
        column = exc.at - (text.rfind("\n", 0, exc.at) + 1) + 1
        error["locations"] = [{"line": line, "column": column}]
    if exc.code:
        error["extensions"] = {"code": exc.code}
    return error
