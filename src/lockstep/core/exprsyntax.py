"""A syntax error in an expression, as people read it: one line saying what is wrong and where, then
the expression's line with a caret under the position.

The CEL library reports `ERROR: <input>:1:15: Syntax error: mismatched input '<EOF>' expecting {'[',
'{', '(', ...}` and a dotted diagram, sometimes several errors that follow from the first; lockstep's
own tokenizer reports `unexpected character '#' at offset 10`. Both become the same three lines:

    invalid expression: syntax error at column 15: the expression ends too early
        input.amount >
                      ^
"""

from __future__ import annotations

import re

__all__ = ["from_cel", "from_offset"]

INDENT = "    "
WIDTH = 76  # characters of the expression shown around the position
_CEL = re.compile(r"ERROR: <input>:(\d+):(\d+): (?:Syntax error: )?(.*)")


def from_offset(source: str, offset: int, problem: str) -> str:
    """The message for a problem at a 0-based character offset of `source`."""
    offset = max(0, min(offset, len(source)))
    line = source.count("\n", 0, offset) + 1
    column = offset - (source.rfind("\n", 0, offset) + 1) + 1
    return _render(source, line, column, problem)


def from_cel(source: str, text: str) -> str | None:
    """The message for the CEL library's error text, or None when it names no position."""
    m = _CEL.search(text)
    if m is None:
        return None
    return _render(source, int(m.group(1)), int(m.group(2)), _reworded(m.group(3).strip()))


def _reworded(problem: str) -> str:
    """The library's ANTLR wording in plain words (its token lists say nothing to an author)."""
    if m := re.match(r"mismatched input '<EOF>'", problem):
        return "the expression ends too early"
    if m := re.match(r"(?:mismatched|extraneous) input '(.*?)' expecting <EOF>", problem):
        return f"unexpected `{m.group(1)}` after a complete expression"
    if m := re.match(r"(?:mismatched|extraneous) input '(.*?)'", problem):
        return f"unexpected `{m.group(1)}`"
    if m := re.match(r"token recognition error at: '(.)", problem):
        return f"unexpected character `{m.group(1)}`"
    if m := re.match(r"missing '(.*?)' at '<EOF>'", problem):
        return f"missing `{m.group(1)}` at the end"
    if m := re.match(r"missing '(.*?)' at '(.*?)'", problem):
        return f"missing `{m.group(1)}` before `{m.group(2)}`"
    if m := re.match(r"no viable alternative at input '(.*?)'", problem):
        return f"cannot read `{m.group(1)[-20:]}`"
    return re.sub(r" expecting \{.*\}$", "", problem)[:200]


def _render(source: str, line: int, column: int, problem: str) -> str:
    lines = source.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    where = f"line {line}, column {column}" if len(lines) > 1 else f"column {column}"
    at = max(column - 1, 0)
    start = 0
    shown = text
    if len(text) > WIDTH:  # a window around the position, marked where it is cut
        start = max(0, min(at - WIDTH // 2, len(text) - WIDTH))
        shown = ("..." if start else "") + text[start : start + WIDTH]
        shown += "..." if start + WIDTH < len(text) else ""
        at = at - start + (3 if start else 0)
    # A tab or a control character would move the text but not the caret: show each as one character.
    shown = "".join(ch if ch.isprintable() else " " if ch == "\t" else "?" for ch in shown)
    return f"invalid expression: syntax error at {where}: {problem}\n{INDENT}{shown}\n{INDENT}{' ' * at}^"
