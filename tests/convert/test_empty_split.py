"""A split that ends up with no sample (an HF split whose every label is -1, --val-fraction rounding a split to zero):
the other splits are converted and the empty one is reported with its skips, not written; if every split is empty,
one line names them and nothing is written (decided before anything is written)."""

from __future__ import annotations

import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert, merge
from shardkit.demo.sampledata import make_image, make_imagefolder
from shardkit.errors import ConvertError
from shardkit.ops.verify import verify
from tests.support.data import split_samples

datasets = pytest.importorskip("datasets")

IMG = EncodeConfig(short_side=16)
NAMES = ["ant", "bee"]


def _png(label: int, seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(make_image(label, seed, (20, 16))).save(buf, format="PNG")
    return buf.getvalue()


def _split(labels: list[int]):
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)})
    return datasets.Dataset.from_dict(
        {"image": [{"bytes": _png(max(y, 0), i), "path": None} for i, y in enumerate(labels)], "label": labels},
        features=features,
    )


def _dd(**splits: list[int]):
    return datasets.DatasetDict({name: _split(labels) for name, labels in splits.items()})


def test_hf_test_split_of_all_minus_one_is_reported_and_the_others_converted(tmp_path):
    dest = str(tmp_path / "out")
    r = convert(
        _dd(train=[0, 1, 0, 1, 1], test=[-1, -1, -1]),
        dest,
        ConvertConfig(image=IMG, shard_size=2),
        workers=1,
        quiet=True,
    )
    by = {s.split: s for s in r.splits}
    assert sorted(by) == ["test", "train"]
    assert by["train"].written and by["train"].manifest is not None and by["train"].converted == 5
    t = by["test"]
    assert not t.written and t.manifest is None and t.converted == 0
    assert t.skipped == 3 and t.skipped_reasons == {"no_label": 3}
    assert [(f.path, f.reason) for f in t.skipped_files] == [(f"row-{i:08d}", "no_label") for i in range(3)]
    assert "3 skipped: 3 no_label" in t.empty
    assert r.complete and r.converted == 5 and r.skipped == 3
    assert sorted(os.listdir(dest)) == ["train"]  # nothing at all for the empty split
    assert verify(dest, quiet=True).ok
    assert len(split_samples(os.path.join(dest, "train"))) == 5


def test_cli_summary_names_the_empty_split_and_its_skips(tmp_path, capsys, monkeypatch):
    path = str(tmp_path / "hf")
    _dd(train=[0, 1, 1], test=[-1, -1]).save_to_disk(path)
    rc = main(["convert", f"hf:{path}", str(tmp_path / "out"), "--quiet", "--workers", "1", "--short-side", "16"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "test: no samples (2 skipped: 2 no_label), not written" in out
    assert "train: 3 samples" in out


def test_every_split_empty_is_one_line_and_writes_nothing(tmp_path, capsys):
    dest = str(tmp_path / "out")
    with pytest.raises(ConvertError) as e:
        convert(_dd(train=[-1, -1], test=[-1]), dest, ConvertConfig(image=IMG), workers=1, quiet=True)
    msg = str(e.value)
    assert "\n" not in msg and "no split has a sample" in msg
    assert "test (1 skipped: 1 no_label)" in msg and "train (2 skipped: 2 no_label)" in msg
    assert not os.path.exists(dest)


def test_a_source_whose_every_split_is_empty_is_refused_by_the_job_too(tmp_path, monkeypatch):
    """The sources refuse first today; the job's own check stays for any source that returns only empty splits."""
    from shardkit.convert import job
    from shardkit.convert.imageproc import SkipReason
    from shardkit.convert.scan.source import Reader, ScannedSource, SplitSource

    src = ScannedSource(
        root="made-up",
        classes=["a"],
        nested=True,
        reader=Reader(str(tmp_path)),
        splits=[
            SplitSource("train", "made-up", [], [("x.png", SkipReason.NO_LABEL, "no label")]),
            SplitSource("val", "made-up", [], [("y.png", SkipReason.BAD_LABEL, "bad")]),
        ],
    )
    monkeypatch.setattr(job, "_discover", lambda *a, **k: src)
    dest = str(tmp_path / "out")
    with pytest.raises(ConvertError) as e:
        convert("made-up", dest, ConvertConfig(image=IMG), workers=1, quiet=True)
    msg = str(e.value)
    assert (
        "\n" not in msg
        and "no split has a sample" in msg
        and "train (1 skipped: 1 no_label)" in msg
        and "val (1 skipped: 1 bad_label)" in msg
    )
    assert not os.path.exists(dest)


def test_val_fraction_rounding_val_to_zero_converts_train_and_reports_val(tmp_path):
    src = make_imagefolder(str(tmp_path / "src"), num_classes=2, per_class=3)
    dest = str(tmp_path / "out")
    r = convert(src, dest, ConvertConfig(image=IMG, val_fraction=0.1), workers=1, quiet=True)
    by = {s.split: s for s in r.splits}
    assert by["train"].written and by["train"].manifest.num_samples == 6
    assert not by["val"].written and by["val"].skipped == 0 and "--val-fraction" in by["val"].empty
    assert r.complete and sorted(os.listdir(dest)) == ["train"]


def test_multi_task_conversion_with_an_empty_split_merges(tmp_path):
    dd = _dd(train=[0, 1, 0, 1, 1, 0], test=[-1, -1])
    dest = str(tmp_path / "out")
    for i in (1, 0):
        r = convert(dd, dest, ConvertConfig(image=IMG, shard_size=2), workers=1, quiet=True, num_tasks=2, task_index=i)
        assert not r.complete and [s.split for s in r.splits if not s.written] == ["test"]
    assert [m.split for m in merge(dest)] == ["train"]


def test_an_earlier_conversion_of_a_split_that_is_empty_now_is_not_left_behind_silently(tmp_path):
    dest = str(tmp_path / "out")
    convert(_dd(train=[0, 1], test=[0, 1]), dest, ConvertConfig(image=IMG), workers=1, quiet=True)
    with pytest.raises(ConvertError, match=r"test.*earlier conversion.*--overwrite"):
        convert(_dd(train=[0, 1], test=[-1, -1]), dest, ConvertConfig(image=IMG), workers=1, quiet=True)
    r = convert(_dd(train=[0, 1], test=[-1, -1]), dest, ConvertConfig(image=IMG), workers=1, quiet=True, overwrite=True)
    assert r.complete and not os.path.exists(os.path.join(dest, "test", "manifest.json"))
    assert verify(dest, quiet=True).ok and verify(dest, quiet=True).splits == 1


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    st.dictionaries(
        st.sampled_from(["test", "train", "validation"]),
        st.lists(st.sampled_from([-1, -1, 0, 1]), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_oracle_every_row_is_a_sample_or_a_skip_and_empty_splits_write_nothing(tmp_path_factory, splits):
    dest = str(tmp_path_factory.mktemp("o") / "out")
    want = {name: [(f"row-{i:08d}", y) for i, y in enumerate(labels) if y >= 0] for name, labels in splits.items()}
    if not any(want.values()):
        with pytest.raises(ConvertError, match="no split has a sample"):
            convert(_dd(**splits), dest, ConvertConfig(image=IMG), workers=1, quiet=True)
        assert not os.path.exists(dest)
        return
    r = convert(_dd(**splits), dest, ConvertConfig(image=IMG, shard_size=3), workers=1, quiet=True)
    by = {s.split: s for s in r.splits}
    assert sorted(by) == sorted(splits) and r.complete
    for name, labels in splits.items():
        s = by[name]
        assert s.skipped == sum(y < 0 for y in labels)
        if want[name]:
            got = sorted((g["json"]["path"], g["cls"]) for g in split_samples(os.path.join(dest, name)).values())
            assert s.written and got == want[name]
        else:
            assert not s.written and not os.path.exists(os.path.join(dest, name))
    assert sorted(os.listdir(dest)) == sorted(n for n in splits if want[n])
