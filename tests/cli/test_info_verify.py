"""`shardkit info` / `verify` (library and CLI), S3 round trip on moto, CLI errors: exit 2, one line, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.demo.sampledata import make_imagefolder
from shardkit.format.manifest import load_manifest
from shardkit.ops.verify import info, verify

OPTS = ConvertConfig(image=EncodeConfig(short_side=40), shard_size=7, seed=1)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_imagefolder(
        str(tmp_path_factory.mktemp("src") / "splits"), num_classes=3, per_class=5, splits={"train": 5, "val": 2}
    )


@pytest.fixture()
def ds(tmp_path, src):
    dest = str(tmp_path / "ds")
    convert(src, dest, OPTS, workers=1, quiet=True)
    return dest


def test_info_library_and_cli(ds, capsys):
    splits = info(ds)
    assert [(s.split, s.samples, s.shards) for s in splits] == [("train", 15, 3), ("val", 6, 1)]
    assert splits[0].class_counts == [5, 5, 5] and splits[0].mean_sample_bytes > 1000
    assert main(["info", ds, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[1]["classes"] == {"circle": 2, "square": 2, "stripes": 2} and out[0]["options"]["short_side"] == 40
    assert main(["info", os.path.join(ds, "val")]) == 0
    text = capsys.readouterr().out
    assert "split val: 6 samples, 3 classes, 1 shards" in text and "stripes: 2" in text


def test_verify_clean_and_corrupted(ds, capsys):
    assert verify(ds).ok
    assert main(["verify", ds, "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("OK: samples in 4 shards, 21 samples")
    shard = os.path.join(ds, "train", "train-000001.tar")
    data = bytearray(open(shard, "rb").read())
    first_jpeg = data.index(b"\xff\xd8\xff")
    data[first_jpeg : first_jpeg + 2] = b"\x00\x00"  # break the JPEG start marker of one sample
    open(shard, "wb").write(bytes(data))
    report = verify(ds)
    msgs = [str(p) for p in report.problems]
    assert any("train/train-000001.tar key" in m and "does not decode" in m for m in msgs), msgs
    assert any("sha256 does not match" in m for m in msgs)
    quick = verify(ds, quick=True)  # and the sample index's checksum names the damaged sample
    assert [p.message for p in quick.problems if "CRC32C" not in p.message] == [
        "sha256 does not match the manifest (the shard changed or is damaged)"
    ]
    assert [(p.shard, p.key) for p in quick.problems if "CRC32C" in p.message] == [
        ("train/train-000001.tar", next(p.key for p in report.problems if "does not decode" in p.message))
    ]
    os.remove(os.path.join(ds, "val", "val-000000.tar"))
    assert main(["verify", ds, "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "val/val-000000.tar: shard is missing" in out and "problem(s)" in out


@pytest.mark.slow
def test_s3_convert_info_verify(s3, s3_endpoint, src, capsys):
    opts, bucket = s3
    url = f"s3://{bucket}/ds"
    result = convert(src, url, OPTS, workers=1, quiet=True, storage_options=opts)
    assert result.complete and result.converted == 21
    m = load_manifest(f"{url}/train", **opts)
    assert m.num_samples == 15 and m.url == f"{url}/train/manifest.json"
    assert verify(url, **opts).ok
    again = convert(src, url, OPTS, workers=1, quiet=True, storage_options=opts)
    assert again.converted == 0 and sum(s.shards_resumed for s in again.splits) == 4
    assert main(["info", url, "--endpoint-url", s3_endpoint, "--json"]) == 0
    assert [s["samples"] for s in json.loads(capsys.readouterr().out)] == [15, 6]
    assert main(["verify", url, "--endpoint-url", s3_endpoint, "--quiet"]) == 0
    assert "OK" in capsys.readouterr().out
    _s3_incomplete_split_is_a_problem_exit_1(url, opts, s3_endpoint, capsys)


def _s3_incomplete_split_is_a_problem_exit_1(url, opts, s3_endpoint, capsys):
    """On object storage too: a split without its manifest is named, with the command that finishes it."""
    import s3fs

    fs = s3fs.S3FileSystem(**opts)
    bucket_path = url[len("s3://") :]
    fs.rm(f"{bucket_path}/val/manifest.json")  # as after Ctrl-C while val was being written
    report = verify(url, **opts)
    assert [p.shard for p in report.problems] == ["val/"], report.problems
    assert "incomplete conversion" in report.problems[0].message and "shardkit convert" in report.problems[0].message
    assert main(["verify", url, "--endpoint-url", s3_endpoint, "--quiet"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("val/: incomplete conversion") and "1 problem(s)" in out
    assert (
        main(["info", url, "--endpoint-url", s3_endpoint]) == 0 and "incomplete conversion" in capsys.readouterr().err
    )
    # the split folder itself, and a split with nothing finished: still named, exit 1 (not "no manifest here", exit 2)
    assert main(["verify", f"{url}/val", "--endpoint-url", s3_endpoint, "--quiet"]) == 1
    assert capsys.readouterr().out.startswith("./: incomplete conversion")
    fs.rm(f"{bucket_path}/train/manifest.json")
    assert [p.shard for p in verify(url, **opts).problems] == ["train/", "val/"]
    assert main(["info", url, "--endpoint-url", s3_endpoint]) == 2
    assert "no finished split" in capsys.readouterr().err


def _error_cases(tmp_path, src):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    no_images = tmp_path / "noimg"
    (no_images / "cat").mkdir(parents=True)
    (no_images / "cat" / "a.txt").write_text("x")
    bad_version = tmp_path / "v99"
    bad_version.mkdir()
    (bad_version / "manifest.json").write_text(json.dumps({"format": "shardkit-manifest", "version": 99}))
    taken = tmp_path / "taken"
    convert(src, str(taken), OPTS, workers=1, quiet=True)
    return [
        (["convert", str(tmp_path / "missing"), str(tmp_path / "o1")], "does not exist"),
        (["convert", str(a_file), str(tmp_path / "o2")], "not a folder"),
        (["convert", str(empty), str(tmp_path / "o3")], "no class folders"),
        (["convert", str(no_images), str(tmp_path / "o4")], "no images found"),
        (["convert", src, str(a_file / "sub")], "cannot"),
        (
            ["convert", src, str(taken), "--short-side", "40", "--shard-size", "7", "--seed", "2"],
            "different conversion",
        ),
        (["convert", src, str(tmp_path / "o5"), "--quality", "100"], "quality"),
        (["convert", src, "gs://bucket/ds"], "shardkit[gcs]"),
        (["info", str(bad_version)], "version 99"),
        (["info", str(empty)], "no manifest.json"),
        (["verify", str(tmp_path / "nowhere")], "no manifest.json"),
        (["merge", str(empty)], "no conversion found"),
    ]


def test_cli_errors_are_one_line_exit_2(tmp_path, src, capsys):
    pytest.importorskip("s3fs")
    for argv, needle in _error_cases(tmp_path, src):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err, (argv, err)
        assert err.startswith(f"shardkit {argv[0]}: error: ")


def test_cli_error_in_a_real_process(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "shardkit", "convert", str(tmp_path / "nope"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        r.returncode == 2 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    )


def test_cli_convert_and_merge_summary(tmp_path, src, capsys):
    dest = str(tmp_path / "ds")
    for i in range(2):
        assert (
            main(
                [
                    "convert",
                    src,
                    dest,
                    "--short-side",
                    "40",
                    "--shard-size",
                    "7",
                    "--quiet",
                    "--workers",
                    "1",
                    "--num-tasks",
                    "2",
                    "--task-index",
                    str(i),
                ]
            )
            == 0
        )
        assert "shardkit merge" in capsys.readouterr().out
    assert main(["merge", dest]) == 0
    out = capsys.readouterr().out
    assert "train: 15 samples in 3 shards" in out and "val: 6 samples in 1 shards" in out
    assert main(["convert", src, dest, "--short-side", "40", "--shard-size", "7", "--quiet", "--workers", "1"]) == 0
    assert "converted 0 images, skipped 0 files, kept 4 finished shards" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_storage_backend_failure_is_one_line(tmp_path):
    """An unreachable S3 endpoint (a closed port on 127.0.0.1) is a one-line error, exit 2, no traceback."""
    import os
    import subprocess
    import sys

    from tests.support.faults import free_port

    env = dict(
        os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_EC2_METADATA_DISABLED="true"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardkit",
            "info",
            "s3://bucket/ds",
            "--endpoint-url",
            f"http://127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardkit info: error:") and "s3://bucket/ds" in lines[0], out.stderr


def test_one_damaged_split_manifest_is_a_problem_and_the_other_splits_are_checked(ds, capsys):
    """A damaged val/manifest.json: verify names it (exit 1) and still checks train; info shows train and warns."""
    with open(os.path.join(ds, "val", "manifest.json"), "w") as f:
        f.write("{not json")
    report = verify(ds)
    assert [p.shard for p in report.problems] == ["val/manifest.json"] and "not valid JSON" in report.problems[
        0
    ].message
    assert report.samples == 15 and report.splits == 2
    assert main(["verify", ds, "--quiet"]) == 1
    assert capsys.readouterr().out.startswith("val/manifest.json: ")
    assert main(["info", ds]) == 0
    out, err = capsys.readouterr()
    assert "split train: 15 samples" in out and "not valid JSON" in err
    with pytest.raises(Exception, match="not valid JSON"):
        info(ds)  # the library call does not drop a split silently
    shutil.rmtree(os.path.join(ds, "train"))
    assert main(["info", ds]) == 2  # nothing else left: the manifest's own error, one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "val/manifest.json: not valid JSON" in err


def test_verify_reports_images_the_loader_skips_for_their_pixel_count(ds, capsys):
    """An image over the loader's max_pixels is skipped by the loader, so it is a verify problem (default: the loader's)."""
    import shardkit
    from shardkit.loader.config import ImageConfig

    small = verify(ds, max_pixels=100)  # every converted image (short side 40) declares more
    assert len(small.problems) == 21 and all("the loader skips it (max_pixels 100" in p.message for p in small.problems)
    loader = shardkit.load(
        os.path.join(ds, "val"), batch_size=4, num_workers=0, max_pixels=100, pin_memory=False, size=16
    )
    assert sum(len(b[1]) for b in loader) == 0 and loader.stats.skipped == 6  # what verify said
    assert verify(ds).ok and ImageConfig.max_pixels == EncodeConfig.max_pixels  # one default: what converts also loads
    assert main(["verify", os.path.join(ds, "val"), "--quiet", "--max-pixels", "100"]) == 1
    assert "6 problem(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["verify", ds, "--max-pixels", "0"])
