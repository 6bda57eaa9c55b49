"""The ``--where`` predicate of ``shardkit select``: a small grammar over the rows of the per-sample table.

Nothing is ever evaluated as Python: the text is tokenised and parsed by hand into a tree of :class:`Node`
values, and the tree is evaluated against one row (a dict) at a time. The grammar, loosest binding first::

    expr       := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | "(" expr ")" | comparison
    comparison := operand ( ("==" | "!=" | "<" | "<=" | ">" | ">=") operand
                          | ["not"] "in" "[" [literal ("," literal)* [","]] "]"
                          | ("matches" | "startswith") STRING )
    operand    := FIELD | literal
    literal    := STRING | NUMBER | "true" | "false" | "null"

A ``FIELD`` is a name (``[A-Za-z_][A-Za-z0-9_]*``, dotted for a value inside a dict: ``meta.box.w``) or any
text in backticks (```odd-name```); ``class``, ``key``, ``path``, ``width``, ``height``, ``source_sha256``
are the table's columns, every other name a ``meta`` field (``meta.NAME`` also works). Strings are in single
or double quotes with backslash escapes; numbers are decimal (``-3``, ``2.5``, ``1e3``).

Values keep their JSON types. ``==``/``!=``/``in`` compare numbers with numbers (``1 == 1.0``), strings with
strings, booleans with booleans and ``null`` with ``null``; a value of another type is simply not equal.
``<``, ``<=``, ``>``, ``>=`` hold only between two numbers or two strings (anything else: false, so
``not (width < 3)`` keeps a row whose width is missing). A field a row does not have is ``null``.
``matches`` is a shell glob (``fnmatch``, case-sensitive; ``*`` crosses ``/``) and ``startswith`` a prefix,
both false on a non-string. A malformed expression raises :class:`WhereError`, one line naming the column.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Union

from shardkit.errors import ShardkitError

#: the per-sample table's own columns (every other field name is a meta field)
COLUMNS = ("key", "class", "path", "width", "height", "source_sha256")
COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")
KEYWORDS = ("and", "or", "not", "in", "matches", "startswith", "true", "false", "null")
_LITERALS = {"true": True, "false": False, "null": None}
_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<quoted>`[^`]+`)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
      | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,)""",
    re.VERBOSE,
)


class WhereError(ShardkitError):
    """A ``--where`` expression that does not parse, or names a field no sample has."""


@dataclass(frozen=True)
class Token:
    kind: str  #: number | string | name | op | keyword | end | bad (a character that starts no token)
    text: str
    value: Any
    column: int  #: 1-based


@dataclass(frozen=True)
class Field:
    """A field of a row: its path (``("meta", "w")`` or ``("width",)``) as written at ``column``."""

    path: tuple[str, ...]
    column: int


@dataclass(frozen=True)
class Literal:
    value: Any


Operand = Union[Field, Literal]


@dataclass(frozen=True)
class Compare:
    op: str  #: one of COMPARISONS, "in", "matches", "startswith"
    left: Operand
    right: Any  #: an Operand, or for "in" a tuple of literal values, for matches/startswith a str


@dataclass(frozen=True)
class Not:
    arg: "Node"


@dataclass(frozen=True)
class BoolOp:
    op: str  #: "and" | "or"
    args: tuple["Node", ...]


Node = Union[Compare, Not, BoolOp]


def _fail(text: str, column: int, what: str) -> WhereError:
    return WhereError(f"--where column {column}: {what} (in {text!r})")


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; :class:`WhereError` at the first character that
    starts none."""
    tokens, error = _scan(text)
    if error is not None:
        raise error
    return tokens


def _scan(text: str) -> tuple[list[Token], "WhereError | None"]:
    """The tokens up to the end or the first bad character, and that character's error (reported by the parser
    only if it gets there, so the first mistake in reading order is the one named)."""
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            out.append(Token("bad", text[pos], None, pos + 1))
            return out, _fail(text, pos + 1, f"unexpected character {text[pos]!r}")
        kind, raw = m.lastgroup or "", m.group()
        col = pos + 1
        pos = m.end()
        if kind == "space":
            continue
        if kind == "number":
            value: Any = float(raw) if any(c in raw for c in ".eE") else int(raw)
            if isinstance(value, float) and not math.isfinite(value):
                out.append(Token("bad", raw, None, col))
                return out, _fail(text, col, f"number {raw} is out of range")
            out.append(Token("number", raw, value, col))
        elif kind == "string":
            try:
                out.append(Token("string", raw, _unquote(raw, text, col), col))
            except WhereError as exc:
                out.append(Token("bad", raw, None, col))
                return out, exc
        elif kind == "quoted":
            out.append(Token("name", raw, (raw[1:-1],), col))
        elif kind == "name":
            if raw in KEYWORDS:
                out.append(Token("keyword", raw, raw, col))
            else:
                out.append(Token("name", raw, tuple(raw.split(".")), col))
        else:
            out.append(Token("op", raw, raw, col))
    out.append(Token("end", "", None, len(text) + 1))
    return out, None


_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/"}


def _unquote(raw: str, text: str, col: int) -> str:
    out: list[str] = []
    body = raw[1:-1]
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]  # the token's pattern never ends a string on a lone backslash
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2 : i + 6]):
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        else:
            raise _fail(text, col + 1 + i, f"unknown escape \\{e} in a string")
    return "".join(out)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens, self.error = _scan(text)
        self.at = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        t = self.tokens[self.at]
        self.at += 1
        return t

    def is_(self, *texts: str) -> bool:
        return self.tok.kind in ("op", "keyword") and self.tok.text in texts

    def fail(self, what: str) -> WhereError:
        t = self.tok
        if t.kind == "bad" and self.error is not None:
            return self.error
        found = "the end" if t.kind == "end" else repr(t.text)
        return _fail(self.text, t.column, f"expected {what}, found {found}")

    def expect(self, text: str, what: str) -> Token:
        if not self.is_(text):
            raise self.fail(what)
        return self.take()

    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise self.fail("an expression")
        node = self.or_()
        if self.tok.kind != "end":
            raise self.fail("'and', 'or' or the end")
        return node

    def or_(self) -> Node:
        args = [self.and_()]
        while self.is_("or"):
            self.take()
            args.append(self.and_())
        return args[0] if len(args) == 1 else BoolOp("or", tuple(args))

    def and_(self) -> Node:
        args = [self.not_()]
        while self.is_("and"):
            self.take()
            args.append(self.not_())
        return args[0] if len(args) == 1 else BoolOp("and", tuple(args))

    def not_(self) -> Node:
        if self.is_("not"):
            self.take()
            return Not(self.not_())
        if self.is_("("):
            self.take()
            node = self.or_()
            self.expect(")", "')'")
            return node
        return self.comparison()

    def operand(self) -> Operand:
        t = self.tok
        if t.kind == "name":
            self.take()
            return Field(tuple(t.value), t.column)
        if t.kind in ("number", "string") or (t.kind == "keyword" and t.text in _LITERALS):
            self.take()
            return Literal(_LITERALS[t.text] if t.kind == "keyword" else t.value)
        raise self.fail("a field, a string or a number")

    def literal(self) -> Any:
        t = self.tok
        if t.kind in ("number", "string") or (t.kind == "keyword" and t.text in _LITERALS):
            self.take()
            return _LITERALS[t.text] if t.kind == "keyword" else t.value
        raise self.fail("a string, a number, true, false or null")

    def comparison(self) -> Node:
        left = self.operand()
        if self.is_(*COMPARISONS):
            op = self.take().text
            return Compare(op, left, self.operand())
        negate = False
        if self.is_("not"):
            self.take()
            negate = True
            if not self.is_("in"):
                raise self.fail("'in' after 'not'")
        if self.is_("in"):
            self.take()
            self.expect("[", "'[' starting a list")
            items: list[Any] = []
            while not self.is_("]"):
                items.append(self.literal())
                if not self.is_(","):
                    break
                self.take()
            self.expect("]", "',' or ']'")
            node: Node = Compare("in", left, tuple(items))
            return Not(node) if negate else node
        if self.is_("matches", "startswith"):
            op = self.take().text
            if self.tok.kind != "string":
                raise self.fail(f"a string after {op!r}")
            return Compare(op, left, self.take().value)
        raise self.fail("a comparison (==, !=, <, <=, >, >=, in, not in, matches, startswith)")


def parse(text: str) -> Node:
    """The tree of ``text``; :class:`WhereError` (one line, with the column) if it is malformed."""
    if not isinstance(text, str):
        raise WhereError(f"--where must be a string, not {type(text).__name__}")
    return _Parser(text).parse()


def fields_of(node: Node) -> list[Field]:
    """Every field ``node`` reads, in the order written."""
    if isinstance(node, BoolOp):
        return [f for a in node.args for f in fields_of(a)]
    if isinstance(node, Not):
        return fields_of(node.arg)
    return [x for x in (node.left, node.right) if isinstance(x, Field)]


def check_fields(node: Node, text: str, known: Collection[str]) -> None:
    """:class:`WhereError` naming the column of the first field that is neither a column nor a meta field of any
    row (``known``: the meta field names the rows have)."""
    for f in fields_of(node):
        head = f.path[1] if f.path[0] == "meta" and len(f.path) > 1 else f.path[0]
        if f.path[0] not in COLUMNS and head not in known:
            names = ", ".join([*COLUMNS, *sorted(known)][:20])
            raise _fail(text, f.column, f"no field {'.'.join(f.path)!r} in the per-sample table (fields: {names})")


def lookup(row: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value at ``path`` in a per-sample table row (``None`` where it has none)."""
    if path[0] in COLUMNS:
        value: Any = row.get(path[0])
        rest = path[1:]
    else:
        meta = row.get("meta") or {}
        if path[0] == "meta" and len(path) > 1:
            path = path[1:]
        value, rest = meta.get(path[0]), path[1:]
    for p in rest:
        value = value.get(p) if isinstance(value, dict) else None
    return value


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "other"


def _equal(a: Any, b: Any) -> bool:
    ka = _kind(a)
    return ka == _kind(b) and ka != "other" and a == b


def _value(x: Operand, row: Mapping[str, Any]) -> Any:
    return lookup(row, x.path) if isinstance(x, Field) else x.value


def evaluate(node: Node, row: Mapping[str, Any]) -> bool:
    """Whether ``row`` (a per-sample table row) satisfies ``node``."""
    if isinstance(node, BoolOp):
        if node.op == "and":
            return all(evaluate(a, row) for a in node.args)
        return any(evaluate(a, row) for a in node.args)
    if isinstance(node, Not):
        return not evaluate(node.arg, row)
    a = _value(node.left, row)
    if node.op == "in":
        return any(_equal(a, b) for b in node.right)
    if node.op in ("matches", "startswith"):
        if not isinstance(a, str):
            return False
        return fnmatch.fnmatchcase(a, node.right) if node.op == "matches" else a.startswith(node.right)
    b = _value(node.right, row)
    if node.op == "==":
        return _equal(a, b)
    if node.op == "!=":
        return not _equal(a, b)
    ka = _kind(a)
    if ka != _kind(b) or ka not in ("number", "string"):
        return False
    if node.op == "<":
        return bool(a < b)
    if node.op == "<=":
        return bool(a <= b)
    if node.op == ">":
        return bool(a > b)
    return bool(a >= b)


__all__ = ["COLUMNS", "Node", "WhereError", "check_fields", "evaluate", "fields_of", "lookup", "parse", "tokenize"]
