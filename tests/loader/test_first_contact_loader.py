"""First contact with the loader, as a new user meets it: ``shardkit bench`` on datasets without a class label and on
an empty split, and a script without a ``__main__`` guard iterating a loader with spawned workers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardkit.cli import main
from shardkit.demo.scenes import write_scenes
from shardkit.errors import ShardkitError
from shardkit.format.manifest import load_manifest
from shardkit.loader.bench import bench, bench_fields, decode_ceiling
from shardkit.loader.config import ImageConfig
from tests.support.data import write_dataset, write_fields_dataset
from tests.support.repo import ROOT

#: the batch fields each stored field gives (the reference: ``boxes`` are three fields, the rest one each)
_GIVES = {"boxes": ("boxes", "box_labels", "box_count")}
#: the order the fields are asked for
_ORDER = ("label", "labels", "target", "text", "boxes", "box_labels", "box_count", "keypoints", "mask", "instances")

KW = dict(workers=[0], batches=2, window=2, batch_size=4, size=32, max_s=3.0)


def _reference_fields(stored: list[str]) -> tuple[str, ...]:
    """What training on a dataset storing ``stored`` asks for: nothing (tuples) for image + label, else the image and
    every stored field."""
    if sorted(stored) == ["image", "label"]:
        return ()
    given = {g for f in stored if f != "image" for g in _GIVES.get(f, (f,))}
    return ("image", *(f for f in _ORDER if f in given))


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    return {
        "classes": write_dataset(str(root / "classes"), num_samples=12).url,
        "scenes": write_scenes(str(root / "scenes"), 12, size=(80, 60), shard_size=6),
        "boxes-only": write_scenes(str(root / "boxes"), 12, size=(60, 80), keypoints=False, mask=False),
        "instances": write_scenes(str(root / "inst"), 12, size=(64, 64), instances=True, keypoints=False),
        "captions": write_fields_dataset(str(root / "captions"), ["image", "text"], n=12),
        "multi-label": write_fields_dataset(str(root / "multi"), ["image", "labels", "target"], n=12),
    }


@pytest.mark.parametrize("kind", ["classes", "scenes", "boxes-only", "instances", "captions", "multi-label"])
@pytest.mark.parametrize("preset", ["train", "detect"])
def test_bench_measures_the_fields_each_dataset_stores(datasets, kind, preset):
    """Every dataset benches (no 'label' needed), loading the fields training would ask for, with the preset's crops."""
    url = datasets[kind]
    want = _reference_fields(list(load_manifest(url).fields))
    assert bench_fields(load_manifest(url)) == want
    r = bench(url, preset=preset, **KW)
    assert r.fields == want and r.points[0].images_per_s > 0 and r.decode_ceiling > 0
    assert (f"fields {', '.join(want)}" in r.format()) == bool(want)


def test_bench_cli_takes_the_detect_preset_and_fields(datasets, capsys):
    url = datasets["scenes"]
    args = ["bench", url, "--workers", "0", "--batches", "2", "--window", "2", "--batch-size", "4", "--size", "32"]
    assert main([*args, "--preset", "detect", "--max-seconds", "2"]) == 0
    assert "fields image, boxes, box_labels, box_count, keypoints, mask" in capsys.readouterr().out
    assert main([*args, "--fields", "image,box_count", "--max-seconds", "2"]) == 0
    assert "fields image, box_count)" in capsys.readouterr().out
    assert main([*args, "--fields", "image,label"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no 'label' field" in err[0] and "boxes" in err[0], err


def test_bench_of_an_empty_split_is_one_line(tmp_path, capsys):
    url = write_dataset(str(tmp_path / "empty"), num_samples=0).url
    assert main(["bench", url, "--workers", "0", "--batches", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no samples" in err[0] and "nothing to measure" in err[0] and url in err[0], err
    with pytest.raises(ShardkitError, match="has no samples to decode"):
        decode_ceiling(url, image=ImageConfig(size=16))


# --- a script without a __main__ guard, its loader's workers spawned --------------------------------------------

_SCRIPT = """
import sys

import shardkit

loader = shardkit.load(sys.argv[1], num_workers=1, batch_size=4, size=16, pin_memory=False, multiprocessing_context="{method}")
{loop}
"""
_LOOP = "n = sum(len(images) for images, _ in loader)\nprint('samples', n)"


def _run(tmp_path, url: str, method: str, loop: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train_it.py"
    script.write_text(_SCRIPT.format(method=method, loop=loop))
    return subprocess.run(
        [sys.executable, str(script), url],
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


@pytest.mark.timeout(200)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_script_without_main_guard_gets_one_line_saying_what_to_do(tmp_path, method):
    url = write_dataset(str(tmp_path / "ds"), num_samples=8).url
    p = _run(tmp_path, url, method, _LOOP)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in last and str(tmp_path / "train_it.py") in last, p.stderr
    assert "num_workers=0" in last and "died" not in p.stderr and p.stderr.count("Traceback") <= 1, p.stderr


@pytest.mark.timeout(200)
def test_script_with_the_loop_under_the_guard_runs_with_spawned_workers(tmp_path):
    """``load()`` at the top level is harmless (it starts no process); only the iteration needs the guard."""
    url = write_dataset(str(tmp_path / "ds"), num_samples=8).url
    p = _run(tmp_path, url, "spawn", 'if __name__ == "__main__":\n    ' + _LOOP.replace("\n", "\n    "))
    assert p.returncode == 0 and "samples 8" in p.stdout, p.stderr
