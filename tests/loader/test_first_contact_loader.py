"""First contact with the loader, as a new user meets it: ``shardkit bench`` on datasets without a class label and on
an empty split, and a script without a ``__main__`` guard iterating a loader with spawned workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit import Source
from shardkit.cli import main
from shardkit.demo.scenes import write_scenes
from shardkit.errors import ShardkitError
from shardkit.format.manifest import load_manifest
from shardkit.loader.config import ImageConfig
from shardkit.ops.bench import bench, bench_fields, decode_ceiling
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


# --- mixtures: a source that takes nothing, sources given in another order ----------------------------------------


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    return write_dataset(str(root / "a"), num_samples=40, shard_size=8).url, write_dataset(
        str(root / "b"), num_samples=12, shard_size=5
    ).url


_SPEC = st.one_of(
    st.builds(lambda v: {"weight": v}, st.sampled_from([0, 0.0, 0.5, 1, 3])),
    st.builds(lambda v: {"repeat": v}, st.sampled_from([0, 0.0, 0.5, 1, 2])),
    st.builds(lambda v: {"choose": v}, st.integers(1, 9)),
)


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=60)
@given(specs=st.lists(_SPEC, min_size=2, max_size=4))
@example(specs=[{"weight": 1}, {"weight": 0}])
@example(specs=[{"weight": 1}, {"repeat": 0}])
def test_a_source_of_several_that_takes_no_samples_is_refused_in_one_line(specs):
    """What a user means by ``weight=0``: no samples from it, so no share of the epoch size and no classes. A source
    of several with weight or repeat 0 is refused, naming it and the fix; every other list is accepted."""
    from shardkit.plan import as_sources

    sources = [Source(f"s{i}", **spec) for i, spec in enumerate(specs)]
    zero = [i for i, spec in enumerate(specs) if next(iter(spec.values())) == 0 and "choose" not in spec]
    takes = [i for i in range(len(specs)) if i not in zero]
    if not zero:
        assert as_sources(sources) == tuple(sources)
        return
    with pytest.raises(ValueError) as e:
        as_sources(sources)
    line = str(e.value)
    assert "\n" not in line
    weights = [s["weight"] for s in specs if "weight" in s]
    if weights and not any(weights):
        assert "all weights are 0" in line
    elif not takes:
        assert "the epoch would be empty" in line
    else:
        assert f"source {zero[0]} ('s{zero[0]}')" in line and "leave it out of the list" in line, line


def test_weight_zero_leaves_nothing_to_the_epoch_in_the_real_loader(two):
    a, b = two
    with pytest.raises(ValueError, match=r"source 1 \(.*\): weight=0 takes no samples.*leave it out of the list"):
        shardkit.load([Source(a, weight=1), Source(b, weight=0)], batch_size=4, size=16, num_workers=0)
    assert len(shardkit.load([Source(a, weight=1)], batch_size=4, size=16, num_workers=0)) == 10  # without it: 40


def test_resume_with_the_sources_reordered_names_the_checkpoints_order(two):
    a, b = two
    opts = dict(batch_size=4, size=16, num_workers=0, seed=3, pin_memory=False)
    loader = shardkit.load([Source(a, weight=0.5), Source(b, weight=0.5)], **opts)
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    with pytest.raises(ShardkitError) as e:
        shardkit.load([Source(b, weight=0.5), Source(a, weight=0.5)], **opts).load_state_dict(state)
    line = str(e.value)
    assert "\n" not in line and "same sources in another order" in line and f"[{a}, {b}]" in line, line
    assert "other data" not in line
    shardkit.load([Source(a, weight=0.5), Source(b, weight=0.5)], **opts).load_state_dict(state)  # its order resumes
