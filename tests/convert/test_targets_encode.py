"""The encode path of targets, against a deliberately simple reference: boxes and keypoints scaled by
``out / in`` per axis, masks resampled by hand (integer nearest arithmetic), mask classes on their colours;
and the pipeline around it (tasks + merge, overflow shards, resume) keeps every target byte for byte.

Read back with plain ``tarfile`` + ``json`` + PIL (no shardkit reader).
"""

from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from PIL import Image

from shardkit.convert import ConvertConfig, EncodeConfig, convert, merge
from shardkit.convert import job as job_module
from shardkit.convert import shards as shards_module
from shardkit.convert.encoder import encode_chunk
from shardkit.convert.scan.source import Reader, ScannedSource, SourceFile, SplitSource
from shardkit.convert.scan.valsplit import carve_val, val_count
from shardkit.convert.segments import Segment, semantic_mask
from shardkit.convert.shards import Item
from shardkit.convert.targets import TargetSpec
from shardkit.demo.scenes import CLASSES, COLOURS, scene, scene_jpeg
from shardkit.errors import ConvertError
from shardkit.format.fields import Objects

# no shrinking: a failing case is reported as found (each example converts a dataset; shrinking takes minutes)
SETTINGS = settings(derandomize=True, deadline=None, max_examples=8, phases=(Phase.explicit, Phase.generate))


# ---------------------------------------------------------------- the reference (independent of shardkit.targets)
def ref_nearest(mask: np.ndarray, ow: int, oh: int) -> tuple[np.ndarray, np.ndarray]:
    """Nearest resample by integer arithmetic: output pixel j takes source pixel floor((2j+1) * W / (2 ow)).

    Returns the reference and a bool map of pixels whose source position is an exact tie between two
    source pixels (there either neighbour is accepted: float rounding may pick the lower one)."""
    h, w = mask.shape
    out = np.zeros((oh, ow), np.uint8)
    tie = np.zeros((oh, ow), bool)
    for i in range(oh):
        num_y = (2 * i + 1) * h
        sy, ty = min(num_y // (2 * oh), h - 1), num_y % (2 * oh) == 0
        for j in range(ow):
            num_x = (2 * j + 1) * w
            sx, tx = min(num_x // (2 * ow), w - 1), num_x % (2 * ow) == 0
            out[i, j] = mask[sy, sx]
            if (ty or tx) and mask[max(sy - ty, 0), max(sx - tx, 0)] != out[i, j]:
                tie[i, j] = True
    return out, tie


def read_tar(path: str) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            out.setdefault(key, {})[ext] = tf.extractfile(m).read()  # type: ignore[union-attr]
    return out


def read_split(split_dir: str) -> tuple[dict, dict[str, dict[str, bytes]]]:
    with open(os.path.join(split_dir, "manifest.json")) as f:
        manifest = json.load(f)
    samples: dict[str, dict[str, bytes]] = {}
    for s in manifest["shards"]:
        samples.update(read_tar(os.path.join(split_dir, s["name"])))
    return manifest, samples


def check_colours(jpeg: bytes, mask: np.ndarray, colours: "list | None" = None) -> None:
    """Every mask pixel of class c away from class edges sits on colour c (``colours[c]``) in the stored image."""
    colours = colours or COLOURS
    img = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(int)
    assert img.shape[:2] == mask.shape
    h, w = mask.shape
    for y in range(2, h - 2):
        for x in range(2, w - 2):
            c = mask[y, x]
            if c != 255 and (mask[y - 2 : y + 3, x - 2 : x + 3] == c).all():
                assert np.abs(img[y, x] - colours[c]).max() <= 40, (x, y, c, img[y, x])


def png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


# ---------------------------------------------------------------- the encode step itself
@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    w=st.integers(24, 180),
    h=st.integers(24, 180),
    side=st.integers(8, 120),
    short=st.booleans(),
    by=st.sampled_from(["mask", "segments"]),
)
def test_encode_moves_boxes_keypoints_and_mask_exactly(tmp_path_factory, seed, w, h, side, short, by):
    tmp = tmp_path_factory.mktemp("enc")
    s = scene(seed, 0, (w, h), max_objects=4, min_side=6)
    (tmp / "a.jpg").write_bytes(scene_jpeg(s))
    (tmp / "a.png").write_bytes(png(s.mask))
    b = s.objects.boxes
    # one more box reaching past the right edge (clipped), one wholly outside (dropped)
    extra = np.array([[w - 5, 0, w + 7, 4], [w + 1, 1, w + 9, 6]], np.float32)
    kp_extra = np.zeros((2, 2, 3), np.float32)
    objects = Objects(
        np.concatenate([b, extra]),
        np.concatenate([s.objects.labels, [1, 2]]),
        np.zeros(len(b) + 2, bool),
        np.concatenate([s.objects.keypoints, kp_extra]),
    )
    segments = tuple(
        Segment(int(c), False, ((x0, y0, x1, y0, x1, y1, x0, y1),))
        for (x0, y0, x1, y1), c in zip(b.tolist(), s.objects.labels)
    )
    item = Item(
        0,
        "a.jpg",
        None,
        0,
        objects=objects,
        mask="a.png" if by == "mask" else None,
        segments=segments if by == "segments" else None,
    )
    image = EncodeConfig(short_side=side) if short else EncodeConfig(short_side=None, max_side=side)
    spec = TargetSpec(boxes=True, mask=True, num_classes=len(CLASSES), num_keypoints=2)
    (out,) = encode_chunk(Reader(str(tmp)), [item], image, spec)
    assert out.encoded is not None and out.targets is not None, out
    ow, oh = Image.open(io.BytesIO(out.encoded.jpeg)).size
    sx, sy = ow / w, oh / h
    got = out.targets.objects
    assert got is not None
    n = len(b)
    # boxes: the scene's boxes scaled per axis, then the clipped one, the outside one gone
    want = np.concatenate([b * [sx, sy, sx, sy], [[(w - 5) * sx, 0, ow, 4 * sy]]])
    np.testing.assert_allclose(got.boxes, want, atol=1e-3)
    assert got.labels.tolist() == s.objects.labels.tolist() + [1]
    np.testing.assert_allclose(got.keypoints[:n, :, :2], s.objects.keypoints[:, :, :2] * [sx, sy], atol=1e-3)
    assert (got.keypoints[:n, :, 2] == 2).all()
    assert out.targets.moved == {"clipped": 1, "outside_image": 1}
    mask = np.asarray(Image.open(io.BytesIO(out.targets.mask)))
    # segments: the source mask is what the rasteriser paints (its boundary pixels are segments.py's business)
    source_mask = s.mask if by == "mask" else semantic_mask(segments, w, h)
    ref, tie = ref_nearest(source_mask, ow, oh)
    assert mask.shape == (oh, ow)
    assert ((mask == ref) | tie).all(), np.argwhere((mask != ref) & ~tie)[:5]
    if by == "mask":
        check_colours(out.encoded.jpeg, mask)
    assert set(out.targets.classes) == set(np.unique(mask).tolist()) | set(s.objects.labels.tolist()) | {1}


def test_bad_masks_skip_with_a_named_reason(tmp_path):
    s = scene(3, 1, (64, 48))
    (tmp_path / "a.jpg").write_bytes(scene_jpeg(s))
    (tmp_path / "small.png").write_bytes(png(s.mask[:-1]))
    (tmp_path / "junk.png").write_bytes(b"not a png")
    big = s.mask.copy()
    big[3, 5] = 9
    (tmp_path / "value.png").write_bytes(png(big))
    ok = s.mask.copy()
    ok[0, 0] = 255  # 255 is "no class": fine
    (tmp_path / "ok.png").write_bytes(png(ok))
    items = [
        Item(i, "a.jpg", None, 0, mask=m)
        for i, m in enumerate(["small.png", "junk.png", "value.png", "gone.png", "ok.png"])
    ]
    items.append(Item(5, "a.jpg", None, 0))  # no mask at all
    spec = TargetSpec(mask=True, num_classes=len(CLASSES))
    outs = encode_chunk(Reader(str(tmp_path)), items, EncodeConfig(short_side=24), spec)
    got = [(o.reason, o.detail.split(":")[0]) for o in outs]
    assert got[:4] == [
        ("bad_mask", "small.png"),
        ("bad_mask", "junk.png"),
        ("bad_mask", "value.png"),
        ("missing_mask", "gone.png"),
    ]
    assert "64x47" in outs[0].detail and "value 9 at x=5, y=3" in outs[2].detail
    assert outs[4].encoded is not None and outs[5].reason == "missing_mask"


# ---------------------------------------------------------------- the pipeline: tasks, merge, overflow, resume
N = 12


def fake_source(root: str) -> ScannedSource:
    """A detection source as fmt's scanners give it: objects with keypoints, segments, scan-time counts."""
    files = []
    given_boxes = 0
    for i in range(N):
        s = scene(7, i, (90, 70) if i % 3 else (240, 180))  # sizes that vary: some samples overflow their shard
        name = f"img{i:02d}.jpg"
        with open(os.path.join(root, name), "wb") as f:
            f.write(scene_jpeg(s) if i != 5 else b"broken")  # a corrupt image: its objects are lost, counted
        segs = tuple(
            Segment(int(c), False, ((x0, y0, x1, y0, x1, y1, x0, y1),))
            for (x0, y0, x1, y1), c in zip(s.objects.boxes.tolist(), s.objects.labels)
        )
        files.append(
            SourceFile(name, None, os.path.getsize(os.path.join(root, name)), objects=s.objects, segments=segs)
        )
        given_boxes += len(s.objects)
    split = SplitSource("train", root, files, annotations={"kept": given_boxes, "no_image": 2})
    return ScannedSource(
        root=root,
        classes=list(CLASSES),
        splits=[split],
        nested=False,
        reader=Reader(root),
        fields=("image", "boxes", "keypoints", "mask"),
        keypoint_names=["left", "right"],
        flip_pairs=[[0, 1]],
    )


@pytest.fixture
def detection_src(tmp_path, monkeypatch):
    root = tmp_path / "src"
    root.mkdir()
    source = fake_source(str(root))

    def discover(src, options, **so):
        if options.val_fraction:
            carve_val(source, options.val_fraction, options.seed)
        return source

    monkeypatch.setattr(job_module, "discover", discover)
    return str(root), source


def _all_bytes(split_dir: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(split_dir)):
        if name.endswith((".tar", ".json")) and name != "plan.json":
            with open(os.path.join(split_dir, name), "rb") as f:
                out[name] = f.read()
    return out


def test_tasks_merge_overflow_and_resume_keep_every_target(detection_src, tmp_path, monkeypatch):
    src, source = detection_src
    monkeypatch.setattr(shards_module, "FILL_TARGET", 3.0)  # plan 3x what fits: overflow shards for merge to pack
    opts = ConvertConfig(image=EncodeConfig(short_side=None, max_side=150), shard_size=4, shard_bytes=30000)
    convert(src, str(tmp_path / "one"), opts, workers=1, quiet=True)
    manifest, samples = read_split(str(tmp_path / "one" / "train"))
    assert manifest["fields"] == ["image", "boxes", "keypoints", "mask"]
    assert manifest["keypoint_names"] == ["left", "right"] and manifest["flip_pairs"] == [[0, 1]]
    lost = len(source.splits[0].files[5].objects)
    total = sum(len(f.objects) for f in source.splits[0].files)
    assert manifest["annotations"] == {"image_skipped": lost, "kept": total - lost, "no_image": 2}
    assert len(samples) + len(manifest["skipped"]) == N  # written + skipped == inputs
    assert len(manifest["shards"]) > 3  # overflow shards were packed by the merge step
    by_path = {f.relpath: f for f in source.splits[0].files}
    for members in samples.values():
        meta = json.loads(members["json"])
        f = by_path[meta["path"]]
        ow, oh = Image.open(io.BytesIO(members["jpg"])).size
        sx, sy = ow / meta["width"], oh / meta["height"]
        obj = json.loads(members["objects.json"])
        np.testing.assert_allclose(obj["boxes"], f.objects.boxes * [sx, sy, sx, sy], atol=1e-3)
        np.testing.assert_allclose(
            np.array(obj["keypoints"])[:, :, :2], f.objects.keypoints[:, :, :2] * [sx, sy], atol=1e-3
        )
        assert obj["labels"] == f.objects.labels.tolist()
        mask = np.asarray(Image.open(io.BytesIO(members["mask.png"])))
        source_mask = semantic_mask(f.segments, meta["width"], meta["height"])
        ref, tie = ref_nearest(source_mask, ow, oh)
        assert ((mask == ref) | tie).all()
    # two tasks + merge: the same bytes
    for t in range(2):
        convert(src, str(tmp_path / "two"), opts, workers=1, quiet=True, num_tasks=2, task_index=t)
    merge(str(tmp_path / "two"))
    assert _all_bytes(str(tmp_path / "two" / "train")) == _all_bytes(str(tmp_path / "one" / "train"))
    # resume after losing a shard: the same bytes
    os.remove(str(tmp_path / "one" / "train" / "train-000001.tar"))
    os.remove(str(tmp_path / "one" / "train" / "manifest.json"))
    convert(src, str(tmp_path / "one"), opts, workers=1, quiet=True)
    assert _all_bytes(str(tmp_path / "one" / "train")) == _all_bytes(str(tmp_path / "two" / "train"))


def test_merge_refuses_parts_with_other_keypoints(detection_src, tmp_path):
    from shardkit.convert import journal

    src, _ = detection_src
    opts = ConvertConfig(image=EncodeConfig(short_side=40), shard_size=4)
    dest = str(tmp_path / "d")
    for t in range(2):
        convert(src, dest, opts, workers=1, quiet=True, num_tasks=2, task_index=t)
    url = os.path.join(dest, "train")
    rec = journal.read_record(url, "train", 1)
    assert rec is not None
    rec.keypoint_names = ["nose"]
    with open(journal.journal_url(url, journal.record_name("train", 1)), "wb") as f:
        f.write(rec.to_json())
    with pytest.raises(ConvertError, match="keypoints"):
        merge(dest)


def test_val_fraction_stratifies_by_first_box_and_splits_the_counts(detection_src, tmp_path):
    src, source = detection_src
    files = list(source.splits[0].files)
    total = sum(len(f.objects) for f in files)
    opts = ConvertConfig(image=EncodeConfig(short_side=40), val_fraction=0.3)
    convert(src, str(tmp_path / "v"), opts, workers=1, quiet=True)
    counts = {}
    for split in ("train", "val"):
        manifest, samples = read_split(str(tmp_path / "v" / split))
        counts[split] = manifest["annotations"]
        assert (
            sum(len(json.loads(m["objects.json"])["labels"]) for m in samples.values())
            == manifest["annotations"]["kept"]
        )
    assert sum(sum(c.values()) for c in counts.values()) == total + 2
    assert counts["val"]["kept"] > 0
    # stratified by the first box's class: val_count(F, n) of each such class's n items
    _, val = read_split(str(tmp_path / "v" / "val"))
    in_val = {json.loads(m["json"])["path"] for m in val.values()}
    by_first: dict[int, list[str]] = {}
    for f in files:
        by_first.setdefault(int(f.objects.labels[0]), []).append(f.relpath)
    for c, paths in by_first.items():
        assert len(in_val & set(paths)) == val_count(0.3, len(paths)) or "img05.jpg" in paths, c
