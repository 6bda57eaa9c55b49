"""Every scanner ends each split by one rule (``SplitSource.close``): files in ``relpath`` order, skips sorted.

Checked on generated names against a plain sort, for the kinds whose splits gather skips from more than one
place: class folders beside their split folders, Pascal VOC split lists; and the one annotation tally
(``Tally``) of a Hugging Face objects column against a plain count.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ConvertConfig, Layout, ScanConfig
from shardkit.convert.scan import discover

SETTINGS = settings(phases=[Phase.explicit, Phase.generate], max_examples=20, deadline=None)
#: names whose order changes once ``.jpg`` or ``/`` follows them ('-' < '.' < '/' < '1' < '_' < letters)
NAME = st.text(alphabet="ab-._1", min_size=1, max_size=4).filter(lambda s: s not in (".", ".."))
NOT_IMAGE = "file name extension is not an image type"


@SETTINGS
@given(top=st.lists(NAME, unique=True, max_size=4), loose=st.lists(NAME, unique=True, max_size=3))
@example(top=["b", "a"], loose=[])  # two files beside the split folders
@example(top=["z"], loose=["n"])  # a file beside the split folders sorts after the split's own skips
def test_class_folder_splits_skips_are_sorted_with_the_files_beside_the_split_folders(tmp_path_factory, top, loose):
    src = tmp_path_factory.mktemp("splits")
    for split in ("train", "val"):
        os.makedirs(src / split / "cat")
        (src / split / "cat" / "1.png").write_bytes(b"x")
    for name in top:
        (src / name).write_bytes(b"x")
    for name in loose:
        (src / "train" / "cat" / f"{name}.txt").write_bytes(b"x")
    source = discover(str(src), ConvertConfig(layout=Layout.SPLITS))
    train, val = source.splits
    want = [(n, SkipReason.NOT_IN_CLASS_FOLDER, "file outside any split folder") for n in top]
    want += [(f"train/cat/{n}.txt", SkipReason.NOT_AN_IMAGE, NOT_IMAGE) for n in loose]
    assert train.skipped == sorted(want) and val.skipped == []
    assert [f.relpath for f in train.files] == ["train/cat/1.png"] and train.class_names == ["cat"]


def _voc_xml(ident: str) -> str:
    return (
        f"<annotation><filename>{ident}.jpg</filename><size><width>8</width><height>8</height></size>"
        "<object><name>cat</name><difficult>0</difficult><bndbox><xmin>2</xmin><ymin>2</ymin><xmax>5</xmax>"
        "<ymax>5</ymax></bndbox></object></annotation>"
    )


@SETTINGS
@given(listed=st.lists(st.tuples(NAME, st.booleans()), unique_by=lambda t: t[0], max_size=6))
@example(listed=[("a", False), ("a-1", False)])  # id order a < a-1, path order JPEGImages/a-1.jpg < JPEGImages/a.jpg
@example(listed=[("a", True), ("a-1", True)])
def test_voc_split_lists_files_and_skips_are_in_path_order(tmp_path_factory, listed):
    root = tmp_path_factory.mktemp("voc")
    os.makedirs(root / "Annotations")
    os.makedirs(root / "ImageSets" / "Main")
    listed = [*listed, ("zz", True)]  # one image with its annotation: the split is not empty
    (root / "ImageSets" / "Main" / "train.txt").write_text("".join(f"{i}\n" for i, _ in listed))
    for ident, annotated in listed:
        if annotated:
            (root / "Annotations" / f"{ident}.xml").write_text(_voc_xml(ident))
    (split,) = discover(f"voc:{root}", ConvertConfig()).splits
    assert [f.relpath for f in split.files] == sorted(f"JPEGImages/{i}.jpg" for i, a in listed if a)
    assert split.skipped == sorted(
        (f"JPEGImages/{i}.jpg", SkipReason.MISSING_FILE, f"no Annotations/{i}.xml") for i, a in listed if not a
    )
    assert split.class_names == ["cat"]


#: one object: its ``[x, y, w, h]`` (``w`` or ``h`` 0: degenerate) and its category (``None``: not a category)
OBJECT = st.tuples(st.sampled_from([(0, 0, 2, 2), (1, 1, 0, 2), (2, 1, 3, 0)]), st.sampled_from(["cat", "dog", None]))
#: a row: its objects, and how many categories to drop or add (not 0: the lists differ in length, a bad row)
ROW = st.tuples(st.lists(OBJECT, max_size=3), st.sampled_from([0, 0, 0, -1, 1]))


def _hf_objects(rows: list[tuple[list[list[float]], list[Any]]]) -> Any:
    import datasets

    box = datasets.Sequence(datasets.Value("float32"), length=4)
    objects = datasets.Sequence({"bbox": box, "category": datasets.Value("string")})
    feats = datasets.Features({"image": datasets.Image(), "objects": objects})
    return datasets.Dataset.from_dict(
        {
            "image": [{"bytes": b"x", "path": None} for _ in rows],
            "objects": [{"bbox": b, "category": c} for b, c in rows],
        },
        features=feats,
    )


def _hf_reference(rows: list[tuple[list[list[float]], list[Any]]]) -> dict[str, int]:
    """What became of every box, counted plainly: ``kept`` always, every other outcome that happened."""
    counts: Counter[str] = Counter()
    for bbox, cats in rows:
        if len(bbox) != len(cats):
            counts["image_skipped"] += len(bbox)
            continue
        for (_, _, w, h), c in zip(bbox, cats):
            counts["degenerate_box" if w <= 0 or h <= 0 else "bad_category" if c is None else "kept"] += 1
    return {"kept": counts["kept"], **{k: n for k, n in counts.items() if k != "kept" and n}}


@SETTINGS
@given(rows=st.lists(ROW, max_size=5))
@example(rows=[([], 1)])  # a bad row without a box: no zero count
@example(rows=[([((0, 0, 2, 2), "cat")], -1), ([((1, 1, 0, 2), None)], 0)])
def test_hf_objects_split_counts_every_box_once(rows):
    data: list[tuple[list[list[float]], list[Any]]] = [([[0, 0, 2, 2]], ["cat"])]  # one row to convert
    for objects, change in rows:
        cats = [c for _, c in objects]
        data.append(([list(b) for b, _ in objects], cats[:-1] if change < 0 and cats else cats + ["dog"] * change))
    (split,) = discover(_hf_objects(data), ConvertConfig(source=ScanConfig(objects_col="objects"))).splits
    assert split.annotations == _hf_reference(data)
    bad = [i for i, (b, c) in enumerate(data) if len(b) != len(c)]
    width = max(8, len(str(len(data) - 1)))
    assert split.skipped == [
        (f"row-{i:0{width}d}", SkipReason.BAD_ROW, f"split train row {i}: bbox and category lists differ in length")
        for i in bad
    ]
    assert [f.relpath for f in split.files] == [f"row-{i:0{width}d}" for i in range(len(data)) if i not in bad]
    kept = {c for i, (b, cats) in enumerate(data) if i not in bad for (_, _, w, h), c in zip(b, cats) if w and h and c}
    assert split.class_names == sorted(kept)
