"""What a new user meets converting sources: splits whose files are all gone at read time, YOLO labels rounded at
their printed precision, one overlap rule for COCO masks and instance maps, messages that give the true reason
(duplicate paths, tar text), ``--no-label`` on class folders, and two conversions racing into one DEST."""

from __future__ import annotations

import json
import os
import tarfile
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert, merge
from shardkit.errors import ConvertError
from tests.support.data import jpeg_bytes, split_samples, tar_bytes

IMG = EncodeConfig(short_side=16)


def SETTINGS(n: int) -> settings:
    """Explicit examples first, then ``n`` generated ones, reproducibly."""
    return settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=n)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# --- every listed file missing at read time -------------------------------------------------------------------------


@SETTINGS(4)
@example(rows=[("train", False), ("train", False)])  # every file gone: nothing written, non-zero
@example(rows=[("train", True), ("val", False)])  # --split-col: a split whose only row is missing is not written
@given(rows=st.lists(st.tuples(st.sampled_from(["train", "val"]), st.booleans()), min_size=1, max_size=4))
def test_listing_files_missing_at_read_time_write_no_empty_split(tmp_path_factory, rows):
    base = str(tmp_path_factory.mktemp("miss"))
    lines = ["path,label,split"]
    for i, (split, present) in enumerate(rows):
        if present:
            _write(os.path.join(base, "img", f"{i}.jpg"), jpeg_bytes(i % 2, i))
        lines.append(f"img/{i}.jpg,{'ab'[i % 2]},{split}")
    listing = os.path.join(base, "list.csv")
    with open(listing, "w") as f:
        f.write("\n".join(lines) + "\n")
    dest = os.path.join(base, "out")
    want = {s: sorted(f"img/{i}.jpg" for i, (t, p) in enumerate(rows) if t == s and p) for s, _ in rows}
    opts = ConvertConfig(image=IMG, source=ScanConfig(split_col="split"))
    if not any(want.values()):
        with pytest.raises(ConvertError) as e:
            convert(listing, dest, opts, workers=1, quiet=True)
        msg = str(e.value)
        first = min(i for i, _ in enumerate(rows))
        assert "\n" not in msg and "no split has a sample" in msg and "nothing written" in msg
        assert os.path.join(base, "img", f"{first}.jpg") in msg and f"below {base}" in msg and "--root" in msg
        assert not os.path.exists(dest)
        return
    r = convert(listing, dest, opts, workers=1, quiet=True)
    by = {s.split: s for s in r.splits}
    for s, paths in want.items():
        if paths:
            assert by[s].written and sorted(
                g["json"]["path"] for g in split_samples(os.path.join(dest, s)).values()
            ) == [p for p in paths]
        else:
            assert not by[s].written and "missing_file" in by[s].empty and "--root" in by[s].empty
            assert not os.path.exists(os.path.join(dest, s))
    assert sorted(os.listdir(dest)) == sorted(s for s, p in want.items() if p)


def test_coco_with_a_wrong_root_exits_non_zero_writes_nothing_and_names_the_root(tmp_path, capsys):
    _write(str(tmp_path / "images" / "a.jpg"), jpeg_bytes(0, 0, (32, 24)))
    ann = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 32, "height": 24}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 8, 8]}],
        "categories": [{"id": 1, "name": "thing"}],
    }
    path = str(tmp_path / "ann.json")
    with open(path, "w") as f:
        json.dump(ann, f)
    wrong = str(tmp_path / "imagez")
    dest = str(tmp_path / "out")
    rc = main(["convert", f"coco:{path}", dest, "--root", wrong, "--quiet", "--workers", "1", "--short-side", "16"])
    err = capsys.readouterr().err
    assert rc != 0 and len(err.strip().splitlines()) == 1
    assert os.path.join(wrong, "a.jpg") in err and f"below {wrong}" in err and "nothing written" in err
    assert not os.path.exists(dest)


# --- YOLO: rounding at the printed precision; polygon lines' boxes are the extent of their points ----------------------


def _parse(lines: list[str], w: int, h: int) -> tuple[list[list[float]], dict[str, int]]:
    from shardkit.convert.scan.detection import Tally
    from shardkit.convert.scan.yolo import parse_label_file

    tally = Tally()
    boxes, _ = parse_label_file("\n".join(lines) + "\n", 3, w, h, tally)
    return boxes, tally.as_dict()


@st.composite
def _inside_box(draw: Any) -> tuple[float, float, float, float]:
    """A box ``(x0, y0, x1, y1)`` inside [0, 1], often touching a border."""
    out = []
    for _ in range(2):
        a = draw(st.one_of(st.just(0.0), st.floats(0.0, 0.9)))
        b = draw(st.one_of(st.just(1.0), st.floats(a + 0.05, 1.0))) if a < 0.95 else 1.0
        out.append((a, b))
    (x0, x1), (y0, y1) = out
    return x0, y0, x1, y1


@SETTINGS(60)
@example(boxes=[(0.805907, 0.2, 1.0, 0.6)], places=6, w=640, h=480)  # 0.902954 + 0.194093 / 2 = 1.0000005
@example(boxes=[(0.0, 0.0, 1.0, 1.0), (0.0, 0.5, 0.123456789, 1.0)], places=4, w=33, h=17)
@given(
    boxes=st.lists(_inside_box(), min_size=1, max_size=4),
    places=st.integers(4, 8),
    w=st.integers(8, 4000),
    h=st.integers(8, 4000),
)
def test_yolo_boxes_inside_the_image_printed_at_any_precision_are_never_clipped(boxes, places, w, h):
    lines = []
    for x0, y0, x1, y1 in boxes:
        cx, cy, bw, bh = (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0
        lines.append("0 " + " ".join(f"{v:.{places}f}" for v in (cx, cy, bw, bh)))
    got, counts = _parse(lines, w, h)
    assert counts.get("clipped", 0) == 0, (lines, counts)
    assert counts["kept"] == len(boxes) - counts.get("degenerate_box", 0)
    for b in got:
        assert 0 <= b[0] < b[2] <= w and 0 <= b[1] < b[3] <= h


@SETTINGS(40)
@example(over=2, places=6, side=1)
@given(over=st.integers(2, 50), places=st.integers(4, 8), side=st.integers(0, 3))
def test_yolo_boxes_outside_by_more_than_the_precision_are_clipped(over, places, side):
    u = 10.0**-places
    x0, y0, x1, y1 = 0.25, 0.25, 0.75, 0.75
    if side == 0:
        x0 = -over * u
    elif side == 1:
        x1 = 1 + over * u
    elif side == 2:
        y0 = -over * u
    else:
        y1 = 1 + over * u
    cx, cy, bw, bh = (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0
    got, counts = _parse(["1 " + " ".join(f"{v:.{places}f}" for v in (cx, cy, bw, bh))], 640, 480)
    assert counts == {"kept": 0, "clipped": 1} or counts == {"clipped": 1}, counts
    assert len(got) == 1


@SETTINGS(60)
@example(points=[(0.1, 0.1), (0.9, 0.2), (0.8, 0.3)], w=100, h=50)  # centroid (0.6, 0.2) is not the extent's centre
@given(
    points=st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)), min_size=3, max_size=9),
    w=st.integers(8, 2000),
    h=st.integers(8, 2000),
)
def test_yolo_polygon_line_box_is_the_extent_of_its_points(points, w, h):
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    line = "2 " + " ".join(f"{x!r} {y!r}" for x, y in points)
    got, counts = _parse([line], w, h)
    if max(xs) - min(xs) <= 1e-6 or max(ys) - min(ys) <= 1e-6:
        return  # a line or a point: degenerate, not this oracle's business
    want = [min(xs) * w, min(ys) * h, max(xs) * w, max(ys) * h]
    assert counts.get("clipped", 0) == 0 and len(got) == 1
    assert np.allclose(got[0], want, rtol=0, atol=1e-6 * max(w, h)), (got, want)


# --- COCO: one overlap rule for the mask and the instance map ----------------------------------------------------------


def _reference_mask(segments: list, w: int, h: int) -> np.ndarray:
    """Per pixel, brute force: the class of the covering segment with the fewest pixels (ties: the later), crowds 255."""
    from shardkit.convert.segments import segment_region

    regions = [segment_region(s, w, h) for s in segments]
    sizes = [int(r.sum()) for r in regions]
    out = np.zeros((h, w), np.uint8)
    for y in range(h):
        for x in range(w):
            best = None
            for k, r in enumerate(regions):
                if r[y, x] and (best is None or sizes[k] <= sizes[best]):
                    best = k
            if best is not None:
                out[y, x] = 255 if segments[best].crowd else segments[best].label
    return out


@st.composite
def _segments(draw: Any, w: int, h: int) -> list:
    from shardkit.convert.segments import Segment

    out = []
    for _ in range(draw(st.integers(1, 5))):
        x0, y0 = draw(st.integers(0, w - 2)), draw(st.integers(0, h - 2))
        x1, y1 = draw(st.integers(x0 + 1, w)), draw(st.integers(y0 + 1, h))
        if draw(st.booleans()):
            poly = (float(x0), float(y0), float(x1), float(y0), float(x1), float(y1), float(x0), float(y1))
        else:  # a triangle-ish polygon
            poly = (float(x0), float(y0), float(x1), (y0 + y1) / 2, x0 + 0.5, float(y1))
        out.append(Segment(draw(st.integers(1, 3)), draw(st.booleans()) and draw(st.booleans()), (poly,)))
    return out


@SETTINGS(40)
@given(data=st.data(), w=st.integers(4, 14), h=st.integers(4, 14))
def test_coco_mask_and_instances_name_the_same_object_on_every_pixel(data, w, h):
    from shardkit.convert.segments import Segment, instance_map, semantic_mask

    segs = data.draw(_segments(w, h))
    mask, rows = semantic_mask(segs, w, h), instance_map(segs, w, h)
    assert (mask == _reference_mask(segs, w, h)).all()
    cls = np.array([255 if s.crowd else s.label for s in segs] + [0], np.uint8)
    assert (mask == cls[rows]).all()
    del Segment


def test_coco_a_small_object_listed_first_stays_on_top_in_the_mask():
    from shardkit.convert.segments import Segment, instance_map, semantic_mask

    small = Segment(1, False, ((2.0, 2.0, 4.0, 2.0, 4.0, 4.0, 2.0, 4.0),))
    large = Segment(2, False, ((0.0, 0.0, 8.0, 0.0, 8.0, 8.0, 0.0, 8.0),))
    mask = semantic_mask([small, large], 8, 8)
    assert mask[3, 3] == 1 and mask[0, 0] == 2 and instance_map([small, large], 8, 8)[3, 3] == 0


def _coco_masks(tmp_path: Any) -> str:
    _write(str(tmp_path / "a.jpg"), jpeg_bytes(0, 0, (32, 24)))
    _write(str(tmp_path / "b.jpg"), jpeg_bytes(1, 1, (32, 24)))
    ann = {
        "images": [
            {"id": 1, "file_name": "a.jpg", "width": 32, "height": 24},
            {"id": 2, "file_name": "b.jpg", "width": 32, "height": 24},
        ],
        "annotations": [
            {"id": i + 1, "image_id": 1 + i % 2, "category_id": 1 + i % 2, "bbox": [2, 2, 8 + i, 8],
             "segmentation": [[2, 2, 10 + i, 2, 10 + i, 10, 2, 10]]}
            for i in range(4)
        ],
        "categories": [{"id": 1, "name": "cup"}, {"id": 2, "name": "table"}],
    }  # fmt: skip
    path = str(tmp_path / "ann.json")
    with open(path, "w") as f:
        json.dump(ann, f)
    return path


def test_a_half_done_conversion_painted_in_annotation_order_is_not_resumed_into(tmp_path):
    from shardkit.convert import journal

    path = _coco_masks(tmp_path)
    dest = str(tmp_path / "out")
    opts = ConvertConfig(image=IMG, shard_size=1, source=ScanConfig(masks=True))
    convert(f"coco:{path}", dest, opts, workers=1, quiet=True, num_tasks=2, task_index=0)
    split = os.path.join(dest, "train")
    p = journal.read_plan(split)
    assert p is not None and p.overlap == journal.OVERLAP_RULE
    # the same half-done conversion as a writer painting in annotation order left it: no overlap rule recorded
    old = journal.Plan(**{**p.__dict__, "overlap": ""})
    _write(journal.journal_url(split, journal.PLAN_NAME), old.to_json())
    work = journal.journal_url(split)
    for name in os.listdir(work):
        if name.endswith(".json") and name != journal.PLAN_NAME:
            rec = json.load(open(os.path.join(work, name)))
            rec["fingerprint"] = old.fingerprint
            _write(os.path.join(work, name), json.dumps(rec).encode())
    with pytest.raises(ConvertError, match="overlapping objects were painted in annotation order"):
        convert(f"coco:{path}", dest, opts, workers=1, quiet=True, num_tasks=2, task_index=1)


# --- messages: duplicate paths, tar text ----------------------------------------------------------------------------


def test_a_path_listed_relative_and_absolute_is_a_duplicate_path_not_a_symlink(tmp_path, capsys):
    _write(str(tmp_path / "img" / "a.jpg"), jpeg_bytes(0, 0))
    _write(str(tmp_path / "img" / "b.jpg"), jpeg_bytes(1, 1))
    os.symlink(str(tmp_path / "img" / "b.jpg"), str(tmp_path / "img" / "c.jpg"))
    listing = str(tmp_path / "list.csv")
    with open(listing, "w") as f:
        f.write(f"path,label\nimg/a.jpg,x\n{tmp_path}/img/a.jpg,x\nimg/b.jpg,y\n")
    rc = main(["convert", listing, str(tmp_path / "out"), "--root", str(tmp_path), "--quiet", "--workers", "1"])
    out, err = capsys.readouterr()
    assert rc == 0 and "symlink" not in err and "1 duplicate_path" in out
    with open(listing, "a") as f:
        f.write("img/c.jpg,y\n")  # really through a symlink
    rc = main(["convert", listing, str(tmp_path / "out2"), "--root", str(tmp_path), "--quiet", "--workers", "1"])
    out, err = capsys.readouterr()
    assert rc == 0 and "1 paths lead through symlinks" in err and "1 duplicate_file" in out


def test_tar_samples_without_their_text_member_are_no_text_not_a_label_puzzle(tmp_path):
    members = []
    for i in range(6):
        label = i % 2
        members.append((f"s{i:03d}.jpg", jpeg_bytes(label, i)))
        members.append((f"s{i:03d}.cls", str(label).encode()))
        if label == 1:  # the label-0 samples have no caption
            members.append((f"s{i:03d}.txt", f"caption {i}".encode()))
    tar = str(tmp_path / "data.tar")
    _write(tar, tar_bytes(members))
    with pytest.raises(ConvertError) as e:
        convert(tar, str(tmp_path / "out"), ConvertConfig(image=IMG, source=ScanConfig(text_key="txt")), workers=1)
    msg = str(e.value)
    assert "\n" not in msg and "3 samples were skipped for their text" in msg
    assert "data.tar/s000000: the sample has no .txt member" in msg or "the sample has no .txt member" in msg


# --- --no-label on class folders ------------------------------------------------------------------------------------


def test_no_label_on_an_imagefolder_stores_no_label(tmp_path):
    from shardkit.demo.sampledata import make_imagefolder

    src = make_imagefolder(str(tmp_path / "src"), num_classes=2, per_class=2)
    r = convert(
        src, str(tmp_path / "out"), ConvertConfig(image=IMG, source=ScanConfig(labelled=False)), workers=1, quiet=True
    )
    (s,) = r.splits
    assert s.manifest is not None and s.manifest.fields == ["image"] and s.manifest.classes == []
    with tarfile.open(os.path.join(str(tmp_path / "out"), "train", s.manifest.shards[0].name)) as t:
        exts = {m.name.split(".", 1)[1] for m in t.getmembers()}
    assert exts == {"jpg", "json"}, exts
    with pytest.raises(ConvertError, match="--no-label and --label-regex"):
        convert(
            src, str(tmp_path / "o2"), ConvertConfig(image=IMG, source=ScanConfig(labelled=False, label_regex="(c)"))
        )


# --- two conversions racing into one DEST ---------------------------------------------------------------------------


def test_two_conversions_racing_into_one_dest_name_the_owner_in_the_losing_task_and_in_merge(tmp_path, monkeypatch):
    from shardkit.convert import job, journal
    from shardkit.demo.sampledata import make_imagefolder

    a = make_imagefolder(str(tmp_path / "a"), num_classes=2, per_class=3)
    b = make_imagefolder(str(tmp_path / "b"), num_classes=2, per_class=4, seed=1)
    opts = ConvertConfig(image=IMG, shard_size=2)
    other = str(tmp_path / "other")
    convert(b, other, opts, workers=1, quiet=True, num_tasks=2, task_index=0)
    b_plan = open(journal.journal_url(os.path.join(other, "train"), journal.PLAN_NAME), "rb").read()
    dest = str(tmp_path / "out")
    run = job.SplitJob.run

    def raced(self: Any, *args: Any, **kw: Any) -> Any:  # the other conversion's task writes its plan meanwhile
        out = run(self, *args, **kw)
        _write(journal.journal_url(self.url, journal.PLAN_NAME), b_plan)
        return out

    monkeypatch.setattr(job.SplitJob, "run", raced)
    with pytest.raises(ConvertError) as e:
        convert(a, dest, opts, workers=1, quiet=True, num_tasks=2, task_index=1)
    msg = str(e.value)
    fp_b = journal.Plan.from_json(b_plan, "b").fingerprint
    assert "another conversion took DEST" in msg and fp_b[:12] in msg and b in msg and "will not be merged" in msg
    with pytest.raises(ConvertError) as e:
        merge(dest)
    msg = str(e.value)
    assert "written by another conversion" in msg and fp_b[:12] in msg and b in msg and "not converted yet" not in msg
