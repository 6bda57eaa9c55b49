"""Mutants of the product's text: a diary word in a docstring, a design page or a catalogue comment must fail
``tests/test_no_diary.py``; a reference to another project's tracker (``owner/repo#N``) must not."""

ROW_NO_DIARY = (
    "The product holds no diary: no work-log words (issue or session numbers, references to notes) in the package, "
    "the docs, the examples, the tools or the tests"
)

T = "tests/test_no_diary.py::"
PRODUCT = T + "test_the_product_holds_no_diary_words"
PATTERNS = T + "test_the_patterns_find_diary_words_and_allow_other_trackers"

MUTANTS = [
    {
        "id": "diary-reference-in-a-docstring",
        "row": ROW_NO_DIARY,
        "file": "shardkit/loader/transport.py",
        "old": "(a profile of two workers: 20 % of their time in the kernel)",
        "new": "(" + "notes" + "/issue-3.md)",  # spelled apart: tests/test_no_diary.py scans this file
        "tests": [PRODUCT],
    },
    {
        "id": "diary-session-in-a-design-page",
        "row": ROW_NO_DIARY,
        "file": "docs/design/sample-index.md",
        "old": "# A sample index beside each shard\n",
        "new": "# A sample index beside each shard (" + "session" + " 4)\n",
        "tests": [PRODUCT],
    },
    {
        "id": "diary-issue-number-in-a-tool",
        "row": ROW_NO_DIARY,
        "file": "tools/bench_loader.py",
        "old": '"""Side-by-side loader benchmark: seed',
        "new": '"""Side-by-side loader benchmark (' + "issue" + " #3): seed",
        "tests": [PRODUCT],
    },
    {
        "id": "diary-patterns-miss-issue-without-hash",
        "row": ROW_NO_DIARY,
        "file": "tests/test_no_diary.py",
        "old": '    r"\\bissue \\d+\\b",\n',
        "new": "",
        "tests": [PATTERNS],
    },
]
