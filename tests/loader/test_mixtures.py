"""Mixtures through the real loader: exact counts, exactly once over ranks x workers, resume,
elastic resume, remix, S3 + disk in one mixture, bad input, and ``load(url)`` unchanged."""

from __future__ import annotations

import collections
import hashlib
import json
import os

import pytest
import torch

import shardkit
from shardkit import ShardkitError, Source
from shardkit.format.manifest import load_manifest, save_manifest
from tests.support.data import jpeg_bytes, tar_bytes, write_dataset, write_raw_dataset
from tests.support.repo import ROOT
from tests.support.resume import check_resume
from tests.support.s3 import put_dir
from tests.support.torchrun import launch, rank_logs

KW = dict(batch_size=5, size=16, pin_memory=False, with_keys=True, multiprocessing_context="fork", shuffle_buffer=8)


@pytest.fixture(scope="module")
def dsets(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    return {
        "a": write_dataset(str(root / "a"), num_samples=40, shard_size=6, num_classes=3, size=(24, 20)),
        "b": write_dataset(str(root / "b"), num_samples=12, shard_size=5, num_classes=2, size=(20, 24)),
        "c": write_dataset(str(root / "c"), num_samples=9, shard_size=4, num_classes=4, size=(20, 20)),
    }


def _epoch(loader):
    """Every batch of one pass: (images, labels, keys, sources)."""
    return [(im, lab, keys, src) for im, lab, keys, src in loader]


def _split(key):
    i, k = key.split("/")
    return int(i), k


# --------------------------------------------------------------------- one source is today's loader

#: digests of (keys + labels, pixels) over two epochs per case, recorded with the loader before mixtures
#: were wired in (shardkit.plan.epoch.worker_plan; commit 9ae8c98): a plain URL must give byte-identical batches
GOLDEN = {
    "w0": ("7120eeb191289cc4", "193beae2489f4975"),
    "w2": ("fdcc390a1216b1e2", "df7412363084bdd0"),
    "eval": ("0381b3117e9133b4", "4a9cfa3f9bfb2a9f"),
    "r1of2drop": ("f5bb2226cbe4978c", "da9d37edd64a3ae7"),
    "r2of3pad": ("312525bccbabb26a", "3c3ae412e568eb9d"),
    "resume": ("8687f2255080cf5d", "1e7c5db6183b3f19"),
}
CASES = {
    "w0": dict(num_workers=0),
    "w2": dict(num_workers=2),
    "eval": dict(num_workers=0, shuffle=False, preset="eval"),
    "r1of2drop": dict(num_workers=0, rank=1, world_size=2, policy="drop", shuffle_buffer=8),
    "r2of3pad": dict(num_workers=0, rank=2, world_size=3, drop_last=True, shuffle_buffer=8),
    "resume": dict(num_workers=0, shuffle_buffer=8, resume_at=3),
}


def _digest(url, **kw):
    ho, hi = hashlib.sha256(), hashlib.sha256()
    resume_at = kw.pop("resume_at", None)
    loader = shardkit.load(url, batch_size=5, size=32, with_keys=True, **kw)
    if resume_at is not None:
        it = iter(loader)
        for _ in range(resume_at):
            next(it)
        state = loader.state_dict()
        del it
        loader.close()
        loader = shardkit.load(url, batch_size=5, size=32, with_keys=True, **kw)
        loader.load_state_dict(json.loads(json.dumps(state)))
    for _ in range(2):
        for images, labels, keys in loader:
            ho.update(("|".join(keys) + repr(labels.tolist())).encode())
            hi.update(images.contiguous().numpy().tobytes())
    loader.close()
    return ho.hexdigest()[:16], hi.hexdigest()[:16]


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_source_gives_todays_batches(tmp_path, case):
    ds = write_dataset(str(tmp_path / "a"), num_samples=47, shard_size=6, num_classes=3, size=(40, 30))
    assert _digest(ds.url, **dict(CASES[case])) == GOLDEN[case]
    if case == "w0":  # the same through a lone Source and a one-element list
        assert _digest(Source(ds.url), **CASES[case]) == GOLDEN[case]
        assert _digest([ds.url], **CASES[case]) == GOLDEN[case]


# --------------------------------------------------------------------- exact counts, labels, keys, stats


@pytest.mark.parametrize("workers", [0, 2])
def test_exact_counts_per_epoch_through_the_real_loader(dsets, workers):
    a, b = dsets["a"], dsets["b"]
    loader = shardkit.load(
        [Source(a.url, weight=1), Source(b.url, repeat=2)],
        epoch_size=60,
        num_workers=workers,
        with_source=True,
        seed=3,
        **KW,
    )
    assert loader.classes == ("c0", "c1", "c2")  # merged by name
    seen_a = collections.Counter()
    for _ in range(2):
        batches = _epoch(loader)
        assert len(batches) == len(loader) == 12
        per = collections.Counter()
        for _, labels, keys, src in batches:
            assert len(set(keys)) == len(keys)  # never a sample twice in a batch
            assert int(src.sum()) in {
                len(keys) * 24 // 60,
                -(-len(keys) * 24 // 60),
            }  # every batch holds B's share, +-1
            for key, label, s in zip(keys, labels.tolist(), src.tolist()):
                i, k = _split(key)
                assert i == s
                assert label == [a, b][i].labels[k]  # c0..c2 keep their index in the union
                per[(i, k)] += 1
        assert sum(n for (i, _), n in per.items() if i == 0) == 36  # weight: 60 - 24
        assert {k: n for (i, k), n in per.items() if i == 1} == {k: 2 for k in b.keys}  # repeat=2: each twice
        seen_a.update(k for (i, k), n in per.items() if i == 0 for _ in range(n))
        st = loader.stats
        assert [s.samples for s in st.sources] == [36, 24] and [s.skipped for s in st.sources] == [0, 0]
        assert all(s.bytes_read > 0 for s in st.sources) and sum(s.bytes_read for s in st.sources) == st.bytes_read
    # without replacement across epochs: 72 samples of 40 are one whole pass and 32 of the next
    assert set(seen_a) == set(a.keys) and sorted(collections.Counter(seen_a.values()).items()) == [(1, 8), (2, 32)]
    loader.close()


def test_labels_per_source_and_fractional_repeat(dsets):
    a, c = dsets["a"], dsets["c"]
    loader = shardkit.load(
        [Source(a.url, repeat=0.5), Source(c.url, choose=4)],
        labels="per_source",
        num_workers=0,
        **{**KW, "with_keys": True},
    )
    assert loader.classes == ("0/c0", "0/c1", "0/c2", "1/c0", "1/c1", "1/c2", "1/c3")
    seen = collections.Counter()
    for _ in range(2):
        n = 0
        for _, labels, keys in loader:
            for key, label in zip(keys, labels.tolist()):
                i, k = _split(key)
                assert label == [0, 3][i] + [a, c][i].labels[k]
                seen[(i, k)] += 1
                n += 1
        assert n == 20 + 4
    assert sorted(n for (i, _), n in seen.items() if i == 0) == [1] * 40  # 0.5x: all of it once over two epochs
    assert (
        sum(n for (i, _), n in seen.items() if i == 1) == 8 and max(n for (i, _), n in seen.items() if i == 1) == 1
    )  # choose: no repeat before a full pass


# --------------------------------------------------------------------- exactly once over ranks x workers


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("workers", [0, 1, 3])
def test_exactly_once_and_reported_padding(dsets, world_size, workers):
    """``repeat=1`` for both: an epoch is every sample of both sources once, split exactly, padding reported."""
    a, b = dsets["a"], dsets["b"]
    sources = [Source(a.url, repeat=1), Source(b.url, repeat=1)]
    for policy in ("pad", "drop"):
        got, lens = collections.Counter(), set()
        for rank in range(world_size):
            loader = shardkit.load(
                sources, num_workers=workers, rank=rank, world_size=world_size, policy=policy, seed=1, **KW
            )
            info = loader.epoch_info
            batches = [keys for _, _, keys in loader]
            lens.add(len(batches))
            assert len(batches) == info.num_batches
            got.update(k for keys in batches for k in keys)
            loader.close()
        assert len(lens) == 1  # the same number of batches on every rank
        everything = {f"0/{k}" for k in a.keys} | {f"1/{k}" for k in b.keys}
        if policy == "pad":
            assert set(got) == everything and sum(got.values()) == 52 + info.padded
        else:
            assert set(got) <= everything and max(got.values()) == 1 and len(got) == 52 - info.dropped


# --------------------------------------------------------------------- resume, elastic resume, remix


def _pass(loader):
    return [(im.clone(), keys) for im, _, keys in loader]


def _same(x, y):
    assert [k for _, k in x] == [k for _, k in y]
    assert all(torch.equal(p, q) for (p, _), (q, _) in zip(x, y))


def test_mid_epoch_resume_equals_uninterrupted(dsets):
    a, b, c = dsets["a"], dsets["b"], dsets["c"]
    sources = [Source(a.url, weight=0.7), Source(b.url, weight=0.3), Source(c.url, repeat=1.5)]
    opts = dict(num_workers=2, seed=5, **KW)
    for k in (1, 4):  # the same remaining batches, in the same order, pixels included
        res = check_resume(
            lambda **topo: shardkit.load(sources, **topo, **opts),
            after=k,
            start=lambda loader: loader.set_epoch(1),
            pixels=True,
        )
        ref, again = res.reference_loaders[0], res.loaders[0]
        _same(_pass(again), _pass(ref))  # and the next epoch as uninterrupted
        ref.close()
        again.close()


def test_elastic_resume_covers_exactly_the_unseen(dsets):
    """3 ranks x 2 workers -> 2 ranks x 1 worker, in one process (rank=/world_size=)."""
    a, b = dsets["a"], dsets["b"]
    sources = [Source(a.url, repeat=1), Source(b.url, repeat=1)]
    opts = dict(seed=2, policy="drop", **KW)
    res = check_resume(
        lambda **topo: shardkit.load(sources, num_workers=2, **topo, **opts),
        after=2,
        world_size=3,
        resume_world_size=2,
        resume=lambda **topo: shardkit.load(sources, num_workers=1, **topo, **opts),
        complete=False,
    )
    for loader in res.loaders + res.reference_loaders:
        loader.close()
    dropped_before = shardkit.load(sources, num_workers=2, rank=2, world_size=3, **opts).epoch_info.dropped
    resumed = shardkit.load(sources, num_workers=1, rank=1, world_size=2, **opts)
    resumed.load_state_dict(res.states[0])
    dropped_after = resumed.epoch_info.dropped  # of the re-planned rest of the epoch
    every = res.keys()
    assert len(every) == len(set(every)) == 52 - dropped_before - dropped_after  # exactly the unseen, nothing twice


def test_other_mixture_refused_naming_the_difference_and_allow_remix(dsets):
    a, b = dsets["a"], dsets["b"]
    opts = dict(num_workers=0, seed=7, **KW)
    old = [Source(a.url, weight=0.5), Source(b.url, weight=0.5)]
    ref = shardkit.load(old, **opts)
    whole = _pass(ref)
    it = iter(shardkit_loader := shardkit.load(old, **opts))
    next(it), next(it)
    state = json.loads(json.dumps(shardkit_loader.state_dict()))
    del it
    new = [Source(a.url, weight=0.8), Source(b.url, weight=0.2)]
    with pytest.raises(
        ShardkitError, match=r"another mixture \(source 0: weight 0.5 -> 0.8; source 1: weight 0.5 -> 0.2\)"
    ):
        shardkit.load(new, **opts).load_state_dict(state)
    with pytest.raises(ShardkitError, match=r"another mixture \(1 sources -> 2"):
        shardkit.load(new, **opts).load_state_dict(shardkit.load(a.url, **opts).state_dict())
    loader = shardkit.load(new, **opts)
    loader.load_state_dict(state, allow_remix=True)
    assert [k for _, k in _pass(loader)] == [k for _, k in whole[2:]]  # the epoch finishes as saved
    counts = collections.Counter(_split(k)[0] for _, keys in _pass(loader) for k in keys)
    assert (counts[0], counts[1]) == (42, 10)  # then the new weights: 52 * 0.8 = 41.6 -> 42 by largest remainder
    # a state saved while the old mixture finishes its epoch resumes the pending switch without allow_remix
    switching = shardkit.load(new, **opts)
    switching.load_state_dict(state, allow_remix=True)
    it = iter(switching)
    next(it)
    pending = json.loads(json.dumps(switching.state_dict()))
    del it
    assert "next_mixture" in pending
    resumed = shardkit.load(new, **opts)
    resumed.load_state_dict(pending)
    assert [k for _, k in _pass(resumed)] == [k for _, k in whole[3:]]
    counts = collections.Counter(_split(k)[0] for _, keys in _pass(resumed) for k in keys)
    assert (counts[0], counts[1]) == (42, 10)  # and switches at the next epoch


def test_raw_samples_of_a_mixture_carry_its_labels_and_keys(dsets):
    a, c = dsets["a"], dsets["c"]
    loader = shardkit.load(
        [Source(a.url, repeat=1), Source(c.url, repeat=1)], labels="per_source", raw=True, num_workers=0, **KW
    )
    got = {r.key: r.label for batch in loader for r in batch}
    assert got == {**{f"0/{k}": v for k, v in a.labels.items()}, **{f"1/{k}": 3 + v for k, v in c.labels.items()}}


def test_skipped_samples_are_counted_per_source(dsets, tmp_path):
    a = dsets["a"]
    members = []
    for i in range(6):
        members += [(f"s{i}.cls", b"0"), (f"s{i}.jpg", b"not a jpeg" if i % 3 == 0 else jpeg_bytes(0, i, (20, 20)))]
    bad = write_raw_dataset(str(tmp_path / "bad"), [(tar_bytes(members), 6)], ["c0"])
    loader = shardkit.load([Source(a.url, repeat=1), Source(bad, repeat=1)], num_workers=2, **KW)
    got = [k for _, _, keys in loader for k in keys]
    assert len(got) == 40 + 4
    st = loader.stats
    assert [(s.samples, s.skipped) for s in st.sources] == [(40, 0), (4, 2)] and st.skipped == 2


# --------------------------------------------------------------------- storage: S3 and disk in one mixture


@pytest.mark.slow
def test_one_source_on_s3_one_on_disk(dsets, s3):
    opts, bucket = s3
    a, b = dsets["a"], dsets["b"]
    put_dir(opts, b.url, f"{bucket}/b")
    sources = [Source(a.url, repeat=1), Source(f"s3://{bucket}/b", repeat=1, storage_options=opts)]
    loader = shardkit.load(sources, num_workers=2, with_source=True, seed=4, **KW)
    got = collections.Counter()
    for _, _labels, keys, src in loader:
        got.update(keys)
        assert [_split(k)[0] for k in keys] == src.tolist()
    assert got == collections.Counter([f"0/{k}" for k in a.keys] + [f"1/{k}" for k in b.keys])
    assert all(s.bytes_read > 0 for s in loader.stats.sources)
    # the same batches as both sources from disk
    disk = shardkit.load([Source(a.url, repeat=1), Source(b.url, repeat=1)], num_workers=0, seed=4, **KW)
    remote = shardkit.load(sources, num_workers=0, seed=4, **KW)
    _same(_pass(disk), _pass(remote))
    loader.close()


# --------------------------------------------------------------------- bad input


def test_bad_input_gets_a_clear_error(dsets, tmp_path):
    a, b = dsets["a"], dsets["b"]
    with pytest.raises(ValueError, match="at least one source"):
        shardkit.load([], **KW)
    with pytest.raises(ValueError, match="give one of weight, repeat or choose, not weight and repeat"):
        shardkit.load([Source(a.url, weight=1, repeat=2), Source(b.url, weight=1)], **KW)
    with pytest.raises(ValueError, match=r"source 1 .*: give one of weight=, repeat= or choose="):
        shardkit.load([Source(a.url, weight=1), b.url], **KW)
    with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
        Source(a.url, weight=-1)
    with pytest.raises(ValueError, match="all weights are 0"):
        shardkit.load([Source(a.url, weight=0), Source(b.url, weight=0)], **KW)
    with pytest.raises(ValueError, match="choose must be an integer >= 1"):
        Source(a.url, choose=0)
    with pytest.raises(ShardkitError, match=r"source 1 \(.*missing\): "):
        shardkit.load([Source(a.url, weight=1), Source(str(tmp_path / "missing"), weight=1)], **KW)
    with pytest.raises(ShardkitError, match="sources 0 .* and 1 .* are the same split"):
        shardkit.load([Source(a.url, weight=1), Source(a.url + "/manifest.json", weight=1)], **KW)
    with pytest.raises(ValueError, match="invalid labels 'union'"):
        shardkit.load([Source(a.url, weight=1), Source(b.url, weight=1)], labels="union", **KW)
    other = write_dataset(str(tmp_path / "big"), num_samples=6, shard_size=3, size=(20, 20))
    m = load_manifest(other.url)
    m.options["short_side"] = 320
    save_manifest(m, other.url)
    with pytest.raises(ShardkitError, match=r"source 1 .* was converted with image options \{'short_side': 320"):
        shardkit.load([Source(a.url, weight=1), Source(other.url, weight=1)], **KW)
    empty = write_dataset(str(tmp_path / "empty"), num_samples=0)
    with pytest.raises(ShardkitError, match=r"source 1 \(.*empty.*\) has no samples"):
        shardkit.load([Source(a.url, weight=1), Source(empty.url, weight=1)], **KW)
    with pytest.raises(TypeError, match="URLs or shardkit.Source objects, not int"):
        shardkit.load([a.url, 3], **KW)


# --------------------------------------------------------------------- elastic resume under torchrun + gloo


#: the training script the torchrun test launches
MIX_DDP = os.path.join(ROOT, "tests", "loader", "mix_ddp.py")


@pytest.mark.slow
def test_elastic_resume_of_a_mixture_under_torchrun(dsets, tmp_path):
    """3 ranks x 2 workers stop after 2 steps; 2 ranks x 1 worker finish the epoch: exactly the unseen."""
    a, b = dsets["a"], dsets["b"]
    ckpt = str(tmp_path / "ckpt.pt")
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    common = ["--source", a.url, "--source", b.url, "--checkpoint", ckpt]
    launch(MIX_DDP, 3, [*common, "--workers", "2", "--stop-after", "2", "--log-ids", str(tmp_path / "x")])
    launch(MIX_DDP, 2, [*common, "--workers", "1", "--log-ids", str(tmp_path / "y")])
    first, second = rank_logs(tmp_path / "x"), rank_logs(tmp_path / "y")
    assert sorted(first) == [0, 1, 2] and sorted(second) == [0, 1]
    assert all(len(s) == 2 for s in first.values()) and len({len(s) for s in second.values()}) == 1
    seen = collections.Counter(k for steps in first.values() for s in steps for k in s["keys"])
    rest = collections.Counter(k for steps in second.values() for s in steps for k in s["keys"])
    everything = {f"0/{k}" for k in a.keys} | {f"1/{k}" for k in b.keys}
    assert not set(seen) & set(rest) and set(seen) | set(rest) == everything
    (pad_after,) = {s["padded"] for steps in second.values() for s in steps}
    assert sum(rest.values()) - len(rest) == pad_after  # the only repeats are the reported padding
