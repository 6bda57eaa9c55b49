"""Segmentation folder pairs (``--mask-dir``) and Hugging Face detection datasets (``--objects-col``,
``--mask-col``) through ``shardkit convert``, read back with ``tarfile`` + ``json`` + PIL and compared with a
simple reference: boxes scaled per axis, masks resampled by integer nearest arithmetic, mask classes on their
colours; every input and every annotation accounted for.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from PIL import Image

from shardkit.cli import main as cli_main
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.demo.scenes import CLASSES, COLOURS, scene, scene_jpeg
from shardkit.errors import ConvertError

from .test_targets_encode import check_colours, png, read_split, ref_nearest

# no shrinking: a failing case is reported as found (each example converts a dataset; shrinking takes minutes)
SETTINGS = settings(derandomize=True, deadline=None, max_examples=4, phases=(Phase.explicit, Phase.generate))


def _image_config(short: bool, side: int) -> EncodeConfig:
    return EncodeConfig(short_side=side) if short else EncodeConfig(short_side=None, max_side=side)


def _check_mask_sample(
    members: dict[str, bytes], source_mask: np.ndarray, colours: bool = True, table: "list | None" = None
) -> np.ndarray:
    ow, oh = Image.open(io.BytesIO(members["jpg"])).size
    mask = np.asarray(Image.open(io.BytesIO(members["mask.png"])))
    ref, tie = ref_nearest(source_mask, ow, oh)
    assert mask.shape == (oh, ow) and ((mask == ref) | tie).all()
    if colours:
        check_colours(members["jpg"], mask, table)
    return mask


@SETTINGS
@given(
    seed=st.integers(0, 1000),
    sizes=st.lists(st.tuples(st.integers(30, 110), st.integers(30, 110)), min_size=3, max_size=5),
    side=st.integers(12, 90),
    short=st.booleans(),
    splits=st.booleans(),
)
def test_mask_dir_pairs_round_trip(tmp_path_factory, seed, sizes, side, short, splits):
    tmp = tmp_path_factory.mktemp("pairs")
    images, masks = tmp / "images", tmp / "masks"
    expected: dict[str, np.ndarray] = {}
    skipped_want = {}
    top = 0
    for i, (w, h) in enumerate(sizes):
        sub = ("training" if i % 2 else "validation") if splits else f"folder{i % 2}"
        (images / sub).mkdir(parents=True, exist_ok=True)
        (masks / sub).mkdir(parents=True, exist_ok=True)
        s = scene(seed, i, (w, h), min_side=6)
        (images / sub / f"{i}.jpg").write_bytes(scene_jpeg(s))
        rel = f"{sub}/{i}.jpg"
        top = max(top, int(s.mask.max())) if i != 1 else top
        if i == 1:  # an image without a mask
            skipped_want[rel] = "missing_mask"
        elif i == 2:  # a mask of another size
            (masks / sub / f"{i}.png").write_bytes(png(s.mask[:, 1:]))
            skipped_want[rel] = "bad_mask"
        else:
            (masks / sub / f"{i}.png").write_bytes(png(s.mask))
            expected[rel] = s.mask
    (masks / "orphan.png").write_bytes(png(np.zeros((4, 4), np.uint8)))
    dest = tmp / "out"
    result = convert(
        str(images),
        str(dest),
        ConvertConfig(image=_image_config(short, side), source=ScanConfig(mask_dir=str(masks)), shard_size=2),
        workers=1,
        quiet=True,
    )
    assert any("1 masks in" in n and "orphan.png" in n for n in result.notes)
    seen, skipped = {}, {}
    for sr in result.splits:
        manifest, samples = read_split(sr.url)
        assert manifest["fields"] == ["image", "mask"]
        assert manifest["classes"] == [str(i) for i in range(top + 1)]
        for members in samples.values():
            path = json.loads(members["json"])["path"]
            assert path not in seen
            seen[path] = _check_mask_sample(members, expected[path])
        skipped.update({s["path"]: s["reason"] for s in manifest["skipped"]})
    for sr in result.splits:  # the skipped inputs of a split with no sample
        skipped.update({s.path: s.reason for s in sr.skipped_files})
    assert set(seen) == set(expected)  # written + skipped == inputs
    assert skipped == skipped_want
    if splits:
        assert sorted(s.split for s in result.splits) == sorted(
            {p.split("/")[0] for p in list(expected) + list(skipped_want)}
        )


def test_mask_classes_file_and_bad_values(tmp_path):
    images, masks = tmp_path / "images", tmp_path / "masks"
    images.mkdir()
    masks.mkdir()
    for i in range(3):
        s = scene(11, i, (60, 40))
        (images / f"{i}.jpg").write_bytes(scene_jpeg(s))
        m = s.mask.copy()
        if i == 0:
            m[0, 0] = 7  # no class 7 among the 7 named classes (0..6)
        if i == 1:
            m[0, 0] = 255  # "no class": kept
        (masks / f"{i}.png").write_bytes(png(m))
    names = tmp_path / "classes.txt"
    names.write_text("\n".join(CLASSES) + "\n\n")
    out = tmp_path / "out"
    rc = cli_main(
        [
            "convert",
            str(images),
            str(out),
            "--mask-dir",
            str(masks),
            "--mask-classes",
            str(names),
            "--short-side",
            "20",
            "--quiet",
            "--workers",
            "1",
        ]
    )
    assert rc in (0, None)
    manifest, samples = read_split(str(out / "train"))
    assert manifest["classes"] == CLASSES
    assert [(s["path"], s["reason"]) for s in manifest["skipped"]] == [("0.jpg", "bad_mask")]
    assert "0.png" in manifest["skipped"][0]["detail"] and "value 7" in manifest["skipped"][0]["detail"]
    assert len(samples) == 2
    names.write_text("a\n\nb\n")
    with pytest.raises(ConvertError, match="line 2 is blank"):
        convert(
            str(images),
            str(tmp_path / "o2"),
            ConvertConfig(source=ScanConfig(mask_dir=str(masks), mask_classes=str(names))),
            workers=1,
            quiet=True,
        )
    with pytest.raises(ValueError, match="mask-classes"):
        ScanConfig(mask_classes=str(names))


def test_resume_notices_a_replaced_mask(tmp_path):
    """A mask file replaced between runs is a different input: never resumed over with the old shards."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    images.mkdir()
    masks.mkdir()
    for i in range(4):
        s = scene(5, i, (64, 48))
        (images / f"{i}.jpg").write_bytes(scene_jpeg(s))
        (masks / f"{i}.png").write_bytes(png(s.mask))
    opts = ConvertConfig(image=EncodeConfig(short_side=24), source=ScanConfig(mask_dir=str(masks), mask_classes=None))
    dest = str(tmp_path / "out")
    convert(str(images), dest, opts, workers=1, quiet=True)
    a, b = (masks / "0.png").read_bytes(), (masks / "1.png").read_bytes()
    assert len(a) != len(b)
    (masks / "0.png").write_bytes(b)  # swap two masks of the same size
    (masks / "1.png").write_bytes(a)
    with pytest.raises(ConvertError, match="input listing differs"):
        convert(str(images), dest, opts, workers=1, quiet=True)
    convert(str(images), dest, opts, workers=1, quiet=True, overwrite=True)
    _, samples = read_split(os.path.join(dest, "train"))
    for members in samples.values():
        path = json.loads(members["json"])["path"]
        i = int(path[0])
        _check_mask_sample(members, scene(5, 1 - i if i < 2 else i, (64, 48)).mask, colours=i >= 2)


# ---------------------------------------------------------------- Hugging Face
def _hf_dataset(rows: list[dict], layout: str, category: str):
    import datasets

    cat: object = (
        datasets.ClassLabel(names=CLASSES[1:])
        if category == "classlabel"
        else datasets.Value("string")
        if category == "name"
        else datasets.Value("int64")
    )
    box = datasets.Sequence(datasets.Value("float32"), length=4)
    objects = (
        datasets.Sequence({"bbox": box, "category": cat})
        if layout == "dict"
        else datasets.List({"bbox": datasets.List(datasets.Value("float32"), length=4), "category": cat})
    )
    feats = datasets.Features({"image": datasets.Image(), "objects": objects, "mask": datasets.Image()})
    data = {"image": [], "objects": [], "mask": []}
    for r in rows:
        data["image"].append({"bytes": r["image"], "path": None})
        data["mask"].append({"bytes": r["mask"], "path": None})
        if layout == "dict":
            data["objects"].append({"bbox": r["bbox"], "category": r["category"]})
        else:
            data["objects"].append([{"bbox": b, "category": c} for b, c in zip(r["bbox"], r["category"])])
    return datasets.Dataset.from_dict(data, features=feats)


@SETTINGS
@given(
    seed=st.integers(0, 1000),
    n=st.integers(2, 5),
    side=st.integers(16, 80),
    short=st.booleans(),
    layout=st.sampled_from(["dict", "list"]),
    category=st.sampled_from(["classlabel", "name", "index"]),
)
def test_hf_objects_and_masks_round_trip(tmp_path_factory, seed, n, side, short, layout, category):
    tmp = tmp_path_factory.mktemp("hf")
    rows, scenes = [], []
    given_count = 0
    for i in range(n):
        w, h = 60 + 13 * i, 90 - 7 * i
        s = scene(seed, i, (w, h), min_side=6)
        scenes.append(s)
        b = s.objects.boxes.tolist()
        bbox = [[x0, y0, x1 - x0, y1 - y0] for x0, y0, x1, y1 in b]
        cats = [int(c) - 1 for c in s.objects.labels]
        bbox += [[w - 4, 2, 10, 5], [3, 3, 0, 4], [w + 2, 1, 3, 3]]  # clipped, degenerate, outside the image
        cats += [0, 1, 2]
        given_count += len(bbox)
        if category == "name":
            cats = [CLASSES[c + 1] for c in cats]
        rows.append({"image": scene_jpeg(s) if i != 1 else b"broken", "bbox": bbox, "category": cats})
    # the dataset's classes: background, then the categories (ClassLabel order, sorted names, or indices 0..K-1)
    used = {c for r in rows for c in r["category"]}
    top = max((c for c in used if isinstance(c, int)), default=0)
    names = (
        sorted(used)
        if category == "name"
        else CLASSES[1:]
        if category == "classlabel"
        else [str(i) for i in range(top + 1)]
    )
    classes = ["background", *names]
    # scene class c -> dataset class (the masks are written in the dataset's classes), and each class's colour
    lut = np.zeros(256, np.uint8)
    table = [COLOURS[0]] * len(classes)
    for c in range(1, len(CLASSES)):
        k = (classes.index(CLASSES[c]) if CLASSES[c] in classes else 999) if category == "name" else c
        if k < len(classes):
            lut[c], table[k] = k, COLOURS[c]
    for r, sc in zip(rows, scenes):
        r["mask"] = png(lut[sc.mask])
    ds = _hf_dataset(rows, layout, category)
    result = convert(
        ds,
        str(tmp / "out"),
        ConvertConfig(image=_image_config(short, side), source=ScanConfig(objects_col="objects", mask_col="mask")),
        workers=1,
        quiet=True,
    )
    manifest, samples = read_split(str(tmp / "out" / "train"))
    assert manifest["fields"] == ["image", "boxes", "mask"]
    assert manifest["classes"] == classes
    assert len(samples) + len(manifest["skipped"]) == n
    assert [s["reason"] for s in manifest["skipped"]] == ["not_an_image"]
    ann = manifest["annotations"]
    assert sum(ann.values()) == given_count
    lost = len(scenes[1].objects) + 2  # the broken row's stored boxes
    assert ann["image_skipped"] == lost and ann["degenerate_box"] == n
    assert ann["clipped"] == n - 1 and ann["outside_image"] == n - 1
    stored = 0
    for members in samples.values():
        row = int(json.loads(members["json"])["path"].split("-")[1])
        s = scenes[row]
        w, h = s.image.shape[1], s.image.shape[0]
        ow, oh = Image.open(io.BytesIO(members["jpg"])).size
        sx, sy = ow / w, oh / h
        obj = json.loads(members["objects.json"])
        want_boxes = np.concatenate([s.objects.boxes * [sx, sy, sx, sy], [[(w - 4) * sx, 2 * sy, ow, 7 * sy]]])
        np.testing.assert_allclose(obj["boxes"], want_boxes, atol=1e-3)
        want_names = [CLASSES[c] for c in s.objects.labels] + [CLASSES[1]]
        if category == "index":
            want_names = [str(int(c) - 1) for c in s.objects.labels] + ["0"]
        assert [manifest["classes"][c] for c in obj["labels"]] == want_names
        stored += len(obj["labels"])
        _check_mask_sample(members, lut[s.mask], table=table)
    assert stored == ann["kept"] + ann["clipped"]
    assert result.converted == len(samples)


def test_hf_options_that_do_not_apply(tmp_path):
    s = scene(1, 0, (40, 30))
    ds = _hf_dataset([{"image": scene_jpeg(s), "mask": png(s.mask), "bbox": [], "category": []}], "dict", "classlabel")
    with pytest.raises(ConvertError, match="--text-col does not apply"):
        convert(
            ds,
            str(tmp_path / "o"),
            ConvertConfig(source=ScanConfig(objects_col="objects", text_col="x")),
            workers=1,
            quiet=True,
        )
    with pytest.raises(ConvertError, match="no column 'boxes'"):
        convert(ds, str(tmp_path / "o"), ConvertConfig(source=ScanConfig(objects_col="boxes")), workers=1, quiet=True)
    r = convert(ds, str(tmp_path / "m"), ConvertConfig(source=ScanConfig(mask_col="mask")), workers=1, quiet=True)
    m = r.splits[0].manifest
    assert (
        m is not None and m.fields == ["image", "mask"] and m.classes == [str(i) for i in range(int(s.mask.max()) + 1)]
    )
    assert not m.annotations


def test_info_and_summary_show_annotations(tmp_path, capsys):
    s = scene(2, 0, (50, 40))
    ds = _hf_dataset(
        [{"image": scene_jpeg(s), "mask": png(s.mask), "bbox": [[1, 1, 5, 5], [0, 0, 0, 1]], "category": [0, 1]}],
        "dict",
        "classlabel",
    )
    ds.save_to_disk(str(tmp_path / "ds"))
    rc = cli_main(
        [
            "convert",
            f"hf:{tmp_path / 'ds'}",
            str(tmp_path / "o"),
            "--objects-col",
            "objects",
            "--mask-col",
            "mask",
            "--quiet",
            "--workers",
            "1",
        ]
    )
    assert rc in (0, None)
    out = capsys.readouterr().out
    assert "annotations: 1 degenerate_box, 1 kept" in out and "fields: image, boxes, mask" in out
    cli_main(["info", str(tmp_path / "o")])
    assert "annotations: 1 degenerate_box, 1 kept" in capsys.readouterr().out
    cli_main(["info", str(tmp_path / "o"), "--json"])
    assert json.loads(capsys.readouterr().out)[0]["annotations"] == {"degenerate_box": 1, "kept": 1}


def test_masks_inside_src_and_stray_files_are_accounted(tmp_path):
    images = tmp_path / "images"
    for split in ("train", "val"):
        (images / split).mkdir(parents=True)
        (tmp_path / "masks" / split).mkdir(parents=True)
        s = scene(4, 0 if split == "train" else 1, (50, 40))
        (images / split / "a.jpg").write_bytes(scene_jpeg(s))
        (tmp_path / "masks" / split / "a.png").write_bytes(png(s.mask))
    (images / "README.txt").write_text("stray")
    r = convert(
        str(images),
        str(tmp_path / "o"),
        ConvertConfig(source=ScanConfig(mask_dir=str(tmp_path / "masks"))),
        workers=1,
        quiet=True,
    )
    assert sorted(s.split for s in r.splits) == ["train", "val"] and r.converted == 2
    assert r.skipped_reasons == {"not_in_class_folder": 1}
    # MASKS_DIR inside SRC: its PNGs are masks, not images
    inner = tmp_path / "flat"
    (inner / "masks").mkdir(parents=True)
    s = scene(4, 2, (50, 40))
    (inner / "x.jpg").write_bytes(scene_jpeg(s))
    (inner / "masks" / "x.png").write_bytes(png(s.mask))
    r = convert(
        str(inner),
        str(tmp_path / "o2"),
        ConvertConfig(source=ScanConfig(mask_dir=str(inner / "masks"))),
        workers=1,
        quiet=True,
    )
    assert r.converted == 1 and r.skipped == 0
