"""The streaming loader end to end: exactly once over ranks x workers, order, resume, sources, bad data."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import Counter

import pytest
import torch

import shardkit
from shardkit.errors import DataError, ManifestError, ShardkitError, StorageError
from shardkit.format import EncodedSample
from tests.support.data import jpeg_bytes, write_dataset, write_samples
from tests.support.probes import wait_for
from tests.support.resume import check_resume

SMALL = dict(size=16, pin_memory=False, multiprocessing_context="fork")


def run_rank(url, rank, world_size, **kw):
    """All batches of one rank for one epoch: list of key lists."""
    loader = shardkit.load(url, rank=rank, world_size=world_size, with_keys=True, **{**SMALL, **kw})
    return loader, [list(k) for _, _, k in loader]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader")
    return {
        "few_shards": write_dataset(str(root / "few"), num_samples=36, shard_size=18, size=(24, 20)),
        "many_shards": write_dataset(str(root / "many"), num_samples=36, shard_size=2, size=(24, 20)),
    }


@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("which", ["few_shards", "many_shards"])
def test_exactly_once_over_ranks_and_workers(datasets, which, world_size, num_workers):
    ds = datasets[which]
    seen, counts = Counter(), []
    for rank in range(world_size):
        loader, batches = run_rank(
            ds.url, rank, world_size, batch_size=4, num_workers=num_workers, persistent_workers=False
        )
        counts.append(len(batches))
        assert len(batches) == len(loader)
        seen.update(k for b in batches for k in b)
    assert len(set(counts)) == 1, counts
    assert sorted(seen) == sorted(ds.keys) and set(seen.values()) == {1}


@pytest.mark.parametrize("policy", ["pad", "drop"])
def test_uneven_epoch_policy(datasets, policy):
    ds = datasets["many_shards"]  # 36 samples over 5 ranks
    seen, counts = Counter(), []
    for rank in range(5):
        loader, batches = run_rank(ds.url, rank, 5, batch_size=3, num_workers=0, policy=policy)
        counts.append(len(batches))
        seen.update(k for b in batches for k in b)
    info = loader.epoch_info
    assert len(set(counts)) == 1
    if policy == "pad":
        assert set(seen) == set(ds.keys) and sum(seen.values()) == 36 + info.padded == 40
    else:
        assert set(seen.values()) == {1} and len(seen) == 36 - info.dropped == 35


def epoch_keys(loader):
    return [k for _, _, ks in loader for k in ks]


def test_epochs_differ_seed_reproduces_persistent_workers(datasets):
    url = datasets["many_shards"].url
    a = shardkit.load(url, batch_size=4, num_workers=2, persistent_workers=True, with_keys=True, seed=1, **SMALL)
    e0 = epoch_keys(a)
    e1 = epoch_keys(a)  # a finished pass advances the epoch, reaching the persistent workers
    a.set_epoch(0)
    e0_again = epoch_keys(a)
    a.set_epoch(1)
    assert epoch_keys(a) == e1
    b = shardkit.load(url, batch_size=4, num_workers=2, with_keys=True, seed=1, **SMALL)
    c = shardkit.load(url, batch_size=4, num_workers=2, with_keys=True, seed=2, **SMALL)
    assert sorted(e0) == sorted(e1) and e0 != e1
    assert e0 == e0_again == epoch_keys(b)
    assert epoch_keys(c) != e0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_dict_resume_is_exact(datasets, num_workers):
    url = datasets["many_shards"].url
    kw = dict(
        batch_size=3, num_workers=num_workers, seed=5, shuffle_buffer=5, shuffle_initial=2, with_keys=True, **SMALL
    )
    res = check_resume(
        lambda **topo: shardkit.load(url, **topo, **kw), after=5, start=lambda loader: loader.set_epoch(3), pixels=True
    )
    assert res.loaders[0].stats.samples == sum(len(b.keys) for b in res.rest[0])  # consumed samples were not decoded


def test_elastic_resume_three_to_two_ranks(datasets):
    url = datasets["many_shards"].url
    kw = dict(batch_size=2, seed=3, shuffle_buffer=4, with_keys=True, **SMALL)
    res = check_resume(
        lambda **topo: shardkit.load(url, num_workers=2, **topo, **kw),
        after=3,
        world_size=3,
        start=lambda loader: loader.set_epoch(2),
        resume_world_size=2,
        resume=lambda **topo: shardkit.load(url, num_workers=1, **topo, **kw),
    )
    assert sorted(res.keys()) == sorted(datasets["many_shards"].keys)  # every sample exactly once


def test_state_from_other_dataset_or_options_refused(datasets):
    a = shardkit.load(datasets["many_shards"].url, batch_size=4, num_workers=0, **SMALL)
    b = shardkit.load(datasets["few_shards"].url, batch_size=4, num_workers=0, **SMALL)
    with pytest.raises(ShardkitError, match="another dataset"):
        b.load_state_dict(a.state_dict())
    c = shardkit.load(datasets["many_shards"].url, batch_size=4, num_workers=0, seed=9, **SMALL)
    with pytest.raises(ShardkitError, match="ordering options"):
        c.load_state_dict(a.state_dict())


def test_state_from_a_dataset_of_the_same_shape_is_refused(tmp_path):
    """The fingerprint identifies the data (shard sha256s, classes), not only its layout."""
    a = write_dataset(str(tmp_path / "a"), num_samples=20, shard_size=10, size=(24, 20))
    b = write_dataset(str(tmp_path / "b"), num_samples=20, shard_size=10, size=(20, 24))  # same counts per shard
    c = write_dataset(str(tmp_path / "c"), num_samples=20, shard_size=10, size=(24, 20), num_classes=4)
    state = shardkit.load(a.url, batch_size=4, num_workers=0, **SMALL).state_dict()
    with pytest.raises(ShardkitError, match=r"another dataset \(shard contents \(sha256\) differ"):
        shardkit.load(b.url, batch_size=4, num_workers=0, **SMALL).load_state_dict(state)
    with pytest.raises(ShardkitError, match=r"another dataset \(shard contents \(sha256\), class names differ"):
        shardkit.load(c.url, batch_size=4, num_workers=0, **SMALL).load_state_dict(state)
    shardkit.load(a.url, batch_size=4, num_workers=0, **SMALL).load_state_dict(state)  # its own dataset: fine
    old = {**state, "version": 1, "fingerprint": state["dataset"]["shard_sizes"]}  # a version 1 state still loads
    del old["dataset"]
    shardkit.load(a.url, batch_size=4, num_workers=0, **SMALL).load_state_dict(old)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("plan.batch_size", "64", r"'plan.batch_size' must be int, got str '64'"),
        ("batches_done", 10**9, r"'batches_done' is 1000000000, but epoch 0 has only 9 batches"),
        ("batches_done", -1, r"'batches_done' must be >= 0"),
        ("epoch", "3", r"'epoch' must be an int, got str"),
        ("world_size", 0, r"'world_size' must be >= 1"),
        ("history", [[2, 1]], r"'history\[0\]' must be"),
        ("dataset", None, r"'dataset' must be a dict"),
    ],
)
def test_a_hand_edited_state_is_refused_naming_the_field(datasets, field, value, match):
    loader = shardkit.load(datasets["many_shards"].url, batch_size=4, num_workers=0, **SMALL)
    state = loader.state_dict()
    if field.startswith("plan."):
        state["plan"] = {**state["plan"], field[5:]: value}
    else:
        state[field] = value
    with pytest.raises(ShardkitError, match=match):
        loader.load_state_dict(state)


def test_missing_or_resized_local_shard_is_refused_when_the_loader_is_built(tmp_path):
    ds = write_dataset(str(tmp_path / "ds"), num_samples=20, shard_size=10, size=(24, 20))
    other = write_dataset(str(tmp_path / "other"), num_samples=20, shard_size=10, size=(40, 30))
    shard = os.path.join(ds.url, "train-000001.tar")
    os.replace(os.path.join(other.url, "train-000001.tar"), shard)  # another dataset's shard, another size
    with pytest.raises(
        StorageError, match=r"train-000001.tar: shard has \d+ bytes, the manifest says \d+ .*`shardkit verify` checks"
    ):
        shardkit.load(ds.url, num_workers=0, **SMALL)
    os.remove(shard)
    with pytest.raises(StorageError, match="train-000001.tar: not found \\(the manifest lists this shard"):
        shardkit.load(ds.url, num_workers=0, **SMALL)


def test_break_then_iterate_continues_the_epoch_and_restart_epoch_starts_over(datasets):
    url = datasets["few_shards"].url
    loader = shardkit.load(url, batch_size=6, num_workers=0, **SMALL)
    assert len(loader) == 6
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert sum(1 for _ in loader) == 4 and loader.epoch == 1  # the rest of epoch 0, then the next epoch
    for i, _ in enumerate(loader):
        if i == 1:
            break
    loader.restart_epoch()
    assert sum(1 for _ in loader) == 6 and loader.epoch == 2


def test_batches_are_uint8_and_stats(datasets):
    ds = datasets["few_shards"]
    loader = shardkit.load(ds.url, batch_size=8, num_workers=2, size=16, pin_memory=False)
    n = 0
    for images, labels in loader:
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 16, 16)
        assert labels.dtype == torch.int64 and len(labels) == len(images)
        n += len(images)
    st = loader.stats
    assert n == st.samples == 36 and st.skipped == 0 and st.batches == len(loader) == 5
    assert st.bytes_read > 0 and st.decode_s > 0
    assert 0 < st.wait_s <= st.elapsed_s  # the loop waited on the workers for part of the epoch, not more


def test_eval_preset_is_deterministic_and_labels_match(datasets):
    ds = datasets["few_shards"]
    a = shardkit.load(ds.url, batch_size=5, num_workers=0, preset="eval", shuffle=False, with_keys=True, **SMALL)
    b1, b2 = list(a), list(a)
    assert [k for _, _, k in b1] == [ds.keys[i : i + 5] for i in range(0, 36, 5)]
    for (x, y, k), (x2, _, _) in zip(b1, b2):
        assert torch.equal(x, x2)
        assert y.tolist() == [ds.labels[key] for key in k]


def _hook_invert(image, sample):
    return 255 - image


def test_hook_and_raw_samples(datasets):
    ds = datasets["few_shards"]
    plain = shardkit.load(ds.url, batch_size=6, num_workers=0, shuffle=False, **SMALL)
    hooked = shardkit.load(ds.url, batch_size=6, num_workers=1, shuffle=False, hook=_hook_invert, **SMALL)
    for (x, _), (y, _) in zip(plain, hooked):
        assert torch.equal(255 - x, y)
    raw = shardkit.load(ds.url, batch_size=6, num_workers=1, raw=True, **SMALL)
    samples = [s for batch in raw for s in batch]
    assert sorted(s.key for s in samples) == sorted(ds.keys)
    s = samples[0]
    assert s.jpeg[:2] == b"\xff\xd8" and s.label == ds.labels[s.key] and s.meta["class"] == f"c{s.label}"


def _batch_hook_mark(images, labels, keys):
    """Batch hook: writes each sample's label into its top-left pixel and returns a new tensor."""
    out = images.clone()
    out[:, :, 0, 0] = labels[:, None].to(torch.uint8)
    assert len(keys) == len(images)
    return out


def test_batch_hook_runs_once_per_batch_after_the_sample_hook(datasets):
    ds = datasets["few_shards"]
    plain = shardkit.load(ds.url, batch_size=6, num_workers=0, shuffle=False, **SMALL)
    hooked = shardkit.load(
        ds.url, batch_size=6, num_workers=1, shuffle=False, hook=_hook_invert, batch_hook=_batch_hook_mark, **SMALL
    )
    for (x, labels), (y, _) in zip(plain, hooked):
        expect = 255 - x
        expect[:, :, 0, 0] = labels[:, None].to(torch.uint8)
        assert torch.equal(expect, y)


def test_eval_geometry_boxes_are_vectorised_and_skipped_by_the_cpu_decode():
    import numpy as np

    from shardkit.loader.config import ImageConfig
    from shardkit.loader.decode.cropgeometry import center_box
    from shardkit.loader.decode.worker import CropDecoder

    dec = CropDecoder(ImageConfig(preset="eval", size=16, resize_size=19), 0)
    sizes = np.array([[40, 30], [30, 40], [17, 17], [1000, 3], [3, 1000], [101, 57]])
    crops = dec.geometry(sizes, 0, np.arange(len(sizes)))  # the device decoder's call: every box
    assert (
        np.array_equal(crops.boxes, np.array([center_box(int(w), int(h), 16, 19) for w, h in sizes]))
        and not crops.flips.any()
    )
    assert dec.geometry(sizes, 0, np.arange(len(sizes)), eval_boxes=False).boxes is None  # the CPU decode's: none


def _write_with_bad(root, bad_index, n=12, shard_size=6, missing=False):
    shards, keys = [], []
    for start in range(0, n, shard_size):
        samples = []
        for i in range(start, start + shard_size):
            data = b"this is not a jpeg" if i == bad_index and not missing else jpeg_bytes(i % 2, i, (20, 20))
            samples.append(EncodedSample(f"k{i:03d}", data, i % 2, {"class": str(i % 2)}))
            keys.append(f"k{i:03d}")
        shards.append(samples)
    write_samples(root, shards, ["a", "b"])
    return keys


def test_corrupt_sample_skipped_counted_strict_raises(tmp_path, caplog):
    root = str(tmp_path / "bad")
    keys = _write_with_bad(root, bad_index=7)
    loader = shardkit.load(root, batch_size=4, num_workers=0, with_keys=True, **SMALL)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        got = [k for _, _, ks in loader for k in ks]
    assert sorted(got) == sorted(set(keys) - {"k007"})
    assert loader.stats.skipped == 1 and loader.stats.samples == 11 and loader.stats.batches == 3
    lines = [r.getMessage() for r in caplog.records if "k007" in r.getMessage()]
    assert len(lines) == 1 and "train-000001.tar" in lines[0]
    strict = shardkit.load(root, batch_size=4, num_workers=0, strict=True, **SMALL)
    with pytest.raises(DataError, match="k007"):
        list(strict)


def test_truncated_shard_delivers_samples_before_damage(tmp_path, caplog):
    root = str(tmp_path / "trunc")
    keys = _write_with_bad(root, bad_index=-1)
    path = os.path.join(root, "train-000001.tar")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(StorageError, match="train-000001.tar: shard has .* bytes, the manifest says .*shardkit verify"):
        shardkit.load(root, batch_size=4, num_workers=0, **SMALL)  # refused up front by default
    loader = shardkit.load(root, batch_size=4, num_workers=0, shuffle=False, with_keys=True, check_sizes=False, **SMALL)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        got = [k for _, _, ks in loader for k in ks]
    assert got == keys[: len(got)] and 6 < len(got) < 12
    assert loader.stats.skipped == 12 - len(got)
    assert any("damaged tar at byte" in r.getMessage() and "train-000001.tar" in r.getMessage() for r in caplog.records)


def _hostile_manifest(root, name):
    os.makedirs(root, exist_ok=True)
    d = {
        "format": "shardkit-manifest",
        "version": 1,
        "split": "train",
        "classes": ["a"],
        "shards": [{"name": name, "samples": 1, "bytes": 10, "sha256": "0" * 64}],
    }
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(d, f)
    return root


@pytest.mark.parametrize(
    "name", ["../escape.tar", "/etc/passwd.tar", "pipe:touch pwned.tar", "http://other.host/x.tar"]
)
def test_hostile_manifest_refused(tmp_path, name):
    root = _hostile_manifest(str(tmp_path / "evil"), name)
    with pytest.raises(ManifestError, match="not a plain file name"):
        shardkit.load(root, num_workers=0)


def test_pipe_urls_refused_unless_opted_in(tmp_path, datasets):
    from shardkit.loader.config import StorageConfig
    from shardkit.storage.opener import ShardOpener

    with pytest.raises(StorageError, match="pipe:"):
        shardkit.load("pipe:cat /etc/passwd", num_workers=0)
    shard = datasets["few_shards"].manifest.shard_url(0)
    marker = tmp_path / "pwned"
    with pytest.raises(StorageError, match="allow_pipe"):
        ShardOpener(StorageConfig()).open(f"pipe:touch {marker}; cat {shard}")
    assert not marker.exists()
    with ShardOpener(StorageConfig(allow_pipe=True)).open(f"pipe:cat {shard}") as f:  # explicit opt-in
        assert f.read(512)[257:262] == b"ustar"


def test_unknown_option_lists_valid_ones(datasets):
    with pytest.raises(TypeError, match="valid options"):
        shardkit.load(datasets["few_shards"].url, batchsize=3)
    with pytest.raises(ValueError, match="choose one of"):
        shardkit.load(datasets["few_shards"].url, preset="training")


@pytest.mark.parametrize(
    "option, bad, valid",
    [
        ("decoder", "jpeg", "'auto', 'simplejpeg', 'pil', 'torchvision'"),
        ("preset", "training", "'train', 'eval', 'detect', 'letterbox'"),
        ("policy", "wrap", "'pad', 'drop'"),
        ("multiprocessing_context", "thread", "'fork', 'spawn', 'forkserver'"),
    ],
)
def test_typed_choices_list_the_valid_values(datasets, option, bad, valid):
    with pytest.raises(ValueError, match=f"choose one of \\[{valid}\\]"):
        shardkit.load(datasets["few_shards"].url, **{option: bad})


def test_derived_image_defaults_follow_the_options():
    """resize_size and fast_decode are derived from size and preset after the options are applied."""
    from shardkit.loader.config import build_config

    img = build_config(None, {"size": 160, "preset": "eval"}).image
    assert (img.resize_size, img.fast_decode) == (183, False)
    img = build_config(None, {"size": 288, "preset": "eval"}).image  # was: resize_size (256) must be >= size (288)
    assert img.resize_size == 329
    img = build_config(None, {"size": 160, "resize_size": 200, "fast_decode": True, "preset": "eval"}).image
    assert (img.resize_size, img.fast_decode) == (200, True)  # explicit values stay
    base = shardkit.LoaderConfig(image=shardkit.loader.ImageConfig(resize_size=300))
    assert build_config(base, {"size": 160}).image.resize_size == 300  # set on purpose: kept


def test_options_have_one_way_in_and_a_misplaced_one_names_its_place(tmp_path):
    from shardkit.loader.config import build_config, option_names

    with pytest.raises(TypeError, match=r"'batch_size', an option of its plan group: pass it to shardkit.load"):
        shardkit.LoaderConfig(batch_size=4)
    with pytest.raises(TypeError, match=r"'cache_dir', an option of its source group.*StorageConfig\(cache_dir"):
        shardkit.LoaderConfig(cache_dir="/tmp")
    with pytest.raises(TypeError, match="unknown option 'batchsize'"):
        shardkit.LoaderConfig(batchsize=4)
    ds = write_dataset(str(tmp_path / "d"), num_samples=8, shard_size=4)
    with pytest.raises(TypeError, match="unknown loader option 'batchsize'"):
        shardkit.load(ds.url, batchsize=4)
    base = shardkit.LoaderConfig()
    for name, group in option_names().items():  # every option of every group is a flat keyword of load()
        value = getattr(getattr(base, group) if group else base, name)
        assert build_config(None, {name: value}) == base, name


def test_config_defaults_live_in_one_place():
    from shardkit.loader.config import StorageConfig, default_num_workers
    from shardkit.plan.epoch import PlanConfig

    cfg = shardkit.LoaderConfig()
    plan = PlanConfig(batch_size=cfg.plan.batch_size)
    assert cfg.plan == plan and (plan.shuffle_buffer, plan.shuffle_initial) == (1024, 256)
    assert shardkit.LoaderConfig(PlanConfig(shuffle_buffer=100)).plan.shuffle_initial == 100  # never the larger block
    assert cfg.workers.num_workers == default_num_workers() and cfg.workers.prefetch_factor == 4
    a, b = StorageConfig(storage_options={"anon": True}), StorageConfig(storage_options={"anon": True})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


def test_bench_cli(datasets, capsys):
    from shardkit.cli import main

    assert (
        main(
            [
                "bench",
                datasets["few_shards"].url,
                "--workers",
                "0,1",
                "--batches",
                "2",
                "--batch-size",
                "4",
                "--size",
                "16",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    # workers, img/s, 1st batch, MB/s, read %, decode %, resize %, collate %, wait/batch, steady
    rows = {
        int(m[0]): (m[0], m[1], m[3], *m[4:8], m[8])
        for m in re.findall(
            r"^\s+(\d+)\s+(\d+)\s+([\d.]+)s\s+([\d.]+)\s+(\d+)%\s+(\d+)%\s+(\d+)%\s+(\d+)%\s+([\d.]+)ms\s+(yes|no \(.*\))$",
            out,
            re.M,
        )
    }
    assert sorted(rows) == [0, 1], out  # one row per worker count asked for
    for row in rows.values():
        assert int(row[1]) > 0 and 96 <= sum(int(x) for x in row[3:7]) <= 104, row  # the time shares add up (rounded)
    best_w = max(rows, key=lambda w: int(rows[w][1]))
    best = re.search(r"^best: (\d+) ± \d+ img/s with (\d+) workers = ([\d.]+) ms per batch of 4; ", out, re.M)
    assert best and (int(best[1]), int(best[2])) == (int(rows[best_w][1]), best_w), out
    assert abs(float(best[3]) - 4 / int(best[1]) * 1000) <= 0.05 + 0.01 * float(best[3]), out
    assert re.search(r"^decode-only ceiling .*: (\d+) img/s$", out, re.M), out
    assert (
        f"a training step faster than {best[3]} ms per batch of 4" in out
    )  # the input-bound check uses the best figure
    assert main(["bench", "/nonexistent/ds", "--workers", "0"]) == 2


def test_worker_timeout_option_reaches_dataloader(datasets):
    ds = datasets["many_shards"]
    loader, batches = run_rank(ds.url, 0, 1, num_workers=1, timeout=60)
    assert loader._pool.dataloader().timeout == 60
    assert sorted(k for b in batches for k in b) == sorted(ds.keys)


@pytest.mark.parametrize("shuffled", [True, False])
def test_read_ahead_emits_the_same_samples_and_stops_its_thread(datasets, shuffled):
    import threading

    import numpy as np

    from shardkit.loader.config import StorageConfig
    from shardkit.loader.read.reader import BlockReader, read_blocks
    from shardkit.loader.stats import Counters
    from shardkit.plan.epoch import Block
    from shardkit.storage.opener import ShardOpener

    ds = shardkit.ShardDataset(datasets["many_shards"].url)
    rng = np.random.default_rng(0)
    blocks = []
    for start in range(0, 36, 12):
        gids = np.arange(start, start + 12)
        blocks.append(Block(gids, rng.permutation(12) if shuffled else np.arange(12)))

    def keys(read_ahead, stop=None):
        reader = BlockReader(ds.urls, ds.shard_bytes, ds.shard_offsets, ShardOpener(StorageConfig()), Counters())
        out = []
        gen = read_blocks(blocks, reader=reader, chunk=5, read_ahead=read_ahead)
        for s in gen:
            out.append(s.key)
            if len(out) == stop:
                gen.close()  # a pass abandoned mid-way
                break
        return out

    def read_threads():
        return [t for t in threading.enumerate() if t.name.startswith("shardkit-read")]

    assert keys(True) == keys(False)
    assert keys(True, stop=7) == keys(False)[:7]
    deadline = time.monotonic() + 10
    while read_threads() and time.monotonic() < deadline:  # close() does not wait: the thread ends just after
        time.sleep(0.01)
    assert not read_threads()


class _FakeReader:
    """Stands in for BlockReader: reads take ``delay`` seconds (or, with a ``gate``, wait until it is set),
    block ``fail`` raises; records misuse."""

    def __init__(self, fail: int = -1, delay: float = 0.02):
        self.fail, self.delay, self.calls, self.active = fail, delay, [], 0
        self.gate: threading.Event | None = None
        self.overlap = self.closed_during_read = False

    def read(self, gids):
        self.active += 1
        self.overlap |= self.active > 1
        try:
            block = int(gids[0]) // 10
            self.calls.append(block)
            if self.gate is not None:
                self.gate.wait(10)  # a stalled endpoint, until the test lets it answer
            else:
                time.sleep(self.delay)
            if block == self.fail:
                raise ConnectionError(f"block {block} failed")
            return gids.tolist()
        finally:
            self.active -= 1

    def close(self):
        self.closed_during_read |= self.active > 0


@pytest.mark.parametrize("read_ahead", [True, False])
def test_a_failed_read_surfaces_in_order_and_nothing_is_read_after_it(read_ahead):
    import numpy as np

    from shardkit.loader.read.reader import read_blocks
    from shardkit.plan.epoch import Block

    blocks = [Block(np.arange(s, s + 10), np.arange(10)[::-1].copy()) for s in range(0, 60, 10)]
    reader, out = _FakeReader(fail=3), []
    with pytest.raises(ConnectionError, match="block 3"):
        for s in read_blocks(blocks, reader=reader, read_ahead=read_ahead):
            out.append(s)
    assert out == [g for s in range(0, 30, 10) for g in range(s + 9, s - 1, -1)]  # blocks 0-2, each exactly once
    deadline = time.monotonic() + 5
    while reader.active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.calls == [0, 1, 2, 3] and not reader.overlap and not reader.closed_during_read


def test_closing_early_does_not_wait_for_a_slow_read():
    import numpy as np

    from shardkit.loader.read.reader import read_blocks
    from shardkit.plan.epoch import Block

    blocks = [Block(np.arange(s, s + 10), np.arange(10)) for s in range(0, 40, 10)]
    reader = _FakeReader(delay=0.0)
    gen = read_blocks(blocks, reader=reader, chunk=64)
    next(gen)  # block 0 emitting, block 1's read in flight
    reader.gate = threading.Event()  # block 2's read (started at the end of block 0) stalls until set
    for _ in range(10):
        next(gen)
    assert wait_for(lambda: reader.active == 1, 10)  # block 2's read is in flight
    gen.close()
    assert reader.active == 1  # close returned while that read was still waiting: it did not wait for it
    reader.gate.set()
    assert wait_for(lambda: reader.active == 0, 10)
    assert not reader.overlap and not reader.closed_during_read
