"""The detection/segmentation members: ``.objects.json``, ``.mask.png``, the manifest's
``keypoint_names``/``flip_pairs``/``annotations``, and the demo scenes, each against a deliberately simple
reference written here."""

from __future__ import annotations

import io
import json
import math
import os
import tarfile

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from shardkit.demo.scenes import CLASSES, COLOURS, scene, write_scenes
from shardkit.errors import ManifestError
from shardkit.format import ShardReader
from shardkit.format.fields import IGNORE, Objects, fields_error, objects_bytes, parse_objects
from shardkit.format.manifest import Manifest, ShardInfo, load_manifest, save_manifest
from shardkit.format.masks import decode_mask, mask_bytes
from shardkit.format.sample import SampleRule
from shardkit.ops.verify import verify

SET = settings(
    phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=120, database=None
)
F32 = float(np.finfo(np.float32).max)

numbers = st.one_of(
    st.integers(-5, 300), st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from([1e39, -1e39, 2**64]), st.booleans()
)
box = st.lists(numbers, min_size=3, max_size=5)
json_box_lists = st.lists(box, max_size=4)
labels = st.lists(st.one_of(st.integers(-2, 8), st.booleans(), st.text(max_size=1)), max_size=4)
point = st.lists(numbers, min_size=2, max_size=4)
kps = st.lists(st.lists(point, min_size=1, max_size=3), max_size=4)


def _ref_objects(data: bytes, c: int | None, k: int):
    """The rule, spelled out per element."""
    v = json.loads(data.decode("utf-8"))
    assert isinstance(v, dict) and "boxes" in v and "labels" in v
    boxes, labs = v["boxes"], v["labels"]

    def num(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= F32

    assert isinstance(boxes, list) and all(isinstance(b, list) and len(b) == 4 and all(map(num, b)) for b in boxes)
    assert len(boxes) <= 4096
    assert isinstance(labs, list) and len(labs) == len(boxes)
    assert all(type(x) is int and x >= 0 and (c is None or x < c) for x in labs)
    assert all(b[0] < b[2] and b[1] < b[3] for b in boxes)
    crowd = v.get("iscrowd", [0] * len(boxes))
    assert isinstance(crowd, list) and len(crowd) == len(boxes) and all(x in (0, 1) for x in crowd)
    kp = None
    if k:
        kp = v["keypoints"]
        assert isinstance(kp, list) and len(kp) == len(boxes)
        for obj in kp:
            assert isinstance(obj, list) and len(obj) == k
            for p in obj:
                assert isinstance(p, list) and len(p) == 3 and all(map(num, p)) and p[2] in (0, 1, 2)
    return (
        [[float(x) for x in b] for b in boxes],
        list(labs),
        [bool(x) for x in crowd],
        None if kp is None else [[[float(x) for x in p] for p in o] for o in kp],
    )


def _ref(data: bytes, c, k):
    try:
        return _ref_objects(data, c, k)
    except (AssertionError, ValueError, KeyError, TypeError):
        return "refused"


def _got(data: bytes, c, k):
    try:
        o = parse_objects(data, c, k)
    except ValueError:
        return "refused"
    return (
        o.boxes.astype(np.float64).tolist(),
        o.labels.tolist(),
        o.iscrowd.tolist(),
        None if o.keypoints is None else o.keypoints.astype(np.float64).tolist(),
    )


def _close(a, b) -> bool:
    if a == "refused" or b == "refused":
        return a == b
    fa = np.asarray(a[0], np.float32).astype(np.float64).tolist()  # the member is read as float32
    kp = None if a[3] is None else np.asarray(a[3], np.float32).astype(np.float64).tolist()
    return (fa, a[1], a[2], kp) == b


@SET
@given(
    boxes=json_box_lists,
    labs=labels,
    crowd=st.one_of(st.none(), st.lists(st.sampled_from([0, 1, 2, True]), max_size=4)),
    kp=st.one_of(st.none(), kps),
    c=st.sampled_from([None, 1, 3, 7]),
    k=st.sampled_from([0, 1, 2]),
)
@example(boxes=[[0, 0, 0, 1]], labs=[0], crowd=None, kp=None, c=None, k=0)  # empty box
@example(boxes=[[5, 0, 1, 1]], labs=[0], crowd=None, kp=None, c=None, k=0)  # reversed box
@example(boxes=[[0, 0, 1, 1]], labs=[3], crowd=None, kp=None, c=3, k=0)  # label out of range
@example(boxes=[[0, 0, 1, 1e39]], labs=[0], crowd=None, kp=None, c=None, k=0)  # beyond float32
@example(boxes=[[0, 0, 1, 1]], labs=[True], crowd=None, kp=None, c=None, k=0)  # a bool label
@example(boxes=[[0, 0, 1, 1]], labs=[0, 1], crowd=None, kp=None, c=None, k=0)  # counts differ
@example(boxes=[[0, 0, 1, 1]], labs=[0], crowd=[2], kp=None, c=None, k=0)  # crowd not 0/1
@example(boxes=[[0, 0, 1, 1]], labs=[0], crowd=None, kp=[[[1, 2, 3]]], c=None, k=1)  # visibility 3
@example(boxes=[[0, 0, 1, 1]], labs=[0], crowd=None, kp=[[[1, 2, 2]]], c=None, k=2)  # K differs
@example(boxes=[[0, 0, 1, 1]], labs=[0], crowd=None, kp=None, c=None, k=1)  # keypoints missing
@example(boxes=[[0, 0, 1, 1], [1, 1, 2, 2]], labs=[0, 1], crowd=[0, 1], kp=[[[1, 2, 2]], [[3, 4, 0]]], c=2, k=1)
def test_objects_rule_equals_a_per_element_reference(boxes, labs, crowd, kp, c, k):
    d = {"boxes": boxes, "labels": labs}
    if crowd is not None:
        d["iscrowd"] = crowd
    if kp is not None:
        d["keypoints"] = kp
    data = json.dumps(d).encode()
    assert _close(_ref(data, c, k), _got(data, c, k))


@SET
@given(
    st.lists(
        st.tuples(
            st.floats(-50, 500, width=32),
            st.floats(-50, 500, width=32),
            st.floats(0.5, 300, width=32),
            st.floats(0.5, 300, width=32),
            st.integers(0, 9),
            st.booleans(),
        ),
        max_size=6,
    ),
    st.integers(0, 3),
)
def test_objects_bytes_round_trip(rows, k):
    rng = np.random.default_rng(len(rows) + k)
    boxes = np.array([[x, y, x + w, y + h] for x, y, w, h, _, _ in rows], np.float32).reshape(-1, 4)
    boxes = boxes[(boxes[:, 0] < boxes[:, 2]) & (boxes[:, 1] < boxes[:, 3])]
    n = len(boxes)
    kp = None
    if k:
        kp = np.concatenate(
            [rng.uniform(-10, 400, (n, k, 2)).astype(np.float32), rng.integers(0, 3, (n, k, 1)).astype(np.float32)], 2
        )
    o = Objects(boxes, np.array([r[4] for r in rows[:n]], np.int64), np.array([r[5] for r in rows[:n]], bool), kp)
    data = objects_bytes(o)
    assert parse_objects(data, 10, k) == o
    assert json.loads(data)["labels"] == o.labels.tolist()  # plain JSON readers see the same values


def test_objects_bytes_refuses_what_the_reader_would_refuse():
    bad = Objects(np.array([[3, 3, 1, 1]], np.float32), np.array([0]), np.array([False]))
    with pytest.raises(ValueError, match="empty or reversed"):
        objects_bytes(bad)


def _ref_fields_error(fields, c, t, k, pairs):
    known = ("image", "label", "labels", "target", "text", "boxes", "keypoints", "mask")
    ok = (
        all(f in known for f in fields)
        and len(set(fields)) == len(fields)
        and "image" in fields
        and not ("label" in fields and "labels" in fields)
        and ("target" in fields) == (t > 0)
        and (not c or any(f in fields for f in ("label", "labels", "boxes", "mask")))
        and ("keypoints" not in fields or "boxes" in fields)
        and ("keypoints" in fields) == (k > 0)
        and not ("mask" in fields and c > 255)
        and not (("boxes" in fields or "mask" in fields) and not c)
    )
    flat = [i for p in pairs for i in p]
    ok = ok and all(len(p) == 2 and p[0] != p[1] for p in pairs)
    ok = ok and all(type(i) is int and 0 <= i < k for i in flat) and len(set(flat)) == len(flat)
    return ok


@SET
@given(
    fields=st.lists(st.sampled_from(["image", "label", "labels", "boxes", "keypoints", "mask", "target"]), max_size=5),
    c=st.sampled_from([0, 3, 256]),
    t=st.sampled_from([0, 2]),
    k=st.sampled_from([0, 2, 3]),
    pairs=st.lists(st.lists(st.integers(-1, 3), min_size=1, max_size=3), max_size=3),
)
@example(fields=["image", "boxes", "keypoints"], c=3, t=0, k=2, pairs=[[0, 1]])
@example(fields=["image", "keypoints"], c=3, t=0, k=2, pairs=[])
@example(fields=["image", "boxes", "keypoints"], c=3, t=0, k=3, pairs=[[0, 1], [1, 2]])
@example(fields=["image", "boxes"], c=0, t=0, k=0, pairs=[])
@example(fields=["image", "mask"], c=256, t=0, k=0, pairs=[])
def test_fields_rule_with_targets_equals_a_reference(fields, c, t, k, pairs):
    assert (fields_error(fields, c, t, k, pairs) is None) == _ref_fields_error(fields, c, t, k, pairs)


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=40, database=None)
@given(h=st.integers(1, 40), w=st.integers(1, 40), seed=st.integers(0, 99))
def test_mask_member_round_trips_bit_for_bit(h, w, seed):
    arr = np.random.default_rng(seed).integers(0, 256, (h, w)).astype(np.uint8)
    data = mask_bytes(arr)
    assert Image.open(io.BytesIO(data)).format == "PNG"  # plain PIL reads the member
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), arr)
    assert np.array_equal(decode_mask(data, (w, h)), arr)


def test_bad_masks_are_refused_in_one_line():
    arr = np.zeros((4, 6), np.uint8)
    with pytest.raises(ValueError, match="mask is 6x4 but its image 5x4"):
        decode_mask(mask_bytes(arr), (5, 4))
    rgb = io.BytesIO()
    Image.new("RGB", (3, 3)).save(rgb, format="PNG")
    with pytest.raises(ValueError, match="mode RGB"):
        decode_mask(rgb.getvalue())
    jpg = io.BytesIO()
    Image.new("L", (3, 3)).save(jpg, format="JPEG")
    with pytest.raises(ValueError, match="not PNG"):
        decode_mask(jpg.getvalue())
    with pytest.raises(ValueError, match="not a readable PNG"):
        decode_mask(b"\x89PNG garbage")
    with pytest.raises(ValueError, match="uint8"):
        mask_bytes(np.zeros((2, 2), np.int64))


def _manifest(**kw) -> Manifest:
    return Manifest(split="train", classes=["bg", "a"], shards=[ShardInfo("train-000000.tar", 0, 0, "0" * 64)], **kw)


def test_manifest_keeps_keypoints_pairs_and_annotations(tmp_path):
    m = _manifest(
        fields=["image", "boxes", "keypoints"],
        keypoint_names=["l", "r"],
        flip_pairs=[[0, 1]],
        annotations={"kept": 5, "clipped": 1, "no_image": 2},
    )
    save_manifest(m, str(tmp_path))
    got = load_manifest(str(tmp_path))
    assert (got.keypoint_names, got.flip_pairs, got.annotations) == (["l", "r"], [[0, 1]], m.annotations)
    assert SampleRule.of(got) == SampleRule(("image", "boxes", "keypoints"), 2, None, 2)


def test_a_classification_manifest_is_written_as_before(tmp_path):
    """No new keys in datasets without targets (their manifests keep their bytes)."""
    save_manifest(_manifest(fields=["image", "label"]), str(tmp_path))
    d = json.loads((tmp_path / "manifest.json").read_text())
    assert not {"keypoint_names", "flip_pairs", "annotations"} & set(d)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"flip_pairs": [[0, 2]]}, "flip pair"),
        ({"keypoint_names": []}, "keypoint_names"),
        ({"fields": ["image", "mask", "keypoints"]}, "needs 'boxes'"),
        ({"annotations": {"kept": -1}}, "negative count"),
        ({"annotations": {"kept": "many"}}, "malformed"),
    ],
)
def test_manifest_refuses_broken_target_entries(tmp_path, change, message):
    d = json.loads(
        _manifest(fields=["image", "boxes", "keypoints"], keypoint_names=["l", "r"], flip_pairs=[[0, 1]]).to_json()
    )
    d.update(change)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ManifestError, match=message):
        load_manifest(str(path))


def test_scenes_are_exact_oracles():
    """Every pixel's colour names its class: the mask, boxes and keypoints agree with the pixels."""
    for i in range(12):
        s = scene(3, i, (96, 72))
        classes = np.zeros(s.mask.shape, np.int64)
        for c, rgb in enumerate(COLOURS):
            classes[(s.image == rgb).all(-1)] = c
        assert np.array_equal(classes, s.mask)
        for b, c, kp in zip(s.objects.boxes.astype(int), s.objects.labels, s.objects.keypoints):
            x0, y0, x1, y1 = b
            assert (s.mask[y0:y1, x0:x1] == c).all()  # the box is the rectangle
            assert kp[0, 0] == x0 and kp[1, 0] == x1 and kp[0, 1] == kp[1, 1] == (y0 + y1) / 2
        assert len(np.unique(s.mask)) - 1 <= len(s.objects) and set(np.unique(s.mask)) <= set(range(len(CLASSES)))


def test_written_scenes_read_back_by_the_rule_and_by_plain_tarfile(tmp_path):
    root = write_scenes(str(tmp_path), 10, size=(64, 48), shard_size=4)
    m = load_manifest(root)
    report = verify(root)
    assert report.ok and report.samples == 10, report.problems
    rule = SampleRule.of(m)
    n = 0
    for i, url in enumerate(m.shard_urls()):
        with open(url, "rb") as f:
            reader = ShardReader(f, url, rule=rule)
            for j in range(m.shards[i].samples):
                s = reader.read(j)
                want = scene(0, int(s.key[1:]), (64, 48))
                assert s.error is None and s.objects == want.objects
                assert np.array_equal(decode_mask(s.mask, (64, 48)), want.mask)
                n += 1
        with tarfile.open(url) as t:  # plain readers see ordinary JSON and PNG members
            names = t.getnames()
            obj = json.loads(t.extractfile([x for x in names if x.endswith(".objects.json")][0]).read())
            assert set(obj) == {"boxes", "labels", "keypoints"}
            png = t.extractfile([x for x in names if x.endswith(".mask.png")][0]).read()
            assert Image.open(io.BytesIO(png)).mode == "L"
    assert n == 10


@settings(derandomize=True, deadline=None, max_examples=30, database=None, phases=[Phase.explicit, Phase.generate])
@given(drop=st.sampled_from(["objects.json", "mask.png"]), corrupt=st.booleans())
def test_a_sample_missing_or_breaking_a_declared_member_is_unusable(tmp_path_factory, drop, corrupt):
    root = write_scenes(str(tmp_path_factory.mktemp("s")), 3, size=(32, 24), shard_size=3)
    m = load_manifest(root)
    url = m.shard_url(0)
    with tarfile.open(url) as t:
        members = [(x, t.extractfile(x).read()) for x in t.getmembers()]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in members:
            if info.name == f"k000001.{drop}":
                if not corrupt:
                    continue
                data = b'{"boxes": [[1, 1, 0, 0]], "labels": [1]}' if drop == "objects.json" else data
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    with open(url, "wb") as f:
        f.write(buf.getvalue())
    reader = ShardReader(io.BytesIO(buf.getvalue()), url, rule=SampleRule.of(m))
    errors = [reader.read(j).error for j in range(3)]
    assert errors[0] is None and errors[2] is None
    if drop == "mask.png" and corrupt:
        assert errors[1] is None  # the PNG bytes are unchanged; a bad PNG fails at decode
    else:
        assert errors[1] is not None and ("missing field" in errors[1] or "reversed" in errors[1])
    assert os.path.exists(url)


def test_verify_counts_the_classes_of_boxes_and_mask_pixels(tmp_path):
    """A detection dataset's class_counts: per class, the samples holding it in a box or a mask pixel."""
    root = write_scenes(str(tmp_path), 8, size=(48, 40), shard_size=4)
    m = load_manifest(root)
    want = [0] * len(CLASSES)
    for i in range(8):
        s = scene(0, i, (48, 40))
        for c in set(s.objects.labels.tolist()) | {int(v) for v in np.unique(s.mask) if v != IGNORE}:
            want[c] += 1
    m.class_counts = want
    save_manifest(m, root)
    assert verify(root).ok, verify(root).problems
    m.class_counts = [want[0] + 1, *want[1:]]
    save_manifest(m, root)
    assert any("class counts" in str(p) for p in verify(root).problems)


@pytest.mark.parametrize("bad", ["object_beyond_count", "not_png", "wrong_size"])
def test_verify_reports_a_bad_instance_map_the_loader_skips(tmp_path, monkeypatch, bad):
    """verify checks `.instances.png` with the loader's rule: the sample it reports is the one the loader skips."""
    import io as _io

    from PIL import Image

    import shardkit
    from shardkit.demo import scenes as scenes_mod
    from shardkit.format.masks import instances_bytes

    calls = []

    def tampered(inst):
        calls.append(1)
        if len(calls) != 3:  # sample k000002
            return instances_bytes(inst)
        if bad == "not_png":
            return b"not a png at all"
        a = np.asarray(inst, np.int32) + 1
        a = a[:-4] if bad == "wrong_size" else np.where(a == a.max(), 40, a)  # 40 - 1: no such object
        buf = _io.BytesIO()
        Image.fromarray(a.astype(np.uint16)).save(buf, format="PNG")
        return buf.getvalue()

    monkeypatch.setattr(scenes_mod, "instances_bytes", tampered)
    root = write_scenes(str(tmp_path), 6, size=(48, 40), shard_size=3, instances=True)
    problems = verify(root).problems
    assert len(problems) == 1 and "k000002" in str(problems[0]) and "instances.png" in str(problems[0]), problems
    loader = shardkit.load(root, fields=("image", "key", "boxes", "instances"), size=32, batch_size=6, shuffle=False)
    keys = [k for b in loader for k in b["key"]]
    assert sorted(keys) == [f"k{i:06d}" for i in range(6) if i != 2]
