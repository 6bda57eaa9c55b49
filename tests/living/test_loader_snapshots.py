"""``shardkit.load`` over living splits: a selection, an appended split and a corrected split read exactly.

The split is converted by ``shardkit convert`` and then appended to and corrected by :mod:`tests.support.living`,
which keeps the truth (each generation's keys and labels; every image's colour encodes its id). A selection's plan
is not the parent's plan filtered, so the oracle is the promise itself: every epoch delivers each key that is in
exactly once (pad repeats aside) and no other, with its label and its pixels, in equal batches over the ranks; a
resume at any point continues exactly (:func:`tests.support.resume.check_resume`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.errors import ShardkitError
from tests.support.living import Living, append, convert_split, correct, select
from tests.support.resume import check_resume, take
from tests.support.source_reference import image_id

SETTINGS = settings(phases=[Phase.explicit, Phase.generate], max_examples=6, deadline=None)


@pytest.fixture(scope="module")
def living(tmp_path_factory) -> Living:
    """Generation 0: 40 converted images; 1: 12 appended; 2: 4 removed and 4 relabelled (of both generations)."""
    lv = convert_split(str(tmp_path_factory.mktemp("living")), 40, shard_size=6)
    append(lv, list(range(40, 52)), shard_size=5)
    keys = sorted(lv.latest)
    removed = [keys[1], keys[17], keys[33], keys[45]]
    relabeled = {k: (lv.latest[k] + 1) % 3 for k in (keys[2], keys[20], keys[41], keys[50])}
    correct(lv, removed, relabeled)
    return lv


def _load(url: str, **kw):
    opts = {"batch_size": 4, "num_workers": 0, "preset": "eval", "size": 8, "with_keys": True, "seed": 3, **kw}
    return shardkit.load(url, **opts)


def _deliveries(loader, lv: Living, truth: "dict[str, int]") -> list[str]:
    """Every key of one pass, checking each one's label against ``truth`` and its pixels against its id."""
    keys = []
    for images, labels, ks in loader:
        for img, label, key in zip(images, labels.tolist(), ks):
            assert key in truth, f"{key} delivered but not in"
            assert label == truth[key], f"{key}: label {label}, the snapshot says {truth[key]}"
            rgb = tuple(float(v) for v in img.float().mean((1, 2)))
            assert image_id(rgb) == lv.ids[key], f"{key}: the pixels of image {image_id(rgb)}, not {lv.ids[key]}"
            keys.append(key)
    return keys


def _exactly_once(keys: "list[str]", truth: "dict[str, int]", world_size: int) -> None:
    n = Counter(keys)
    assert set(n) == set(truth), f"missing {sorted(set(truth) - set(n))[:5]}"
    extra = len(keys) - len(truth)
    assert 0 <= extra < world_size and sum(c - 1 for c in n.values()) == extra, "a key delivered twice beyond padding"


def _selection(
    lv: Living, seed: int, share: float, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, "dict[str, int]"]:
    """A selection of about ``share`` of ``lv``'s stored keys (drawn with ``seed``) in a new folder of pytest's
    temporary directory, and the newest generation's labels of the keys in it."""
    rng = np.random.default_rng(seed)
    stored = list(lv.order)
    chosen = {k for k in stored if rng.random() < share} or {stored[seed % len(stored)]}
    out = select(lv, chosen, str(tmp_path_factory.mktemp("sel")))
    return out, {k: v for k, v in lv.latest.items() if k in chosen}


@SETTINGS
@given(
    seed=st.integers(0, 1000),
    share=st.sampled_from([0.1, 0.5, 0.9]),
    world_size=st.integers(1, 3),
    num_workers=st.sampled_from([0, 0, 2]),
    batch_size=st.integers(1, 5),
)
@example(seed=1, share=0.5, world_size=2, num_workers=2, batch_size=3)
@example(seed=2, share=0.1, world_size=1, num_workers=0, batch_size=2)
def test_selection_epochs_deliver_each_selected_key_once(
    living, tmp_path_factory, seed, share, world_size, num_workers, batch_size
):
    url, truth = _selection(living, seed, share, tmp_path_factory)
    for epoch in (0, 1):
        keys, counts = [], []
        for rank in range(world_size):
            loader = _load(url, rank=rank, world_size=world_size, num_workers=num_workers, batch_size=batch_size)
            loader.set_epoch(epoch)
            n = len(loader)
            got = _deliveries(loader, living, truth)
            counts.append(loader.stats.batches)
            assert n == loader.stats.batches == -(-len(got) // batch_size), "len() is not the batches delivered"
            keys += got
            loader.close()
        assert len(set(counts)) == 1, f"unequal batches over ranks: {counts}"
        _exactly_once(keys, truth, world_size)
    shutil.rmtree(url)


@SETTINGS
@given(
    seed=st.integers(0, 1000),
    world_size=st.integers(1, 3),
    resume_world_size=st.integers(1, 3),
    after=st.integers(0, 3),
    num_workers=st.sampled_from([0, 0, 1]),
)
@example(seed=5, world_size=2, resume_world_size=2, after=2, num_workers=0)
@example(seed=6, world_size=1, resume_world_size=3, after=1, num_workers=1)
@example(seed=14, world_size=3, resume_world_size=2, after=2, num_workers=0)
def test_selection_resume_continues_exactly(
    living, tmp_path_factory, seed, world_size, resume_world_size, after, num_workers
):
    url, truth = _selection(living, seed, 0.5, tmp_path_factory)

    def make(rank: int, world_size: int):
        return _load(url, rank=rank, world_size=world_size, num_workers=num_workers, batch_size=2)

    after = min(after, len(make(rank=0, world_size=world_size)) - 1)  # a save inside the epoch
    if resume_world_size == world_size:  # exact: batch for batch the uninterrupted epoch
        out = check_resume(make, after=after, world_size=world_size)
        assert set(out.keys()) == set(truth)
    else:  # elastic: the rest of the epoch covers exactly what was not consumed (pad repeats aside)
        heads, states = [], []
        for rank in range(world_size):
            loader = make(rank=rank, world_size=world_size)
            it = iter(loader)
            heads += [k for _ in range(after) for k in next(it)[2]]
            states.append(json.loads(json.dumps(loader.state_dict())))
            del it
            loader.close()
        assert all(st_ == states[0] for st_ in states), "ranks saved different states"
        rests, counts = [], []
        for rank in range(resume_world_size):
            loader = make(rank=rank, world_size=resume_world_size)
            loader.load_state_dict(states[0])
            got = _deliveries(loader, living, truth)
            counts.append(-(-len(got) // 2))
            rests += got
            loader.close()
        assert len(set(counts)) == 1, f"unequal batches over the resumed ranks: {counts}"
        _exactly_once(heads + rests, truth, world_size + resume_world_size)
    shutil.rmtree(url)


@pytest.mark.parametrize("generation", [0, 1, 2, None])
def test_each_generation_reads_what_it_holds(living, generation):
    truth = living.generations[-1 if generation is None else generation]
    loader = _load(living.url, generation=generation, batch_size=5)
    keys = _deliveries(loader, living, truth)
    assert sorted(keys) == sorted(truth) and len(loader) == -(-len(truth) // 5)
    assert loader.dataset.generations == (len(living.generations) - 1 if generation is None else generation,)


def test_removed_keys_never_delivered_and_relabelled_keys_carry_the_new_label(living):
    removed = set(living.generations[1]) - set(living.latest)
    changed = {k for k in living.latest if living.latest[k] != living.generations[1][k]}
    assert len(removed) == 4 and len(changed) == 4
    for fields in (None, ("image", "label", "key", "meta")):
        loader = _load(living.url, world_size=1, rank=0, with_keys=fields is None, fields=fields, batch_size=6)
        seen = {}
        for b in loader:
            ks, ys = (b[2], b[1].tolist()) if fields is None else (b["key"], b["label"].tolist())
            seen.update(zip(ks, ys))
            if fields is not None:
                for k, meta in zip(b["key"], b["meta"]):
                    assert meta["class"] == living.classes[living.latest[k]], f"{k}: metadata names the old class"
        assert not removed & set(seen) and all(seen[k] == living.latest[k] for k in changed)


def test_a_mixture_source_may_be_a_selection(living, tmp_path):
    # the last stored sample in, the one before it out: its stored position lies past the selection's planned ids
    chosen = set(living.order[::3]) - {living.order[-2]} | {living.order[-1]}
    url = select(living, chosen, str(tmp_path / "sel"))
    truth = {k: y for k, y in living.latest.items() if k in chosen}
    loader = shardkit.load(
        [shardkit.Source(url, repeat=1), shardkit.Source(living.url, repeat=1)],
        batch_size=4,
        num_workers=0,
        preset="eval",
        size=8,
        with_keys=True,
    )
    keys = [k for _, _, ks in loader for k in ks]
    sel = [k.split("/", 1)[1] for k in keys if k.startswith("0/")]
    whole = [k.split("/", 1)[1] for k in keys if k.startswith("1/")]
    assert sorted(sel) == sorted(truth) and sorted(whole) == sorted(living.latest)


def test_max_hole_bytes_zero_reads_only_the_selected_samples(tmp_path):
    living = convert_split(str(tmp_path), 60, shard_size=30)
    chosen = set(living.order[::10])  # 10 %, scattered over both shards
    url, truth = select(living, chosen, str(tmp_path / "sel")), {k: living.latest[k] for k in chosen}
    read = {}
    for hole in (None, 0):
        loader = _load(url, batch_size=2, **({} if hole is None else {"max_hole_bytes": hole}))
        assert sorted(_deliveries(loader, living, truth)) == sorted(truth)
        read[hole] = loader.stats.bytes_read
    assert read[0] * 3 < read[None], f"max_hole_bytes=0 read {read[0]} bytes, the default {read[None]}"
    shutil.rmtree(url)


# ------------------------------------------------------------------------------------------------ generations in states


def test_append_then_resume_continues_the_saved_generation(tmp_path):
    lv = convert_split(str(tmp_path), 30, shard_size=6)
    before = lv.generations[0]

    def make(**kw):
        return _load(lv.url, batch_size=3, world_size=2, rank=0, **kw)

    reference = [take(b, False) for b in make()]
    loader = make()
    it = iter(loader)
    head = [take(next(it), False) for _ in range(2)]
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    loader.close()
    append(lv, list(range(30, 42)))
    fresh = make()
    assert fresh.dataset.generations == (1,) and len(fresh) > len(reference)
    fresh_keys = {k for b in fresh for k in b[2]}
    assert fresh_keys & {k for k in lv.latest if k not in before}, "a loader opened after the append misses it"
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.dataset.generations == (0,) and len(resumed) == len(reference)
    rest = [take(b, False) for b in resumed]
    assert [b.keys for b in head + rest] == [b.keys for b in reference]
    assert [b.labels for b in head + rest] == [b.labels for b in reference]
    again = resumed.state_dict()
    assert again["dataset"].get("generation") == 0 and again["epoch"] == 1


def test_states_record_the_generation_and_the_snapshot(living):
    state = _load(living.url).state_dict()
    assert state["dataset"]["generation"] == 2 and ":" in state["dataset"]["snapshot"]
    for gen in (0, 1):
        resumed = _load(living.url)
        resumed.load_state_dict(_load(living.url, generation=gen).state_dict())
        assert resumed.dataset.generations == (gen,)


def test_a_plain_split_state_is_unchanged(tmp_path):
    lv = convert_split(str(tmp_path), 8, shard_size=3)
    state = _load(lv.url).state_dict()
    assert set(state["dataset"]) == {"shard_sizes", "shard_sha256", "classes"}
    del state["dataset"]["classes"]  # a state of an older shardkit (no classes fingerprint): refused, named
    with pytest.raises(ShardkitError, match="class names"):
        _load(lv.url).load_state_dict(state)


def test_a_state_of_another_snapshot_is_refused(living, tmp_path, tmp_path_factory):
    a = select(living, set(living.order[::2]), str(tmp_path / "a"), generation=1)  # of generation 1
    b, _ = _selection(living, 22, 0.5, tmp_path_factory)
    state = _load(a).state_dict()
    other = _load(b)
    with pytest.raises(ShardkitError, match="another dataset") as err:
        other.load_state_dict(state)
    assert "\n" not in str(err.value)
    whole = _load(living.url)
    with pytest.raises(ShardkitError, match="another dataset"):
        whole.load_state_dict(state)
    assert whole.dataset.generations == (2,), "a refused state left the loader re-pinned"
    corrected = _load(living.url, generation=1).state_dict()  # the same shards without generation 2's corrections
    corrected["dataset"]["generation"] = 2
    with pytest.raises(ShardkitError, match="another dataset"):
        _load(living.url).load_state_dict(corrected)
    shutil.rmtree(b)


def test_a_state_of_a_generation_the_split_lacks_is_refused_in_one_line(living):
    state = _load(living.url).state_dict()
    state["dataset"]["generation"] = 7
    with pytest.raises(ShardkitError, match="no generation 7") as err:
        _load(living.url).load_state_dict(state)
    assert "\n" not in str(err.value)


def test_generation_with_a_mixture_is_refused():
    with pytest.raises(ValueError, match="generation= pins a lone dataset"):
        shardkit.load([shardkit.Source("a", repeat=1), shardkit.Source("b", repeat=1)], generation=0)


def test_a_selection_has_its_own_generation_only(living, tmp_path_factory):
    url, _ = _selection(living, 3, 0.5, tmp_path_factory)
    assert os.path.exists(os.path.join(url, "manifest.json"))
    with pytest.raises(ShardkitError, match="no generation 0"):
        _load(url, generation=0)
    shutil.rmtree(url)


def test_a_state_of_a_selection_of_the_same_counts_is_refused(living, tmp_path):
    shard = [k for k in living.order[:6] if k in living.latest]  # the first shard's keys that are in
    a = select(living, {shard[0], shard[2]}, str(tmp_path / "a"))
    b = select(living, {shard[1], shard[2]}, str(tmp_path / "b"))  # the same count in every shard, other samples
    state = _load(a, batch_size=1).state_dict()
    with pytest.raises(ShardkitError, match="corrections or selection differ"):
        _load(b, batch_size=1).load_state_dict(state)


def test_views_and_a_progressive_size_on_a_selection(living, tmp_path):
    chosen = set(living.order[1::4])
    url = select(living, chosen, str(tmp_path / "sel"))
    truth = {k: y for k, y in living.latest.items() if k in chosen}
    views = shardkit.load(url, batch_size=3, num_workers=0, views=[shardkit.View(6, count=2)], with_keys=True)
    got = []
    for crops, labels, keys in views:
        assert len(crops) == 2 and all(tuple(c.shape[1:]) == (3, 6, 6) for c in crops)
        assert [truth[k] for k in keys] == labels.tolist()
        got += keys
    assert sorted(got) == sorted(truth)
    loader = _load(url, batch_size=3)
    loader.set_epoch(1, size=12)
    assert sorted(_deliveries(loader, living, truth)) == sorted(truth) and loader.size == 12


def test_a_selection_of_a_split_without_sample_indexes_is_read_by_the_walk(tmp_path):
    from shardkit.format.snapshot.selection import write_selection
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path / "ds"), num_samples=30, shard_size=7)  # no sample index: the header walk
    mask = np.array([i % 3 == 1 or i in (6, 7) for i in range(30)])
    write_selection(ds.url, mask, str(tmp_path / "sel"))
    want = {k: ds.labels[k] for k, m in zip(ds.keys, mask.tolist()) if m}
    for world_size in (1, 2):
        got = []
        for rank in range(world_size):
            loader = shardkit.load(
                str(tmp_path / "sel"),
                batch_size=3,
                num_workers=0,
                size=8,
                with_keys=True,
                rank=rank,
                world_size=world_size,
            )
            for _, labels, keys in loader:
                assert [want[k] for k in keys] == labels.tolist()
                got += keys
        _exactly_once(got, want, world_size)


def test_a_mixture_state_re_pins_the_appended_source(tmp_path):
    a = convert_split(str(tmp_path / "a"), 14, shard_size=4)
    b = convert_split(str(tmp_path / "b"), 10, shard_size=4)

    def make():
        return shardkit.load(
            [shardkit.Source(a.url, weight=0.5), shardkit.Source(b.url, weight=0.5)],
            batch_size=3,
            num_workers=0,
            preset="eval",
            size=8,
            with_keys=True,
            seed=2,
        )

    reference = [list(k) for _, _, k in make()]
    loader = make()
    it = iter(loader)
    head = [list(next(it)[2]) for _ in range(2)]
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    append(a, list(range(14, 20)), shard_size=3)
    resumed = make()
    assert resumed.dataset.generations == (1, 0)
    resumed.load_state_dict(state)
    assert resumed.dataset.generations == (0, 0)
    assert head + [list(k) for _, _, k in resumed] == reference
