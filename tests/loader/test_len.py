"""``len(loader)`` and ``loader.epoch_info`` describe the pass the next ``iter()`` gives.

Oracle: for generated small mixtures (fractional ``repeat`` makes epochs differ by a batch),
batch sizes and ways of driving a pass (whole, ``islice(len)``, ``zip(range(len), L)``, a
``break`` after k batches), a deliberately simple reference computes each epoch's batches
(cumulative rounding down of ``repeat * size``, per source) and how often every sample must
have appeared after E epochs (each source's stream is pass after pass of all its samples, so
after ``C`` samples of a source of ``n``, ``C mod n`` samples were seen ``C // n + 1`` times and
the others ``C // n`` times). After every pass ``len()`` must be the number of batches of the
epoch the next ``iter()`` continues, and that iteration must yield exactly the rest of it.
"""

from __future__ import annotations

import collections
import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit import Source
from tests.support.data import write_dataset

SIZES = (5, 7, 8, 11)
REPEATS = (0.3, 0.5, 0.7, 1, 1.5, 2.5)
KW = dict(size=16, pin_memory=False, num_workers=0, with_keys=True, shuffle_buffer=4)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    root = tmp_path_factory.mktemp("len")
    return {
        n: write_dataset(
            str(root / f"d{n}"), num_samples=n, shard_size=3, num_classes=2, size=(20, 20), distinct_images=2
        )
        for n in SIZES
    }


def ref_counts(repeats, sizes, epoch):
    """Samples of each source in ``epoch``: floor((e+1) r n) - floor(e r n), r as the decimal it prints as."""
    return [
        math.floor((epoch + 1) * Fraction(repr(r)) * n) - math.floor(epoch * Fraction(repr(r)) * n)
        for r, n in zip(repeats, sizes)
    ]


def ref_batches(repeats, sizes, epoch, batch_size):
    return -(-sum(ref_counts(repeats, sizes, epoch)) // batch_size)


def _keys(batch):
    return list(batch[2])


def drive(loader, how, k):
    """One pass of ``loader`` driven as ``how``; returns the batches' keys."""
    if how == "full":
        return [_keys(b) for b in loader]
    if how == "islice":
        return [_keys(b) for b in itertools.islice(iter(loader), len(loader))]
    if how == "zip":
        return [_keys(b) for _, b in zip(range(len(loader)), loader)]
    out = []
    for b in loader:  # "break": leave after k batches (the epoch continues on the next iter())
        out.append(_keys(b))
        if len(out) >= k:
            break
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(spec=[(5, 1), (11, 0.5)], batch_size=2, passes=[("islice", 1), ("islice", 1), ("zip", 1), ("full", 1)])
@example(
    spec=[(5, 0.3), (11, 0.3)],
    batch_size=2,
    passes=[("full", 1), ("break", 2), ("islice", 1), ("break", 9), ("full", 1)],
)
@given(
    spec=st.lists(
        st.tuples(st.sampled_from(SIZES), st.sampled_from(REPEATS)), min_size=1, max_size=2, unique_by=lambda t: t[0]
    ),
    batch_size=st.integers(2, 5),
    passes=st.lists(
        st.tuples(st.sampled_from(["full", "islice", "zip", "break"]), st.integers(1, 3)), min_size=3, max_size=7
    ),
)
def test_len_is_the_next_pass_and_every_sample_comes_as_promised(pool, spec, batch_size, passes):
    sizes = [n for n, _ in spec]
    repeats = [r for _, r in spec]
    sources = [Source(pool[n].url, repeat=r) for n, r in spec]
    loader = shardkit.load(sources if len(sources) > 1 else sources[0], batch_size=batch_size, seed=1, **KW)
    seen = collections.Counter()
    epoch, done = 0, 0  # the reference's position: epoch and batches of it already handed out
    for how, k in passes:
        expect = ref_batches(repeats, sizes, epoch, batch_size)
        assert len(loader) == expect, f"len() before a pass of epoch {epoch} ({done} done)"
        info = loader.epoch_info
        assert (info.epoch, info.num_batches) == (epoch, expect)
        got = drive(loader, how, k)
        want = expect - done if how != "break" else min(k, expect - done)
        assert len(got) == want, f"{how}: pass of epoch {epoch} after {done} batches"
        for keys in got:
            seen.update(keys if len(sources) > 1 else [f"0/{x}" for x in keys])
        done += len(got)
        if done == expect:  # (a break exactly at the end too: the next iter() finds the epoch consumed)
            epoch, done = epoch + 1, 0
    assert len(loader) == ref_batches(repeats, sizes, epoch, batch_size)
    # every sample of every source as often as the reference says for the whole epochs consumed
    finished = epoch
    for i, (n, r) in enumerate(zip(sizes, repeats)):
        used = sum(ref_counts(repeats, sizes, e)[i] for e in range(finished))
        if done:  # a partly consumed epoch: the whole-epoch counts do not apply
            continue
        per = collections.Counter(seen[f"{i}/{key}"] for key in pool[n].keys)
        want = collections.Counter({used // n + 1: used % n, used // n: n - used % n})
        assert +per == +want, f"source {i} ({n} samples, repeat {r}) after {finished} epochs"
    loader.close()


def _two(pool):
    return [Source(pool[5].url, repeat=1), Source(pool[11].url, repeat=0.5)]  # epochs of 10, 11, 10, 11 samples


@pytest.mark.parametrize("workers", [0, 2])
def test_islice_of_len_then_next_pass_is_the_whole_next_epoch(pool, workers):
    """The reported case: after ``islice(iter(L), len(L))`` the next pass is the next epoch, whole: batch for
    batch the epoch a whole pass gives (persistent workers too)."""
    opts = dict(KW, num_workers=workers, multiprocessing_context="fork")
    ref = shardkit.load(_two(pool), batch_size=2, seed=0, **opts)
    whole = [[_keys(b) for b in ref] for _ in range(4)]
    ref.close()
    loader = shardkit.load(_two(pool), batch_size=2, seed=0, **opts)
    lens = []
    for epoch in range(4):
        n = len(loader)
        got = [_keys(b) for b in itertools.islice(iter(loader), n)]
        assert got == whole[epoch], f"epoch {epoch}"
        lens.append(n)
    assert len(set(lens)) > 1  # the epochs differ in length
    assert lens == [ref_batches([1, 0.5], [5, 11], e, 2) for e in range(4)]
    loader.close()


def test_epoch_info_after_a_pass_says_which_epoch(pool):
    loader = shardkit.load(_two(pool), batch_size=2, seed=0, **KW)
    assert loader.epoch_info.epoch == 0 and loader.epoch == 0
    list(loader)
    info = loader.epoch_info
    assert (info.epoch, info.num_batches) == (1, ref_batches([1, 0.5], [5, 11], 1, 2)) and loader.epoch == 1
    list(itertools.islice(iter(loader), len(loader)))
    info = loader.epoch_info
    assert (info.epoch, info.num_batches, info.batches_done) == (2, ref_batches([1, 0.5], [5, 11], 2, 2), 0)
    assert loader.state_dict()["epoch"] == 2 and loader.state_dict()["batches_done"] == 0
    loader.close()


def test_set_epoch_after_an_islice_pass_replays_that_epoch(pool):
    """``set_epoch(e)`` after a pass of ``e`` stopped at ``len()`` replays ``e``, as after a whole pass."""
    a = shardkit.load(_two(pool), batch_size=2, seed=0, **KW)
    b = shardkit.load(_two(pool), batch_size=2, seed=0, **KW)
    whole = [_keys(x) for x in a]
    a.set_epoch(0)
    assert [_keys(x) for x in a] == whole
    list(itertools.islice(iter(b), len(b)))
    b.set_epoch(0)
    assert len(b) == len(whole) and [_keys(x) for x in b] == whole
    a.close(), b.close()
