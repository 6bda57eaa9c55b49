"""The product holds no diary: no work-log words in the package, the docs, the examples, the tools or the tests.

A maintainer finds decisions in ``docs/design/`` and changes in ``CHANGELOG.md``; code and docs say
what is true now. This test scans :data:`SCANNED` for the :data:`DIARY` patterns and fails naming
``file:line`` for each hit. A reference to another project's tracker written ``owner/repo#N``
(``pytorch/vision#1234``) is not a diary word and stays allowed. This file names the words it looks for and is
not scanned.

:data:`KNOWN` is the allow-list of hits, empty: an entry must be a scanned file and a :data:`DIARY` pattern and
must still match (a fixed file makes the test say which entry to drop), so a list that grows only shrinks again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: what is scanned, relative to the repository root (folders recursively)
SCANNED: tuple[str, ...] = ("shardkit", "docs", "README.md", "CHANGELOG.md", "examples", "tools", "tests")

#: file name endings that hold text a reader sees
TEXT_SUFFIXES: tuple[str, ...] = (".py", ".md", ".sh", ".yml", ".yaml", ".toml", ".txt", ".cfg", ".ini")

#: the diary words, matched case-insensitively
DIARY: tuple[str, ...] = (
    r"issue #\d+",
    r"\bissue \d+\b",
    r"\bsession \d+\b",
    r"notes/",
    r"\(session \d+\)",
    r"the old name",
    r"until the split",
    r"not in this checkout yet",
)

PATTERN = re.compile("|".join(f"(?:{p})" for p in DIARY), re.IGNORECASE)

#: allowed hits: (path, pattern from DIARY); empty
KNOWN: tuple[tuple[str, str], ...] = ()


def scanned_files(root: Path = ROOT) -> list[Path]:
    """Every text file under :data:`SCANNED`, sorted."""
    files: list[Path] = []
    for name in SCANNED:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
    this = Path(__file__).resolve()  # names the words it looks for
    return sorted(f for f in files if "__pycache__" not in f.parts and f.resolve() != this)


def diary_hits(text: str) -> list[tuple[int, str, str]]:
    """``(line number, pattern, matched text)`` for every diary word in ``text``."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATTERN.finditer(line):
            found = next(p for p in DIARY if re.fullmatch(p, match.group(0), re.IGNORECASE))
            hits.append((number, found, match.group(0)))
    return hits


def all_hits(root: Path = ROOT) -> list[tuple[str, int, str, str]]:
    """``(relative path, line, pattern, matched text)`` over :func:`scanned_files`."""
    out = []
    for path in scanned_files(root):
        rel = path.relative_to(root).as_posix()
        for number, pattern, text in diary_hits(path.read_text(encoding="utf-8", errors="replace")):
            out.append((rel, number, pattern, text))
    return out


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # spelled apart (I + "ssue"), so that a scan of this file for diary words finds none in it
        ("see " + "i" + "ssue #21 for why", ["i" + "ssue #21"]),
        ("the bug of " + "I" + "ssue 21 A2", ["I" + "ssue 21"]),
        ("measured in " + "s" + "ession 10", ["s" + "ession 10"]),
        ("measured (" + "S" + "ession 9)", ["(" + "S" + "ession 9)"]),
        ("details in " + "no" + "tes/i" + "ssue-3.md", ["no" + "tes/"]),
        ("XConfig: the old name", ["the old name"]),
        ("re-exported (their home until the split)", ["until the split"]),
        ("the command is not in this checkout yet", ["not in this checkout yet"]),
        ("Lightning-AI/pytorch-lightning#20550, still open", []),
        ("pytorch/vision#1234 and timm#2781", []),
        ("issues and sessions in general, an issue of size", []),
        ("tis" + "sue 3 and obses" + "sion 4", []),
    ],
)
def test_the_patterns_find_diary_words_and_allow_other_trackers(line: str, expected: list[str]) -> None:
    assert [text for _, _, text in diary_hits(line)] == expected


def test_a_planted_diary_word_is_named_by_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "# Page\n\nAll true.\nFixed in " + "s" + "ession 12.\n", encoding="utf-8"
    )
    (tmp_path / "README.md").write_text("See pytorch/vision#1234.\n", encoding="utf-8")
    assert all_hits(tmp_path) == [("docs/page.md", 4, r"\bsession \d+\b", "s" + "ession 12")]


def test_the_known_hits_are_pairs_of_a_scanned_file_and_a_diary_pattern() -> None:
    for path, pattern in KNOWN:
        assert pattern in DIARY, f"{path}: {pattern!r} is not one of DIARY"
        assert any(path == name or path.startswith(name + "/") for name in SCANNED), f"{path} is not scanned"


def test_the_product_holds_no_diary_words() -> None:
    hits = all_hits()
    unexpected = [f"{path}:{line}: {text!r}" for path, line, pattern, text in hits if (path, pattern) not in KNOWN]
    assert not unexpected, (
        "diary words in the product (say what is true now; decisions go to docs/design/, changes to "
        "CHANGELOG.md):\n" + "\n".join(unexpected)
    )
    gone = [
        f"{path}: {pattern!r}" for path, pattern in KNOWN if not any(h[0] == path and h[2] == pattern for h in hits)
    ]
    assert not gone, "fixed, so drop these entries from KNOWN in tests/test_no_diary.py:\n" + "\n".join(gone)
