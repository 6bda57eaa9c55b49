"""``yolo:`` sources: demo scenes written as an ultralytics folder (normalised ``cls cx cy w h``), against the scenes."""

from __future__ import annotations

import os
import random
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ConvertConfig
from shardkit.convert.scan import discover
from shardkit.convert.scan.yolo import tiny_yaml_names
from shardkit.demo.scenes import CLASSES, scene
from shardkit.errors import ConvertError
from tests.support.detection_sources import read_shards

SETTINGS = settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=20)
KINDS = ("bad_line", "bad_category", "degenerate_box", "outside_image", "clipped", "no_image")
NAMES = CLASSES[1:]  # YOLO class k is the scene's class k + 1


def save_image(path: str, image: np.ndarray, turned: bool) -> None:
    """``image`` as a JPEG; ``turned``: stored on its side with EXIF orientation 6 (upright as ``image``)."""
    from PIL import Image

    os.makedirs(os.path.dirname(path), exist_ok=True)
    im = Image.fromarray(image)
    if turned:
        exif = Image.Exif()
        exif[0x0112] = 6
        im.transpose(Image.Transpose.ROTATE_90).save(path, format="JPEG", exif=exif.tobytes())
    else:
        im.save(path, format="JPEG")


def names_file(root: str, style: str) -> None:
    if style == "yaml-list":
        text = "path: .\ntrain: images/train\nval: images/val\nnames: [" + ", ".join(NAMES) + "]\n"
    elif style == "yaml-dict":
        text = "train: images/train\nnames:\n" + "".join(f"  {k}: {n}\n" for k, n in enumerate(NAMES))
    else:
        with open(os.path.join(root, "classes.txt"), "w") as f:
            f.write("\n".join(NAMES) + "\n")
        return
    with open(os.path.join(root, "data.yaml"), "w") as f:
        f.write(text)


def write_yolo(
    root: str, seed: int, n: int, size: tuple[int, int], split_folders: bool, broken: dict[str, int]
) -> dict[str, list[tuple[list[float], int]]]:
    """Scenes as a YOLO folder (some stored turned, EXIF-oriented); returns the expected ``(box, class)`` per image."""
    rng = random.Random(seed)
    w, h = size
    expected: dict[str, list[tuple[list[float], int]]] = {}
    for i in range(n):
        split = rng.choice(["train", "val"]) if split_folders else ""
        rel = "/".join(p for p in ("images", split, f"{i:03d}.jpg") if p)
        s = scene(seed, i, size)
        save_image(os.path.join(root, rel), s.image, turned=rng.random() < 0.3 or i == 1)
        lines: list[tuple[str, tuple[list[float], int] | None]] = []
        for (x0, y0, x1, y1), c in zip(s.objects.boxes.tolist(), s.objects.labels.tolist()):
            line = f"{c - 1} {(x0 + x1) / 2 / w!r} {(y0 + y1) / 2 / h!r} {(x1 - x0) / w!r} {(y1 - y0) / h!r}"
            if rng.random() < 0.2:  # a segmentation line: the box around its points
                line = f"{c - 1} " + " ".join(
                    f"{x / w!r} {y / h!r}" for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))
                )
            lines.append((line, ([x0, y0, x1, y1], c)))
        for kind, count in broken.items():
            for _ in range(count if kind != "no_image" else 0):
                c = rng.randrange(len(NAMES))
                if kind == "bad_line":
                    bad = rng.choice(
                        [f"{c} 0.5 0.5 0.1", f"{c}.5 0.5 0.5 0.1 0.1", f"{c} 0.5 nan 0.1 0.1", "x 0.5 0.5 0.1 0.1"]
                    )
                    lines.append((bad, None))
                elif kind == "bad_category":
                    lines.append((f"{rng.choice([len(NAMES), -1])} 0.5 0.5 0.1 0.1", None))
                elif kind == "degenerate_box":
                    lines.append((f"{c} 0.5 0.5 0 0.1", None))
                elif kind == "outside_image":
                    lines.append((f"{c} 1.5 0.5 0.2 0.2", None))
                else:  # reaches past the left edge: cut at 0
                    lines.append((f"{c} 0.0 0.5 0.5 0.5", ([0.0, h * 0.25, w * 0.25, h * 0.75], c + 1)))
        rng.shuffle(lines)
        label = os.path.join(root, "labels", split, f"{i:03d}.txt")
        os.makedirs(os.path.dirname(label), exist_ok=True)
        with open(label, "w") as f:
            f.write("\n".join(line for line, _ in lines) + "\n\n")  # a blank line is no annotation
        expected[rel] = [want for _, want in lines if want is not None]
    for k in range(broken["no_image"]):  # label files without their image
        split = "train" if split_folders else ""
        label = os.path.join(root, "labels", split, f"orphan{k}.txt")
        os.makedirs(os.path.dirname(label), exist_ok=True)
        with open(label, "w") as f:
            f.write("0 0.5 0.5 0.1 0.1\n")
    if split_folders:  # both split folders exist even when every image went to one
        for s in ("train", "val"):
            os.makedirs(os.path.join(root, "images", s), exist_ok=True)
    return expected


@SETTINGS
@example(seed=0, n=3, w=64, h=48, split_folders=True, style="yaml-list", broken=dict.fromkeys(KINDS, 1))
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(1, 4),
    w=st.integers(40, 120),
    h=st.integers(40, 120),
    split_folders=st.booleans(),
    style=st.sampled_from(["yaml-list", "yaml-dict", "classes.txt"]),
    broken=st.fixed_dictionaries({k: st.integers(0, 2) for k in KINDS}),
)
def test_yolo_scan_matches_the_scenes(
    seed: int, n: int, w: int, h: int, split_folders: bool, style: str, broken: dict[str, int]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        expected = write_yolo(d, seed, n, (w, h), split_folders, broken)
        names_file(d, style)
        source = discover(f"yolo:{d}", ConvertConfig())
    assert source.classes == CLASSES and source.fields == ("image", "boxes")
    assert [s.name for s in source.splits] == (["train", "val"] if split_folders else ["train"])
    total: dict[str, int] = {}
    seen = []
    for split in source.splits:
        for k, v in split.annotations.items():
            total[k] = total.get(k, 0) + v
        for f in split.files:
            seen.append(f.relpath)
            want = expected[f.relpath]
            o = f.objects
            assert o is not None and o.keypoints is None
            assert o.labels.tolist() == [c for _, c in want]
            assert np.allclose(o.boxes, np.array([b for b, _ in want], np.float32).reshape(-1, 4), atol=1e-3)
    assert sorted(seen) == sorted(expected)
    objects = sum(len(scene(seed, i, (w, h)).objects) for i in range(n))
    want_total = {"kept": objects, "clipped": n * broken["clipped"]}
    want_total |= {k: n * v for k, v in broken.items() if v and k not in ("clipped", "no_image")}
    if broken["no_image"]:
        want_total["no_image"] = broken["no_image"]
    assert total == dict(sorted(want_total.items(), key=lambda kv: (kv[0] not in ("kept", "clipped"), kv[0])))


def test_an_unreadable_image_and_a_missing_label_file(tmp_path: Any) -> None:
    write_yolo(str(tmp_path), 1, 2, (50, 40), False, dict.fromkeys(KINDS, 0))
    names_file(str(tmp_path), "yaml-list")
    os.remove(tmp_path / "labels" / "001.txt")  # no label file: no object
    (tmp_path / "images" / "002.jpg").write_bytes(b"not an image")
    (tmp_path / "labels" / "002.txt").write_text("0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2 0.2\n")
    (tmp_path / "images" / "notes.md").write_text("hi")
    source = discover(f"yolo:{tmp_path}", ConvertConfig())
    (split,) = source.splits
    assert [f.relpath for f in split.files] == ["images/000.jpg", "images/001.jpg"]
    assert len(split.files[1].objects) == 0
    assert sorted(split.skipped) == [
        ("images/002.jpg", SkipReason.CORRUPT, "cannot read the image header for its size"),
        ("images/notes.md", SkipReason.NOT_AN_IMAGE, "file name extension is not an image type"),
    ]
    assert split.annotations["no_image"] == 2


def test_names_are_required_and_pose_labels_refused(tmp_path: Any) -> None:
    write_yolo(str(tmp_path), 1, 1, (50, 40), False, dict.fromkeys(KINDS, 0))
    with pytest.raises(ConvertError, match="no class names"):
        discover(f"yolo:{tmp_path}", ConvertConfig())
    (tmp_path / "data.yaml").write_text("names: {0: a, 2: b}\n")
    with pytest.raises(ConvertError, match="not 0..1"):
        discover(f"yolo:{tmp_path}", ConvertConfig())
    (tmp_path / "data.yaml").write_text("kpt_shape: [17, 3]\nnames: [person]\n")
    with pytest.raises(ConvertError, match="pose labels"):
        discover(f"yolo:{tmp_path}", ConvertConfig())


_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
name_text = st.from_regex(r"[a-z][a-z0-9_\- ]{0,10}[a-z0-9]", fullmatch=True).filter(
    lambda s: s.lower() not in _RESERVED
)


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=60)
@given(
    st.lists(name_text, min_size=1, max_size=6),
    st.sampled_from(["flow", "block", "flow-dict", "block-dict"]),
    st.data(),
)
def test_the_tiny_names_reader_reads_what_pyyaml_reads(names: list[str], style: str, data: st.DataObject) -> None:
    yaml = pytest.importorskip("yaml")

    def quote(s: str) -> str:
        q = data.draw(st.sampled_from(["plain", "single", "double"]))
        return s if q == "plain" else f"'{s}'" if q == "single" else f'"{s}"'

    q = [quote(n) for n in names]
    if style == "flow":
        body = "names: [" + ", ".join(q) + "]  # the classes\n"
    elif style == "block":
        body = "names:\n" + "".join(f"  - {n}\n" for n in q)
    elif style == "flow-dict":
        body = "names: {" + ", ".join(f"{i}: {n}" for i, n in enumerate(q)) + "}\n"
    else:
        body = "names:\n" + "".join(f"  {i}: {n}  # comment\n" for i, n in enumerate(q))
    text = "path: ../datasets/x\ntrain: images/train\n" + body + "nc: 3\n"
    want = yaml.safe_load(text)["names"]
    got, pose = tiny_yaml_names(text)
    assert got == want and not pose


def test_yolo_convert_end_to_end(tmp_path: Any) -> None:
    from shardkit.convert import convert

    size = (96, 72)
    write_yolo(str(tmp_path / "src"), 2, 3, size, True, dict.fromkeys(KINDS, 0))
    names_file(str(tmp_path / "src"), "yaml-list")
    convert(f"yolo:{tmp_path / 'src'}", str(tmp_path / "out"), ConvertConfig(), quiet=True, workers=1)
    got = read_shards(str(tmp_path / "out"), 2, size, False, lambda m: int(m["path"][-7:-4]))
    assert len(got) == 3


def test_roboflow_layout_split_folders_holding_images_and_labels(tmp_path: Any) -> None:
    for split in ("train", "valid"):  # <split>/images/000.jpg, <split>/labels/000.txt
        write_yolo(str(tmp_path / split), 7, 2, (40, 30), False, dict.fromkeys(KINDS, 0))
    (tmp_path / "data.yaml").write_text("names:\n- " + "\n- ".join(NAMES) + "\nnc: 6\n")
    source = discover(f"yolo:{tmp_path}", ConvertConfig())
    assert [s.name for s in source.splits] == ["train", "valid"] and source.nested
    for s in source.splits:
        assert [f.relpath for f in s.files] == [f"{s.name}/images/000.jpg", f"{s.name}/images/001.jpg"]
        for i, f in enumerate(s.files):
            want = scene(7, i, (40, 30)).objects
            assert (
                np.allclose(f.objects.boxes, want.boxes, atol=1e-3)
                and f.objects.labels.tolist() == want.labels.tolist()
            )
