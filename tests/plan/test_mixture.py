"""Mixture planning invariants: exact counts, without replacement, shares per batch, exactly once, resume."""

from __future__ import annotations

import json
import pathlib
from collections import Counter

import numpy as np
import pytest

from shardkit.errors import ShardkitError
from shardkit.plan import (
    EpochPolicy,
    Explicit,
    LabelMode,
    Mixture,
    PlanConfig,
    Segment,
    Source,
    SourceData,
    Stream,
    as_sources,
    by_source,
    check_data,
    check_remix,
    epoch_stream,
    label_space,
    mixed_epoch,
    positions,
    qualify_keys,
    remaining,
    replanned,
    resume_mixtures,
    selection,
    source_epoch,
    source_epochs,
    window,
    worker_plan,
)
from shardkit.plan import epoch as plan
from shardkit.plan import source_seed as source_seed_of
from shardkit.plan.world import World
from tests.support.plans import rank_batches

A = [7, 7, 7, 3, 0, 7, 5]  # 36 samples, one empty shard
B = [4, 4, 2]  # 10
C = [5, 6, 6, 6]  # 23


def mix(*specs: tuple[list[int], dict], epoch_size: int | None = None) -> Mixture:
    return Mixture(
        tuple(Source(f"s{i}", **kw) for i, (_, kw) in enumerate(specs)), tuple(s for s, _ in specs), epoch_size
    )


def epoch_gids(m: Mixture, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    return np.concatenate([s.global_ids() for s in source_epochs(m, seed=seed, epoch=epoch, shuffle=shuffle)])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"weight": -1}, "weight must be"),
        ({"repeat": -0.5}, "repeat must be"),
        ({"weight": float("nan")}, "weight must be"),
        ({"choose": 0}, "choose must be"),
        ({"choose": 2.5}, "choose must be"),
        ({"weight": 1, "repeat": 2}, "not weight and repeat"),
    ],
)
def test_source_rejects_bad_specs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Source("x", **kw)


def test_source_normalises_numbers():
    s = Source("x", choose=np.int64(5), storage_options={"anon": True})
    assert s.choose == 5 and type(s.choose) is int and s.spec() == {"weight": None, "repeat": None, "choose": 5}
    assert Source("x", weight=np.float32(0.5)).weight == 0.5 and hash(s) == hash(
        Source("x", choose=5)
    )  # options do not count
    with pytest.raises(ValueError, match="non-empty string"):
        Source("")


def test_mixture_rejects_bad_lists():
    with pytest.raises(ValueError, match="source 1 .* give one of"):
        as_sources([Source("a", weight=1), "b"])
    with pytest.raises(ValueError, match="all weights are 0"):
        as_sources([Source("a", weight=0), Source("b", weight=0)])
    with pytest.raises(ValueError, match="epoch would be empty"):
        as_sources([Source("a", repeat=0)])
    with pytest.raises(ValueError, match="at least one source"):
        as_sources([])
    assert as_sources("a") == (Source("a"),)  # a lone URL: repeat 1, as today
    assert as_sources([pathlib.Path("/d/a")]) == (Source("/d/a"),)
    with pytest.raises(TypeError, match="not int"):
        as_sources([Source("a", weight=1), 3])
    with pytest.raises(ValueError, match="epoch_size applies to weighted"):
        mix((A, {"repeat": 1}), (B, {"choose": 3}), epoch_size=10)
    with pytest.raises(ValueError, match="more than the epoch size 20"):
        mix((A, {"weight": 1}), (B, {"choose": 30}), epoch_size=20)
    with pytest.raises(
        ValueError, match="up to 11 samples per epoch"
    ):  # 0.5 x 7 is 3 or 4 samples: refused at once, not in epoch 1
        mix(([7], {"repeat": 0.5}), (B, {"choose": 7}), (C, {"weight": 1}), epoch_size=10)
    with pytest.raises(ShardkitError, match="source 1 .* no samples"):
        mix((A, {"weight": 1}), ([0, 0], {"weight": 1}))


def test_check_data_names_the_problem():
    srcs = [Source("a", weight=1), Source("b", weight=1)]
    img = (("short_side", 256), ("max_side", None))
    with pytest.raises(ShardkitError, match=r"source 1 \(b\) has no samples"):
        check_data(srcs, [SourceData("a", "x", 5, img), SourceData("b", "y", 0, img)])
    with pytest.raises(ShardkitError, match="same split"):
        check_data(srcs, [SourceData("a", "x", 5, img), SourceData("b", "x", 5, img)])
    with pytest.raises(ShardkitError, match="--short-side"):
        check_data(
            srcs, [SourceData("a", "x", 5, img), SourceData("b", "y", 5, (("short_side", 160), ("max_side", None)))]
        )
    check_data(srcs, [SourceData("a", "x", 5, img), SourceData("b", "y", 5, img)])


# --------------------------------------------------------------------------- counts and selection


@pytest.mark.parametrize(
    "specs,epoch_size",
    [
        ([(A, {"weight": 0.7}), (B, {"weight": 0.3})], None),
        ([(A, {"weight": 0.7}), (B, {"weight": 0.3})], 13),
        ([(A, {"weight": 2}), (B, {"repeat": 0.5}), (C, {"choose": 4})], 50),
        ([(A, {"repeat": 1}), (B, {"repeat": 2.5}), (C, {"repeat": 0.3})], None),
    ],
)
def test_counts_exact_every_epoch(specs, epoch_size):
    m = mix(*specs, epoch_size=epoch_size)
    for e in range(12):
        c = m.counts(e)
        if epoch_size is not None:
            assert c.sum() == epoch_size
        elif any("weight" in kw for _, kw in specs):
            assert c.sum() == sum(map(sum, (s for s, _ in specs)))
        for i, (sizes, kw) in enumerate(specs):
            if "choose" in kw:
                assert c[i] == kw["choose"]
            if "repeat" in kw:  # cumulative rounding: whole epochs' worth lands exactly
                from fractions import Fraction

                assert m.starts(e + 1)[i] == int(Fraction(str(kw["repeat"])) * sum(sizes) * (e + 1))
        for seed in (0, 3):  # the selection has exactly the planned counts
            got = np.bincount(m.source_of(epoch_gids(m, seed, e)), minlength=len(specs))
            assert list(got) == list(c)


def test_weights_largest_remainder():
    m = mix((B, {"weight": 1}), (B, {"weight": 1}), (B, {"weight": 1}), epoch_size=10)
    assert list(m.counts(0)) == [4, 3, 3]  # 3.33 each: the extra seat to the lowest index
    m = mix((A, {"weight": 0.7}), (B, {"weight": 0.3}), epoch_size=100)
    assert list(m.counts(5)) == [70, 30]


@pytest.mark.parametrize("seed", [0, 7])
def test_without_replacement_across_epochs(seed):
    m = mix((A, {"repeat": 0.5}), (B, {"repeat": 2}), (C, {"repeat": 1}))
    for e in range(0, 6, 2):
        half = Counter(epoch_gids(m, seed, e).tolist()) + Counter(epoch_gids(m, seed, e + 1).tolist())
        assert {g: n for g, n in half.items() if m.source_of([g])[0] == 0} == {
            g: 1 for g in range(36)
        }  # 0.5x: once per 2 epochs
        for one in (e, e + 1):
            ids = Counter(epoch_gids(m, seed, one).tolist())
            assert {g: n for g, n in ids.items() if m.source_of([g])[0] == 1} == {
                g: 2 for g in range(36, 46)
            }  # 2x: twice
            assert {g: n for g, n in ids.items() if m.source_of([g])[0] == 2} == {
                g: 1 for g in range(46, 69)
            }  # 1x: once


def test_choose_cycles_through_the_source():
    m = mix((C, {"choose": 6}), (A, {"weight": 1}), epoch_size=20)
    seen: Counter = Counter()
    for e in range(12):
        ids = [g for g in epoch_gids(m, 1, e).tolist() if g < 23]
        assert len(ids) == 6 == len(set(ids))
        seen.update(ids)
        assert max(seen.values()) - min(seen[g] for g in range(23)) <= 1  # a fresh subset until the source is used up
    big = mix(
        (B, {"choose": 25}), (A, {"weight": 1}), epoch_size=40
    )  # more than the source: whole passes, then the rest
    ids = Counter(g for g in epoch_gids(big, 0, 0).tolist() if g < 10)
    assert sorted(ids.values()) == [2] * 5 + [3] * 5


def test_selection_is_contiguous_runs_of_the_source_stream():
    s = selection(A, seed=4, start=30, count=40)  # passes 0 (tail), 1 (all), 2 (head)
    full = np.concatenate([Stream.full_epoch(A, seed=4, epoch=p).global_ids() for p in range(3)])
    assert list(s.global_ids()) == list(full[30:70])
    assert len(s.run_shard) <= 2 * len(A) + 2  # runs, not samples


# --------------------------------------------------------------------------- interleave and shares


def test_interleave_is_a_bijection_and_windows_agree():
    for counts in ([7, 3, 0, 5], [1, 1], [100, 1], [13, 29, 7, 1, 50]):
        c = np.array(counts)
        src, k = window(c, 0, int(c.sum()))
        for i in range(len(c)):
            assert list(k[src == i]) == list(range(c[i]))
            assert list(positions(c, np.full(c[i], i), np.arange(c[i]))) == list(np.flatnonzero(src == i))
        for a in range(0, int(c.sum()), 7):
            s2, k2 = window(c, a, min(int(c.sum()), a + 11))
            assert list(s2) == list(src[a : a + 11]) and list(k2) == list(k[a : a + 11])


def shares_ok(batch_sources: np.ndarray, counts: np.ndarray) -> bool:
    """Every source within the documented bound of its share: floor/ceil for 2 sources, <= 1 + (S-2)*c_i/N else."""
    n, S = counts.sum(), len(counts)
    dev = np.abs(np.bincount(batch_sources, minlength=S) - len(batch_sources) * counts / n)
    return bool(np.all(dev < 1)) if S == 2 else bool(np.all(dev <= 1 + (S - 2) * counts / n))


@pytest.mark.parametrize("seed", range(4))
def test_every_window_of_the_interleave_keeps_the_shares(seed):
    rng = np.random.default_rng(seed)
    for _ in range(6):
        counts = rng.integers(0, 30, size=int(rng.integers(2, 6))) * rng.integers(1, 4)
        counts[0] += 1
        src = np.tile(window(counts, 0, int(counts.sum()))[0], 2)  # windows wrap around (padding)
        for L in range(1, int(counts.sum()) + 1):
            for a in range(0, int(counts.sum()), 3):
                assert shares_ok(src[a : a + L], counts), (counts, a, L)


@pytest.mark.parametrize(
    "specs",
    [
        [(A, {"weight": 0.7}), (C, {"weight": 0.3})],
        [(A, {"repeat": 1}), (B, {"repeat": 3}), (C, {"choose": 9})],
    ],
)
@pytest.mark.parametrize("R,W,Bs", [(1, 1, 8), (2, 3, 5), (3, 2, 4)])
def test_every_batch_keeps_the_shares(specs, R, W, Bs):
    m = mix(*specs)
    cfg = PlanConfig(batch_size=Bs, seed=2, shuffle_buffer=12, shuffle_initial=4)
    for e in range(3):
        stream = mixed_epoch(m, seed=2, epoch=e)
        for r in range(R):
            for b in rank_batches(stream, cfg, R, W, r, epoch=e):
                assert shares_ok(m.source_of(b), m.counts(e)), (e, r, m.source_of(b))


def test_block_order_keeps_source_pattern_and_groups_reads():
    src = np.array([0, 1, 0, 2, 0, 1, 0, 2])
    perm = np.random.default_rng(0).permutation(8)
    order = by_source(perm, src)
    assert sorted(order) == list(range(8)) and list(src[order]) == list(src)
    m = mix((A, {"weight": 0.5}), (C, {"weight": 0.5}))
    cfg = PlanConfig(batch_size=4, seed=1, shuffle_buffer=16)
    for blk in worker_plan(mixed_epoch(m, seed=1, epoch=0), cfg, World(), epoch=0).blocks:
        s = m.source_of(blk.gids)
        assert list(s) == sorted(s)  # each source read in one run per block
        shards = np.searchsorted(m.shard_offsets, blk.gids, side="right") - 1
        assert np.sum(np.diff(shards) != 0) <= len(set(shards.tolist())) - 1  # never back to a shard once left


# --------------------------------------------------------------------------- split, resume, elastic


@pytest.mark.parametrize("R", [1, 2, 3])
@pytest.mark.parametrize("W", [1, 3])  # num_workers=0 plans as one worker
@pytest.mark.parametrize("policy", list(EpochPolicy))
@pytest.mark.parametrize("drop_last", [False, True])
def test_exactly_once_and_equal_batches(R, W, policy, drop_last):
    m = mix((A, {"weight": 0.6}), (B, {"weight": 0.1}), (C, {"weight": 0.3}), epoch_size=61)
    cfg = PlanConfig(batch_size=4, seed=3, shuffle_buffer=8, policy=policy, drop_last=drop_last)
    stream = mixed_epoch(m, seed=3, epoch=1)
    planned = Counter(epoch_gids(m, 3, 1).tolist())
    split = plan.rank_split(len(stream), R, cfg)
    per_rank = [rank_batches(stream, cfg, R, W, r, epoch=1) for r in range(R)]
    assert {len(b) for b in per_rank} == {split.num_batches}
    got = Counter(int(g) for batches in per_rank for b in batches for g in b)
    assert sum(got.values()) == split.used * R == 61 + split.padded - split.dropped
    extra, missing = got - planned, planned - got
    assert sum(extra.values()) == split.padded and sum(missing.values()) == split.dropped


@pytest.mark.parametrize("R,W", [(1, 1), (2, 3), (3, 2)])
def test_resume_same_topology_equals_uninterrupted(R, W):
    m = mix((A, {"weight": 0.7}), (B, {"repeat": 1.5}), epoch_size=50)
    cfg = PlanConfig(batch_size=3, seed=5, shuffle_buffer=5, shuffle_initial=2)
    stream = mixed_epoch(m, seed=5, epoch=2)
    for r in range(R):
        full = rank_batches(stream, cfg, R, W, r, epoch=2)
        for k in range(len(full) + 1):
            rest = rank_batches(stream, cfg, R, W, r, epoch=2, batches_done=k)
            assert [list(b) for b in rest] == [list(b) for b in full[k:]], (r, k)


@pytest.mark.parametrize("old,new", [((3, 2), (2, 1)), ((2, 1), (3, 2)), ((1, 1), (4, 2))])
@pytest.mark.parametrize("policy", list(EpochPolicy))
def test_elastic_resume_covers_exactly_the_unseen(old, new, policy):
    m = mix((A, {"weight": 0.5}), (B, {"repeat": 2}), (C, {"choose": 11}), epoch_size=67)
    cfg = PlanConfig(batch_size=2, seed=9, shuffle_buffer=4, policy=policy)
    (R0, W0), (R1, W1) = old, new
    stream = epoch_stream(m, cfg, 0)
    first = plan.rank_split(len(stream), R0, cfg)
    k = first.num_batches // 2
    seen = Counter(int(g) for r in range(R0) for b in rank_batches(stream, cfg, R0, W0, r)[:k] for g in b)
    rest_stream = epoch_stream(m, cfg, 0, [Segment(R0, W0, k)])
    second = plan.rank_split(len(rest_stream), R1, cfg)
    rest = [rank_batches(rest_stream, cfg, R1, W1, r, generation=1) for r in range(R1)]
    assert {len(b) for b in rest} == {second.num_batches}
    later = Counter(int(g) for batches in rest for b in batches for g in b)
    planned = Counter(epoch_gids(m, 9, 0).tolist())
    everything = seen + later
    if policy is EpochPolicy.PAD:  # every planned sample at least as often as planned; extra only via reported padding
        assert not planned - everything and sum((everything - planned).values()) <= first.padded + second.padded
    else:
        assert not everything - planned and sum((planned - everything).values()) == first.dropped + second.dropped


# --------------------------------------------------------------------------- one source is today's plan


@pytest.mark.parametrize("R,W", [(1, 1), (2, 3), (3, 2)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_one_source_is_the_single_dataset_plan(R, W, shuffle):
    m = Mixture((Source("a"),), (A,))
    cfg = PlanConfig(batch_size=3, seed=5, shuffle=shuffle, shuffle_buffer=5, shuffle_initial=2)
    for e in range(3):
        for history in ([], [Segment(2, 2, 3)], [Segment(3, 1, 2), Segment(1, 2, 1)]):
            mine = epoch_stream(m, cfg, e, history)
            theirs = replanned(
                Stream.full_epoch(A, seed=cfg.seed, epoch=e, shuffle=cfg.shuffle), cfg, e, history
            )  # the plain stream
            assert list(mine.window(0, len(mine))[1]) == list(theirs.window(0, len(theirs))[1])
            for r in range(R):
                for w in range(W):
                    for k in (0, 1, 4):
                        a = worker_plan(mine, cfg, World(r, R, w, W), epoch=e, batches_done=k, generation=len(history))
                        b = worker_plan(
                            theirs, cfg, World(r, R, w, W), epoch=e, batches_done=k, generation=len(history)
                        )
                        assert a.world == b.world and a.skip == b.skip and len(a.blocks) == len(b.blocks)
                        for x, y in zip(a.blocks, b.blocks):
                            assert np.array_equal(x.gids, y.gids) and np.array_equal(x.order, y.order)


# --------------------------------------------------------------------------- labels, keys, remix


def test_labels_merged_and_per_source():
    space = label_space([["cat", "dog"], ["ant", "dog", "zebra"]])
    assert space.classes == ("ant", "cat", "dog", "zebra")
    assert list(space.map(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 0, 1, 2]))) == [1, 2, 0, 2, 3]
    apart = label_space([["cat", "dog"], ["ant", "dog", "zebra"]], "per_source")
    assert apart.classes == ("0/cat", "0/dog", "1/ant", "1/dog", "1/zebra")
    assert list(apart.map(np.array([1, 0]), np.array([1, 1]))) == [3, 1]
    with pytest.raises(ValueError, match="choose one of"):
        LabelMode.parse("union")
    assert qualify_keys([1, 0], ["00000042", "x"]) == ["1/00000042", "0/x"]
    same = label_space([["b", "a"], ["b", "a"]])  # one class list (one source): kept as is, labels unchanged
    assert same.classes == ("b", "a") and list(same.map(np.array([0, 1]), np.array([7, 1]))) == [7, 1]
    assert label_space([[]]).classes == ()  # a lone unlabelled source passes its labels through
    with pytest.raises(ValueError, match="source 1 has no class names"):
        label_space([["a"], []])


def test_remix_refused_naming_the_difference():
    saved = mix((A, {"weight": 0.7}), (B, {"weight": 0.3})).describe()
    assert not check_remix(saved, mix((A, {"weight": 0.7}), (B, {"weight": 0.3})).describe())
    with pytest.raises(ShardkitError, match=r"source 1: weight 0.3 -> 0.5.*allow_remix=True"):
        check_remix(saved, mix((A, {"weight": 0.7}), (B, {"weight": 0.5})).describe())
    with pytest.raises(ShardkitError, match=r"2 sources -> 3.*source 1: other data"):
        check_remix(saved, mix((A, {"weight": 0.7}), (C, {"weight": 0.3}), (B, {"weight": 1})).describe())
    assert check_remix(saved, mix((A, {"weight": 1}), (B, {"weight": 1})).describe(), allow_remix=True)


def test_remaining_of_fresh_epoch_is_the_epoch():
    m = mix((A, {"weight": 0.5}), (C, {"weight": 0.5}))
    cfg = PlanConfig(batch_size=4)
    stream = mixed_epoch(m, seed=0, epoch=0)
    rest = remaining(stream, cfg, 2, 2, epoch=0, batches_done=0)
    assert isinstance(rest, Explicit) and list(rest.window(0, len(rest))[1]) == list(stream.window(0, len(stream))[1])


@pytest.mark.parametrize("R,W", [(1, 1), (2, 3)])
def test_no_batch_holds_a_sample_twice(R, W):
    m = mix(([2] * 5, {"repeat": 3}), (A * 3, {"repeat": 1}))  # 10 samples seen 3x per epoch, ~2 in every batch of 8
    cfg = PlanConfig(batch_size=8, seed=0, shuffle_buffer=64)
    for e in range(8):
        stream = mixed_epoch(m, seed=e, epoch=e)
        for r in range(R):
            batches = rank_batches(stream, cfg, R, W, r, epoch=e)
            assert all(len(set(b.tolist())) == len(b) for b in batches)
            rest = rank_batches(
                stream, cfg, R, W, r, epoch=e, batches_done=3
            )  # the swaps are part of the plan: resume agrees
            assert [list(b) for b in rest] == [list(b) for b in batches[3:]]
        got = Counter(int(g) for r in range(R) for b in rank_batches(stream, cfg, R, W, r, epoch=e) for g in b)
        split = plan.rank_split(len(stream), R, cfg)
        assert sum((got - Counter(epoch_gids(m, e, e).tolist())).values()) == split.padded


def test_remix_continues_each_shared_source_without_replacement():
    old = mix((A, {"weight": 0.5}), (B, {"weight": 0.5}))
    new = Mixture((Source("a", weight=0.8), Source("c", weight=0.2)), (A, C))
    saved = json.loads(json.dumps(old.describe()))  # what a state dict holds
    with pytest.raises(ShardkitError, match=r"source 0: weight 0.5 -> 0.8; source 1: other data"):
        resume_mixtures(saved, new, 2, mid_epoch=True)
    with pytest.raises(ShardkitError, match=r"source 1 is not among the current sources.*set_epoch\(3\)"):
        resume_mixtures(saved, new, 2, mid_epoch=True, allow_remix=True)  # b is gone: epoch 2 cannot finish as saved
    now, same = resume_mixtures(saved, new, 3, mid_epoch=False, allow_remix=True)  # at an epoch's start: switch at once
    assert now is same and now.first_epoch == 3 and now.offsets == (int(old.starts(3)[0]), 0)
    keep_b = Mixture(new.sources + (Source("b", weight=0.1),), (A, C, B))
    finish, after = resume_mixtures(saved, keep_b, 2, mid_epoch=True, allow_remix=True)
    assert [s.url for s in finish.sources] == ["a", "b"]  # the saved mixture finishes epoch 2 (found by shard sizes)...
    assert list(finish.counts(2)) == list(old.counts(2)) and after.first_epoch == 3  # ...the new one starts at epoch 3
    ids_a = [source_epoch(finish if e < 3 else after, 0, seed=1, epoch=e).global_ids() for e in range(6)]
    total = sum(len(x) for x in ids_a)
    assert list(np.concatenate(ids_a)) == list(
        selection(A, seed=1, start=0, count=total).global_ids()
    )  # one stream, no gap or repeat
    assert after.seed_keys == (0, 2, 1)  # c is new: a fresh seed, not b's; b keeps its own
    assert list(source_epoch(after, 1, seed=1, epoch=3).global_ids() - after.gid_base[1]) == list(
        selection(C, seed=source_seed_of(1, 2), start=0, count=int(after.counts(3)[1])).global_ids()
    )
    again, _ = resume_mixtures(
        json.loads(json.dumps(after.describe())), keep_b, 4, mid_epoch=True
    )  # saved after the switch
    assert again.first_epoch == 3 and list(again.starts(4)) == list(after.starts(4))
    # saved while the old mixture finishes epoch 2 (a switch pending): resumes without allow_remix, the switch still at epoch 3
    f2, a2 = resume_mixtures(
        json.loads(json.dumps(finish.describe())),
        keep_b,
        2,
        mid_epoch=True,
        saved_next=json.loads(json.dumps(after.describe())),
    )
    assert list(f2.counts(2)) == list(finish.counts(2)) and list(f2.starts(2)) == list(finish.starts(2))
    assert a2.first_epoch == 3 and a2.offsets == after.offsets and a2.seed_keys == after.seed_keys


def random_config(rng: np.random.Generator, seed: int) -> PlanConfig:
    """A plan config of ``seed`` with a random batch size, shuffle, buffer, drop_last and epoch policy."""
    return PlanConfig(
        batch_size=int(rng.integers(1, 6)),
        seed=seed,
        shuffle=bool(rng.integers(0, 4)),
        shuffle_buffer=int(rng.integers(1, 9)),
        shuffle_initial=int(rng.integers(0, 5)),
        drop_last=bool(rng.integers(0, 2)),
        policy=list(EpochPolicy)[int(rng.integers(0, 2))],
    )


@pytest.mark.parametrize("seed", range(6))
def test_one_source_remaining_equals_single_dataset(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 9, size=int(rng.integers(1, 12))).tolist()
    m = Mixture((Source("a"),), (sizes,))
    for _ in range(8):
        cfg = random_config(rng, seed)
        R, W = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        stream = epoch_stream(m, cfg, 1)
        k = int(rng.integers(0, plan.rank_split(len(stream), R, cfg).num_batches + 2))
        mine = remaining(stream, cfg, R, W, epoch=1, batches_done=k)
        theirs = remaining(
            Stream.full_epoch(sizes, seed=cfg.seed, epoch=1, shuffle=cfg.shuffle), cfg, R, W, epoch=1, batches_done=k
        )
        assert list(mine.gids) == list(theirs.gids), (cfg, R, W, k)


def random_mixture(rng: np.random.Generator) -> Mixture:
    """1-4 sources of 1-4 shards (some empty), each with a random weight, repeat or choose."""
    specs = []
    for _ in range(int(rng.integers(1, 5))):
        sizes = rng.integers(0, 7, size=int(rng.integers(1, 5))).tolist()
        sizes[0] += 1
        kind = int(rng.integers(0, 3))
        if kind == 0:
            kw = {"weight": float(rng.integers(0, 4)) + 0.5}
        elif kind == 1:
            kw = {"repeat": float(rng.choice([0.5, 1, 1.5, 2, 3]))}
        else:
            kw = {"choose": int(rng.integers(1, 12))}
        specs.append((sizes, kw))
    fixed = sum(kw.get("choose", 0) + int(np.ceil(kw.get("repeat", 0) * sum(sizes))) for sizes, kw in specs)
    weighted = any("weight" in kw for _, kw in specs)
    return mix(*specs, epoch_size=fixed + int(rng.integers(1, 40)) if weighted else None)


@pytest.mark.parametrize("seed", range(20))  # 300 seeds pass too (8 s)
def test_random_mixtures_exactly_once_resume_and_elastic(seed):
    rng = np.random.default_rng(100 + seed)
    m = random_mixture(rng)
    cfg = random_config(rng, seed)
    e = int(rng.integers(0, 4))
    (R0, W0), (R1, W1) = [(int(rng.integers(1, 4)), int(rng.integers(1, 4))) for _ in range(2)]
    stream = epoch_stream(m, cfg, e)
    planned = Counter(epoch_gids(m, seed, e, cfg.shuffle).tolist())
    split = plan.rank_split(len(stream), R0, cfg)
    full = [rank_batches(stream, cfg, R0, W0, r, epoch=e) for r in range(R0)]
    got = Counter(int(g) for bs in full for b in bs for g in b)
    assert sum((got - planned).values()) == split.padded and sum((planned - got).values()) == split.dropped
    assert all(shares_ok(m.source_of(b), m.counts(e)) for bs in full for b in bs)
    k = int(rng.integers(0, split.num_batches + 1))
    for r in range(R0):
        assert [list(b) for b in rank_batches(stream, cfg, R0, W0, r, epoch=e, batches_done=k)] == [
            list(b) for b in full[r][k:]
        ]
    seen = Counter(int(g) for bs in full for b in bs[:k] for g in b)
    rest = epoch_stream(m, cfg, e, [Segment(R0, W0, k)])
    second = plan.rank_split(len(rest), R1, cfg)
    later = Counter(
        int(g) for r in range(R1) for b in rank_batches(rest, cfg, R1, W1, r, epoch=e, generation=1) for g in b
    )
    everything = seen + later
    if cfg.policy is EpochPolicy.PAD and not cfg.drop_last:
        assert not planned - everything and sum((everything - planned).values()) <= split.padded + second.padded
    else:
        assert not everything - planned and sum((planned - everything).values()) == split.dropped + second.dropped


def test_unshuffled_mixture_reads_in_bounded_blocks_in_stream_order():
    m = mix((A, {"weight": 0.5}), (C, {"weight": 0.5}))
    cfg = PlanConfig(batch_size=4, shuffle=False, shuffle_buffer=8, shuffle_initial=0)
    stream = mixed_epoch(m, seed=0, epoch=0, shuffle=False)
    wp = worker_plan(stream, cfg, World(), epoch=0)
    assert max(len(b.gids) for b in wp.blocks) <= 8  # one block of bytes in memory, not the chunk
    assert list(wp.emission_order()) == list(stream.window(0, len(stream))[1])  # evaluation order: the stream's
    rest = worker_plan(stream, cfg, World(), epoch=0, batches_done=3)
    assert list(rest.emission_order()) == list(wp.emission_order()[12:])
