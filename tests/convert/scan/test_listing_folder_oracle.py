"""Differential oracles for listings (CSV/TSV/JSONL) and folders (ImageFolder, --label-regex).

Hypothesis writes a source; a deliberately simple reference (``tests/support/source_reference.py`` for
listings, the generator's own ground truth for folders) decides per row or file "one sample of
class L with image id I" or "skipped (reason)" or "the whole source is refused". shardkit
converts it (one worker, tiny images); the shards are read back with plain ``tarfile`` and every
image's mean colour names the file it came from. Asserted: every input is exactly one sample
with the reference's class name and pixels, or in the manifest's ``skipped`` with the
reference's reason; nothing else is in the shards; a refusal is one line.

Converted splits are found through ``ConvertResult.splits[i].url`` (by split name), never by
assuming ``DEST`` or ``DEST/<split>``.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import os
import re
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.convert.scan import discover
from shardkit.errors import ConvertError
from tests.support.source_reference import Expected, Refused, read_split, reference_listing, write_image

IMG = EncodeConfig(short_side=8)
#: the same examples every run (the mutant gate's verdicts do not depend on luck), no shrinking (examples are small;
#: a failure is reported at once, within the gate's time per mutant)
_SETTINGS = {"derandomize": True, "database": None, "phases": [Phase.explicit, Phase.generate]}
#: what the oracles saw, by outcome (printed at the end of each oracle; copied into the notes)
STATS: collections.Counter = collections.Counter()

# files below the shared image root (relative path -> image id; None: a file that is not an image)
_FILES = {
    "f0.png": 0,
    "f1.png": 1,
    "f2.png": 2,
    "f3.png": 3,
    "j4.jpg": 4,
    "J5.JPEG": 5,
    "sub/s6.png": 6,
    "sub/deep/d7.jpg": 7,
    "a, b.png": 8,
    'q"t.png': 9,
    "名 ü.png": 10,
    "sp ace.jpg": 11,
    "broken.jpg": None,
}
_LINKS = {"link0.png": "f0.png", "subalias": "sub"}  # symlinks below the root
_OUTSIDE = "o12.png"  # an image outside the root, listed by its absolute path (id 12)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> tuple[str, dict[str, int | None]]:
    """``(root, {real path: image id})`` of the shared images."""
    top = str(tmp_path_factory.mktemp("oracle"))
    root = os.path.join(top, "imgs")
    for rel, i in _FILES.items():
        if i is None:
            os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
            with open(os.path.join(root, rel), "wb") as f:
                f.write(b"not an image")
        else:
            write_image(os.path.join(root, rel), i)
    for link, target in _LINKS.items():
        os.symlink(target, os.path.join(root, link))
    write_image(os.path.join(top, _OUTSIDE), 12)
    ids = {os.path.realpath(os.path.join(root, rel)): i for rel, i in _FILES.items()}
    ids[os.path.realpath(os.path.join(top, _OUTSIDE))] = 12
    return root, ids


# ------------------------------------------------------------------------------------------ listings

_NAMES = sorted(_FILES) + ["missing.png", "sub/nothere.jpg", "link0.png", "subalias/s6.png"]
_SPELLINGS = ["{r}", "./{r}", "sub/../{r}", "../imgs/{r}", "subalias/../{r}", "{root}/{r}", "{root}/./{r}", "{r}"]
_CSV_LABELS = {
    "names": ["cat", "dog", " cat ", "Dog", "a,b", 'q"x', "é", "2.5", "True", "[0, 1]"],
    "indices": ["0", "1", "2", " 3 ", "01", "+2", "-1"],
    "one_based": ["1", "2", "3"],
    "huge": ["0", "1", "999999999", "1" * 100],
    "mixed": ["cat", "0", "1"],
}
_ODD = ["", "  "]
_JSON_ODD = [None, True, False, 2.5, 1.0, [0, 1], [], {"a": 1}, -2]


def _rare(draw, n: int) -> bool:
    """True about once in ``n`` draws (not ``== 0``: hypothesis favours small and boundary integers)."""
    return draw(st.integers(0, n - 1)) == n // 2


@st.composite
def listings(draw):
    """``(kind, text, split_col, label_type, rows)``: a listing with quoting, BOM, CRLF, ragged rows, odd labels and paths."""
    kind = draw(st.sampled_from(["csv", "tsv", "jsonl"]))
    family = draw(st.sampled_from(["names", "names", "indices", "indices", "one_based", "huge", "mixed"]))
    label_type = draw(st.sampled_from(["auto", "auto", "name"] + (["index"] if family != "names" else [])))
    split_col = draw(st.booleans())
    n = draw(st.integers(1, 10))
    pool = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=5, unique=True))  # few files, many spellings
    rows = []
    for _ in range(n):
        if _rare(draw, 15):
            path = draw(st.sampled_from(["", "   ", "../f0.png", "{outside}"]))
        else:
            path = draw(st.sampled_from(_SPELLINGS[:-1] if draw(st.booleans()) else ["{r}"])).replace(
                "{r}", draw(st.sampled_from(pool))
            )
        if kind == "jsonl" and _rare(draw, 6):
            label = draw(
                st.sampled_from(_JSON_ODD + [int(v) for v in _CSV_LABELS["indices"] if v.strip().lstrip("+").isdigit()])
            )
        elif _rare(draw, 8):
            label = draw(st.sampled_from(_ODD))
        else:
            label = draw(st.sampled_from(_CSV_LABELS[family]))
        split = draw(st.sampled_from(["", "train", "val", "test"])) if split_col else None
        ragged = 0 if kind == "jsonl" or not _rare(draw, 6) else draw(st.sampled_from([-1, 1]))
        rows.append((path, label, split, ragged))
    fmt = {
        "bom": draw(st.booleans()),
        "crlf": draw(st.booleans()),
        "quote_all": draw(st.booleans()),
        "dup_header": kind != "jsonl" and _rare(draw, 20),
    }
    return kind, rows, split_col, label_type, fmt


def _render(kind: str, rows: list, split_col: bool, fmt: dict, root: str, outside: str) -> str:
    def path_of(p: str) -> str:
        return p.replace("{root}", root).replace("{outside}", outside)

    end = "\r\n" if fmt["crlf"] else "\n"
    if kind == "jsonl":
        out = []
        for path, label, split, _ in rows:
            obj = {"path": path_of(path), "label": label}
            if split_col:
                obj["part"] = split
            out.append(json.dumps(obj, ensure_ascii=False))
        text = end.join(out) + end
    else:
        buf = io.StringIO()
        w = csv.writer(
            buf,
            delimiter="\t" if kind == "tsv" else ",",
            lineterminator=end,
            quoting=csv.QUOTE_ALL if fmt["quote_all"] else csv.QUOTE_MINIMAL,
        )
        header = ["path", "label"] + (["part"] if split_col else [])
        w.writerow(header + (["label"] if fmt["dup_header"] else []))
        for path, label, split, ragged in rows:
            fields = [path_of(path), str(label)] + ([split] if split_col else [])
            fields = fields[:-1] if ragged < 0 else fields + ["extra"] * ragged
            w.writerow(fields)
        text = buf.getvalue()
    return ("\ufeff" if fmt["bom"] else "") + text


def _check_scan(source, exp: Expected) -> None:
    """The scanned source against the reference: per split, files (samples and read-time skips) and scan-time skips."""
    read_time = {"missing_file", "not_an_image"}
    got_splits = {s.name: s for s in source.splits}
    assert sorted(got_splits) == exp.splits()
    for name, s in got_splits.items():
        want_files = sorted(
            list(exp.samples.get(name, {}))
            + [p for p, r, sp in exp.skipped if sp == name and r in read_time and not re.search(r"\.\w+:\d+$", p)]
        )
        assert sorted(f.relpath for f in s.files) == want_files
        want_skips = sorted(
            (p, r) for p, r, sp in exp.skipped if sp == name and (r not in read_time or re.search(r"\.\w+:\d+$", p))
        )
        assert sorted((p, r.value) for p, r, _ in s.skipped) == want_skips
        for f in s.files:
            if f.relpath in exp.samples.get(name, {}):
                assert source.classes[f.label] == exp.samples[name][f.relpath][0]


def _check_converted(result, exp: Expected) -> None:
    by_name = {s.split: s for s in result.splits}
    assert sorted(by_name) == exp.splits()
    for name in exp.splits():
        res = by_name[name]
        want_skips = sorted((p, r) for p, r, sp in exp.skipped if sp == name)
        if (
            not exp.samples.get(name) and not res.written
        ):  # no sample found by the scan: not written, reported with its skips
            assert res.converted == 0 and res.skipped_reasons == dict(collections.Counter(r for _, r in want_skips))
            assert sorted((f.path, f.reason) for f in res.skipped_files) == want_skips
            continue
        got = read_split(res.url)
        assert got.classes == exp.classes
        assert {p: (c, i) for p, (c, i, _) in got.samples.items()} == exp.samples.get(name, {})
        assert all(got.classes[k] == c for c, _, k in got.samples.values())
        assert sorted(got.skipped) == want_skips
        assert got.keys == len(got.samples)


_F = {"bom": False, "crlf": False, "quote_all": False, "dup_header": False}


def _examples(fn):
    """Explicit cases, run before the generated ones: each refusal, every skip reason, two splits with a ragged row."""
    cases = [
        (
            "csv",
            [
                ("f0.png", "cat", None, 0),
                ("{root}/f0.png", "dog", None, 0),
                ("link0.png", "dog", None, 0),
                ("./f1.png", "dog", None, 0),
                ("f1.png", "cat", None, 0),
                ("j4.jpg", "", None, 0),
                ("broken.jpg", "cat", None, 0),
                ("missing.png", "cat", None, 0),
                ("", "cat", None, 0),
                ("f2.png", "cat", None, 1),
            ],
            False,
            "auto",
            _F,
        ),
        (
            "csv",
            [("f0.png", "cat", "train", 0), ("f1.png", "dog", "val", 0), ("f2.png", "dog", "val", -1)],
            True,
            "auto",
            _F,
        ),
        (
            "tsv",
            [("a, b.png", "1", "", 0), ('q"t.png', "0", "test", 0), ("f3.png", "2", "val", 1)],
            True,
            "auto",
            {"bom": True, "crlf": True, "quote_all": True, "dup_header": False},
        ),
        (
            "jsonl",
            [
                ("f0.png", True, None, 0),
                ("f1.png", 2.5, None, 0),
                ("f2.png", [], None, 0),
                ("f3.png", [0, 1], None, 0),
                ("j4.jpg", 0, None, 0),
                ("J5.JPEG", "1", None, 0),
                ("{outside}", 1, None, 0),
            ],
            False,
            "auto",
            _F,
        ),
        ("csv", [("f0.png", "cat", None, 0)], False, "auto", {**_F, "dup_header": True}),
        ("csv", [("f0.png", "cat", None, 0), ("../f0.png", "cat", None, 0)], False, "auto", _F),
        ("csv", [("f0.png", "1", None, 0), ("f1.png", "2", None, 0)], False, "auto", _F),
        ("csv", [("f0.png", "1", None, 0), ("f1.png", "2", None, 0)], False, "index", _F),
        ("csv", [("f0.png", "0", None, 0), ("f1.png", "1" * 100, None, 0)], False, "auto", _F),
        ("csv", [("f0.png", "0", None, 0), ("f1.png", "cat", None, 0)], False, "auto", _F),
        ("csv", [("f0.png", "-1", None, 0), ("f1.png", "cat", None, 0)], False, "index", _F),
    ]
    for case in reversed(cases):
        fn = example(case)(fn)
    return fn


def test_listing_oracle(images, tmp_path):
    root, ids = images
    outside = os.path.join(os.path.dirname(root), _OUTSIDE)
    STATS.clear()

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        **_SETTINGS,
    )
    @given(listings())
    @_examples
    def run(case):
        kind, rows, split_col, label_type, fmt = case
        text = _render(kind, rows, split_col, fmt, root, outside)
        work = tempfile.mkdtemp(dir=str(tmp_path))
        try:
            listing = os.path.join(work, f"list.{kind}")
            with open(listing, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            so = ScanConfig(root=root, split_col="part" if split_col else None, label_type=label_type)
            opts = ConvertConfig(image=IMG, shard_size=3, seed=1, source=so)
            STATS["listings"] += 1
            STATS["rows"] += len(rows)
            try:
                exp = reference_listing(
                    kind, text, root, f"list.{kind}", ids, "part" if split_col else None, label_type
                )
            except Refused as why:
                STATS[f"refused: {why.args[0]}"] += 1
                with pytest.raises(ConvertError) as err:
                    convert(listing, os.path.join(work, "out"), opts, workers=1, quiet=True)
                assert why.args[0] in str(err.value) and "\n" not in str(err.value), str(err.value)
                return
            _check_scan(discover(listing, opts), exp)
            for _, r, _ in exp.skipped:
                STATS[f"skipped: {r}"] += 1
            STATS["samples"] += sum(len(v) for v in exp.samples.values())
            if not any(exp.samples.get(s) for s in exp.splits()):  # no split has a sample: one line, nothing written
                with pytest.raises(ConvertError, match="no split has a sample") as err:
                    convert(listing, os.path.join(work, "out"), opts, workers=1, quiet=True)
                assert "\n" not in str(err.value) and not os.path.exists(os.path.join(work, "out"))
                STATS["refused: no split has a sample"] += 1
                return
            result = convert(listing, os.path.join(work, "out"), opts, workers=1, quiet=True)
            _check_converted(result, exp)
            STATS["converted and read back"] += 1
        finally:
            shutil.rmtree(work, ignore_errors=True)

    run()
    print("\nlisting oracle:", dict(sorted(STATS.items())))


# ------------------------------------------------------------------------------------------ folders

_CLASSES = ["cat", "dog", "Bird", "a b", "zebra"]
_LEAVES = ["x.png", "y.jpg", "Z.JPG", "n/w.png", "n/m/v.jpeg", "t.txt", "u.PNG"]


@st.composite
def folders(draw):
    """A class-folder tree: ``(files {relpath: is image}, class aliases {alias: class}, file links {link: target})``."""
    classes = draw(st.lists(st.sampled_from(_CLASSES), min_size=1, max_size=4, unique=True))
    files: dict[str, bool] = {}
    for c in classes:
        for leaf in draw(st.lists(st.sampled_from(_LEAVES), min_size=1, max_size=4, unique=True)):
            files[f"{c}/{leaf}"] = not leaf.endswith(".txt")
    for top in draw(st.lists(st.sampled_from(["loose.png", "notes.txt"]), max_size=2, unique=True)):
        files[top] = top.endswith(".png")
    aliases = {}
    filled = sorted({p.split("/")[0] for p in files if "/" in p})
    if filled and draw(st.booleans()):
        target = draw(st.sampled_from(filled))
        aliases["aa_" + target.replace(" ", "_").lower()] = target  # a class folder alias that sorts before its target
    links = {}
    images = sorted(p for p, img in files.items() if img and "/" in p)
    if images and draw(st.booleans()):
        target = draw(st.sampled_from(images))
        links[target.rsplit("/", 1)[0] + "/0link.png"] = target  # a file symlink that sorts first
    return files, aliases, links


def _build(src: str, files: dict, aliases: dict, links: dict) -> dict[str, int]:
    """Write the tree; return relpath -> image id of every real image."""
    ids = {}
    for i, (rel, img) in enumerate(sorted(files.items())):
        path = os.path.join(src, rel)
        if img:
            write_image(path, i)
            ids[rel] = i
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("not an image")
    for alias, target in aliases.items():
        os.symlink(target, os.path.join(src, alias))
    for link, target in links.items():
        os.symlink(
            os.path.relpath(os.path.join(src, target), os.path.dirname(os.path.join(src, link))),
            os.path.join(src, link),
        )
    return ids


def _folder_reference(files: dict, aliases: dict, links: dict, ids: dict, regex: re.Pattern | None) -> tuple:
    """``(samples {path: (class, id)}, skipped [(path, reason)])`` by the README's rules, from the generator's ground truth."""
    samples, skipped = {}, []
    paths = dict(
        files
    )  # every path discovery reaches: real files, file links, and (ImageFolder) an aliased class folder's files
    paths.update({link: True for link in links})
    if regex is None:
        for alias, target in aliases.items():
            paths.update(
                {alias + p[len(target) :]: img for p, img in list(paths.items()) if p.startswith(target + "/")}
            )
    real_of = {p: p for p in files}
    real_of.update(links)
    for alias, target in aliases.items():
        for p in list(paths):
            if p.startswith(alias + "/"):
                rest = target + p[len(alias) :]
                real_of[p] = real_of.get(rest, rest)
    for p, img in sorted(paths.items()):
        if regex is None and "/" not in p:
            skipped.append((p, "not_in_class_folder"))
        elif not img:
            skipped.append((p, "not_an_image"))
        elif regex is not None and not (m := regex.search(p)):
            skipped.append((p, "no_label"))
        elif real_of[p] != p:  # the real path (no symlink on its way) wins; the others are duplicates
            skipped.append((p, "duplicate_file"))
        else:
            samples[p] = ((m.group(1) if regex is not None else p.split("/")[0]), ids[p])
    return samples, sorted(skipped)


def test_folder_oracle(tmp_path):
    STATS.clear()

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], **_SETTINGS)
    @given(folders())
    def run(tree):
        for use_regex in (False, True):
            one(tree, use_regex)

    def one(tree, use_regex):
        files, aliases, links = tree
        work = tempfile.mkdtemp(dir=str(tmp_path))
        try:
            src = os.path.join(work, "src")
            os.makedirs(src)
            ids = _build(src, files, aliases, links)
            regex = re.compile(r"^([a-z]+)/") if use_regex else None
            samples, skipped = _folder_reference(files, aliases, links, ids, regex)
            opts = ConvertConfig(
                image=IMG, shard_size=3, seed=2, source=ScanConfig(label_regex=regex.pattern if regex else None)
            )
            STATS["regex" if regex else "imagefolder"] += 1
            STATS["paths"] += len(samples) + len(skipped)
            if not samples:
                STATS["refused: no images"] += 1
                with pytest.raises(ConvertError) as err:
                    convert(src, os.path.join(work, "out"), opts, workers=1, quiet=True)
                assert "\n" not in str(err.value)
                return
            for _, r in skipped:
                STATS[f"skipped: {r}"] += 1
            STATS["samples"] += len(samples)
            result = convert(src, os.path.join(work, "out"), opts, workers=1, quiet=True)
            (split,) = result.splits
            got = read_split(split.url)
            if regex is None:
                want_classes = sorted({p.split("/")[0] for p in files if "/" in p} | set(aliases))
            else:
                want_classes = sorted({c for c, _ in samples.values()})
            assert got.classes == want_classes
            assert {p: (c, i) for p, (c, i, _) in got.samples.items()} == samples
            assert all(got.classes[k] == c for c, _, k in got.samples.values())
            assert sorted(got.skipped) == skipped
            assert got.keys == len(samples)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    run()
    print("\nfolder oracle:", dict(sorted(STATS.items())))
