"""A tokenizer and a small parser for CEL, just enough structure to bound an expression's cost.

Nothing here may overflow the stack on hostile text: the tokenizer is a linear scan, and the parser is
called only after exprcheck's scan bounded the nesting (its recursion follows the nesting, operator
chains are loops). A node is a tuple:
("lit", elements, bytes, plain-text-or-None, source-text) | ("ident", name) | ("select", target, field)
| ("index", target, key) | ("call", name, target | None, args) | ("list", items) | ("map", pairs)
| ("op", op, operands) | ("cond", test, then, else).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["BINARY", "MACROS", "OPEN", "RAW_STR", "Node", "Parser", "tokens"]

Node = tuple[Any, ...]

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
        |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<num>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|\.\?|\[\?|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)
RAW_STR = re.compile(r"^[rR]|^[bB][rR]")


def tokens(source: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) for every token; raise ValueError at the first character that is none."""
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:
            raise ValueError(f"unexpected character {source[pos]!r} at offset {pos}")
        kind = m.lastgroup or ""
        if kind == "str" and RAW_STR.match(m.group()):
            # In a raw string a backslash escapes nothing: re-scan up to the first closing quote.
            m = re.compile(r"(?:[rR][bB]?|[bB][rR])(\"\"\"|'''|\"|')").match(source, pos) or m
            quote = m.group(1) if m.lastindex else ""
            end = source.find(quote, m.end()) if quote else -1
            if end < 0:
                raise ValueError(f"unterminated string at offset {pos}")
            out.append(("str", source[pos : end + len(quote)], pos))
            pos = end + len(quote)
            continue
        if kind != "ws":
            out.append((kind, m.group(), pos))
        pos = m.end()
    return out


OPEN = {"(": ")", "[": "]", "{": "}", "[?": "]"}
BINARY = {"||", "&&", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "?", ":"}

_PRECEDENCE = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%")]


class Parser:
    def __init__(self, tokens: list[tuple[str, str, int]]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str, str, int]:
        if self.i >= len(self.tokens):
            raise ValueError("unexpected end of expression")
        tok = self.tokens[self.i]
        if expected is not None and tok[1] != expected:
            raise ValueError(f"expected {expected!r} at offset {tok[2]}, found {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.expr()
        if self.i != len(self.tokens):
            raise ValueError(f"unexpected {self.peek()!r} at offset {self.tokens[self.i][2]}")
        return node

    def expr(self) -> Node:
        test = self.binary(0)
        if self.peek() == "?":
            self.take()
            then = self.binary(0)
            self.take(":")
            return ("cond", test, then, self.expr())
        return test

    def binary(self, level: int) -> Node:
        if level == len(_PRECEDENCE):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in _PRECEDENCE[level]:
            op = self.take()[1]
            node = ("op", op, [node, self.binary(level + 1)])
        return node

    def unary(self) -> Node:
        ops = []
        while self.peek() in ("!", "-"):
            ops.append(self.take()[1])
        node = self.member()
        for op in reversed(ops):
            node = ("op", op, [node])
        return node

    def member(self) -> Node:
        node = self.primary()
        while self.peek() in (".", ".?", "[", "[?"):
            tok = self.take()[1]
            if tok in ("[", "[?"):
                key = self.expr()
                self.take("]")
                node = ("index", node, key)
                continue
            kind, name, _ = self.take()
            if kind != "id":
                raise ValueError(f"expected a field name after '.', found {name!r}")
            if self.peek() == "(" and tok == ".":
                node = ("call", name, node, self.args(")"))
            else:
                node = ("select", node, name)
        return node

    def args(self, close: str) -> list[Node]:
        self.take()
        items: list[Node] = []
        while self.peek() != close:
            if self.peek() == "?" and close == "]":
                self.take()
            items.append(self.expr())
            if self.peek() != ",":
                break
            self.take()
        self.take(close)
        return items

    def primary(self) -> Node:
        kind, text, offset = self.take()
        if kind == "num":
            return ("lit", 0, 8)
        if kind == "str":
            plain = re.fullmatch(r"""(['"])([A-Za-z0-9_-]*)\1""", text)
            return ("lit", 0, len(text), plain.group(2) if plain else None, text)
        if text == ".":  # a leading dot: an absolute name
            kind, text, offset = self.take()
        if kind == "id":
            if text in ("true", "false", "null"):
                return ("lit", 0, 8)
            if self.peek() == "(":
                return ("call", text, None, self.args(")"))
            if self.peek() == "{":  # a message literal: Name{field: value}
                return ("map", self.pairs())
            return ("ident", text)
        if text == "(":
            node = self.expr()
            self.take(")")
            return node
        if text == "[":
            self.i -= 1
            return ("list", self.args("]"))
        if text == "{":
            self.i -= 1
            return ("map", self.pairs())
        raise ValueError(f"unexpected {text!r} at offset {offset}")

    def pairs(self) -> list[tuple[Node, Node]]:
        self.take("{")
        out: list[tuple[Node, Node]] = []
        while self.peek() != "}":
            if self.peek() == "?":
                self.take()
            key = self.expr()
            self.take(":")
            out.append((key, self.expr()))
            if self.peek() != ",":
                break
            self.take()
        self.take("}")
        return out
