"""The ``--where`` grammar against a deliberately simple reference: generated expression trees are rendered to
text (fewest parentheses precedence allows, or more), parsed, and evaluated over generated rows; the reference
evaluates the tree with plain Python functions. Malformed text fails in one line naming a column; nothing is ever
run as Python."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.selecting.where import WhereError, check_fields, evaluate, parse

META = ("a", "b", "tag")
NAMES = ("width", "height", "class", "key", "path", *META)
VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 1)),
    st.sampled_from(["", "x", "cat", "c\u00e9t", "a'b", 'q"t', "back\\s", "c1/x.jpg"]),
)


@st.composite
def rows(draw):
    meta = {k: draw(VALUE) for k in META if draw(st.booleans())}  # a missing meta field is null
    return {
        "key": draw(st.sampled_from(["k1", "k2", "x"])),
        "class": draw(st.sampled_from(["cat", "dog", None])),
        "path": draw(st.sampled_from(["c1/x.jpg", "c2/y.png", ""])),
        "width": draw(st.one_of(st.integers(0, 9), st.none())),
        "height": draw(st.integers(0, 9)),
        "meta": meta,
    }


# ---- the reference: a tree of tuples, plain functions ------------------------------------------------------------


def ref_get(row, name):
    return row.get(name) if name in ("width", "height", "class", "key", "path") else row["meta"].get(name)


def ref_kind(v):
    if v is None:
        return "null"
    if v is True or v is False:
        return "bool"
    if type(v) in (int, float):
        return "number"
    return "string"


def ref_eq(a, b):
    return ref_kind(a) == ref_kind(b) and a == b


def ref_operand(row, x):
    return ref_get(row, x[1]) if x[0] == "field" else x[1]


def ref_eval(t, row):
    kind = t[0]
    if kind == "and":
        return ref_eval(t[1], row) and ref_eval(t[2], row)
    if kind == "or":
        return ref_eval(t[1], row) or ref_eval(t[2], row)
    if kind == "not":
        return not ref_eval(t[1], row)
    if kind == "in":
        v = ref_get(row, t[1])
        return any(ref_eq(v, x) for x in t[2]) != t[3]
    if kind == "matches":
        import fnmatch

        v = ref_get(row, t[1])
        return isinstance(v, str) and fnmatch.fnmatchcase(v, t[2])
    if kind == "startswith":
        v = ref_get(row, t[1])
        return isinstance(v, str) and v.startswith(t[2])
    op, a, b = t[1], ref_operand(row, t[2]), ref_operand(row, t[3])
    if op == "==":
        return ref_eq(a, b)
    if op == "!=":
        return not ref_eq(a, b)
    if ref_kind(a) != ref_kind(b) or ref_kind(a) not in ("number", "string"):
        return False
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def lit(v, single=False):
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, str):
        if single:
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return json.dumps(v, ensure_ascii=False)
    return repr(v)


OPERAND = st.one_of(st.sampled_from(NAMES).map(lambda n: ("field", n)), VALUE.map(lambda v: ("lit", v)))
LEAF = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), OPERAND, OPERAND),
    st.tuples(st.just("in"), st.sampled_from(NAMES), st.lists(VALUE, max_size=3).map(tuple), st.booleans()),
    st.tuples(st.just("matches"), st.sampled_from(NAMES), st.sampled_from(["c*", "*/x.*", "?", "[cd]*", "*"])),
    st.tuples(st.just("startswith"), st.sampled_from(NAMES), st.sampled_from(["c", "", "k1", "c1/"])),
)
TREES = st.recursive(
    LEAF,
    lambda sub: st.one_of(
        st.tuples(st.just("and"), sub, sub), st.tuples(st.just("or"), sub, sub), st.tuples(st.just("not"), sub)
    ),
    max_leaves=6,
)
PREC = {"or": 1, "and": 2, "not": 3}


def render(t, extra) -> str:
    """``t`` as text with the fewest parentheses precedence allows; ``extra()`` says where to add more."""
    kind = t[0]
    if kind in ("and", "or"):
        s = f"{sub(t[1], PREC[kind], extra)} {kind} {sub(t[2], PREC[kind] + 1, extra)}"
    elif kind == "not":
        s = f"not {sub(t[1], 3, extra)}"
    elif kind == "in":
        s = f"{t[1]} {'not in' if t[3] else 'in'} [{', '.join(lit(v, extra()) for v in t[2])}]"
    elif kind in ("matches", "startswith"):
        s = f"{t[1]} {kind} {lit(t[2], extra())}"
    else:
        s = " ".join([opnd(t[2], extra), t[1], opnd(t[3], extra)])
    return s


def opnd(x, extra) -> str:
    if x[0] == "field":
        return f"`{x[1]}`" if extra() else x[1]
    return lit(x[1], extra())


def sub(t, need, extra) -> str:
    s = render(t, extra)
    return f"({s})" if PREC.get(t[0], 4) < need or extra() else s


@settings(phases=[Phase.explicit, Phase.generate], max_examples=300, deadline=None)
@given(TREES, st.lists(rows(), min_size=1, max_size=6), st.randoms(use_true_random=False))
@example(("or", ("cmp", "==", ("field", "a"), ("lit", 1)), ("and", ("cmp", "==", ("lit", 1), ("lit", 2)),
          ("cmp", "==", ("lit", 1), ("lit", 2)))), [{"key": "k1", "class": None, "path": "", "width": 1,
          "height": 1, "meta": {"a": 1}}], None)  # fmt: skip
@example(("and", ("not", ("cmp", "==", ("field", "a"), ("lit", 1))), ("cmp", "==", ("lit", 1), ("lit", 1))),
         [{"key": "k1", "class": None, "path": "", "width": 1, "height": 1, "meta": {"a": 1}}], None)  # fmt: skip
@example(("or", ("and", ("cmp", "==", ("lit", 1), ("lit", 2)), ("cmp", "==", ("lit", 1), ("lit", 1))),
          ("cmp", "==", ("lit", 1), ("lit", 1))), [{"key": "k1", "class": None, "path": "", "width": 1,
          "height": 1, "meta": {}}], None)  # fmt: skip
def test_the_grammar_agrees_with_the_reference(tree, rs, rnd):
    extra = (lambda: False) if rnd is None else (lambda: rnd.random() < 0.3)
    text = render(tree, extra)
    node = parse(text)
    for r in rs:
        assert evaluate(node, r) == ref_eval(tree, r), (text, r)


ROW = {"key": "k1", "class": "cat", "path": "c1/x.jpg", "width": 7, "height": 3, "meta": {"a": 1, "s": "b", "t": True}}


@pytest.mark.parametrize(
    "text, want",
    [
        ("a == 1 or a == 2 and a == 3", True),  # and binds tighter than or
        ("(a == 1 or a == 2) and a == 3", False),
        ("not a == 2 and a == 3", False),  # not binds tighter than and
        ("not (a == 2 and a == 3)", True),
        ("a == 1.0", True),  # numbers compare as numbers
        ("t == 1", False),  # a boolean is not a number
        ("a == '1'", False),  # nor a string
        ("s < 2", False),  # ordering across types: false
        ("not s < 2", True),
        ("missing == null", True),  # a missing meta field is null
        ("missing > 0", False),
        ("not missing in [1, 2]", True),
        ("meta.a == 1", True),
        ("`a` >= 1", True),
        ("width >= 7 and height < 4", True),
        ("class in ['cat', 'dog']", True),
        ("class not in ['cat', 'dog']", False),
        ("path matches 'c1/*'", True),
        ("path matches 'C1/*'", False),  # case-sensitive
        ("path startswith 'c2'", False),
        ("width startswith '7'", False),  # not a string
        ('key == "k1"', True),
        ("1 < 2", True),
        ("'a\\'b' == \"a'b\"", True),
        ("-1 < -0.5e0", True),
    ],
)
def test_precedence_and_types(text, want):
    node = parse(text)
    check_fields(node, text, {"a", "s", "t"} | ({"missing"} if "missing" in text else set()))
    assert evaluate(node, ROW) is want


@pytest.mark.parametrize(
    "text, column",
    [
        ("width >= ", 10),
        ("width > 3 and", 14),
        ("(width > 3", 11),
        ("width > 3)", 10),
        ("width", 6),
        ("", 1),
        ("width = 3", 7),
        ("width > 3 3", 11),
        ("class in ['a' 'b']", 15),
        ("class in 'a'", 10),
        ("class not 'a'", 11),
        ("path matches 3", 14),
        ("width > 'a", 9),
        ("width > 'a\\q'", 11),
        ("__import__('os')", 11),
        ("__import__('os').system('true') == 0", 11),
        ("lambda: 1", 7),
        ("width > 1 if 1 else 0", 11),
        ("[x for x in y]", 1),
        ("width @ 3", 7),
    ],
)
def test_malformed_expressions_fail_in_one_line_naming_the_column(text, column):
    with pytest.raises(WhereError) as e:
        parse(text)
    msg = str(e.value)
    assert "\n" not in msg and f"column {column}:" in msg and repr(text) in msg


@settings(phases=[Phase.explicit, Phase.generate], max_examples=150, deadline=None)
@given(TREES, st.data())
@example(("cmp", "==", ("field", "a"), ("lit", "x")), None)
def test_a_cut_expression_fails_in_one_line_or_parses(tree, data):
    text = render(tree, lambda: False)
    cut = len(text) - 1 if data is None else data.draw(st.integers(0, len(text) - 1))
    try:
        parse(text[:cut])
    except WhereError as exc:
        msg = str(exc)
        col = int(msg.split("column ", 1)[1].split(":", 1)[0])
        assert "\n" not in msg and 1 <= col <= cut + 1


def test_an_unknown_field_is_refused_at_its_column_and_nothing_is_run_as_python():
    text = "width > 1 and widht < 3"
    with pytest.raises(WhereError, match=r"column 15: no field 'widht'"):
        check_fields(parse(text), text, {"a"})
    check_fields(parse("a == 1 and meta.a == 2"), "", {"a"})
    with pytest.raises(WhereError, match=r"column 6: no field .True."):
        check_fields(parse("a == True"), "a == True", {"a"})
    source = (Path(__file__).resolve().parents[2] / "shardkit" / "selecting" / "where.py").read_text()
    called = {
        n.func.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert not called & {"eval", "exec", "compile", "__import__", "getattr", "setattr"}
    node = parse("width.__class__ == null")  # a dotted name reads data, never attributes
    assert evaluate(node, ROW) is True
