"""Progressive resolution (``set_epoch(epoch, size=S)`` with persistent workers, saved in the state) and the end
of an epoch reached without ``StopIteration`` (Lightning, ``zip``, ``islice`` stop after exactly ``len()`` batches)."""

from __future__ import annotations

import itertools

import pytest
import torch

import shardkit
from tests.support.data import write_dataset
from tests.support.probes import dataloader_workers
from tests.support.resume import check_resume

KW = dict(batch_size=4, pin_memory=False, seed=3, with_keys=True, multiprocessing_context="fork")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("sizes") / "ds"), num_samples=24, shard_size=6, size=(40, 32))


def _epoch(loader):
    return [(im, k) for im, _, k in loader]


def _keys(batches):
    return [k for _, ks in batches for k in ks]


@pytest.mark.slow
def test_sizes_change_between_epochs_with_the_same_persistent_workers(ds):
    loader = shardkit.load(ds.url, size=24, num_workers=2, persistent_workers=True, **KW)
    pids, held = None, []
    for epoch, size in enumerate([16, 24, 20, 16]):
        loader.set_epoch(epoch, size=size)
        assert loader.size == size
        batches = _epoch(loader)
        assert all(im.shape[1:] == (3, size, size) for im, _ in batches)
        assert sorted(_keys(batches)) == sorted(ds.keys)  # every sample exactly once
        workers = sorted(dataloader_workers())
        assert len(workers) == 2 and (pids is None or workers == pids)  # not restarted
        pids = workers
        # the same pixels as a loader configured at this size from the start: crops are a function of (seed, epoch, sample)
        fresh = shardkit.load(ds.url, size=size, num_workers=2, persistent_workers=False, **KW)
        fresh.set_epoch(epoch)
        ref = _epoch(fresh)
        assert _keys(ref) == _keys(batches) and all(torch.equal(a, b) for (a, _), (b, _) in zip(ref, batches))
        held += [(im, im.clone()) for im, _ in batches[:2]]  # kept across later epochs: never overwritten
    ring = loader._pool.ring
    assert ring.leased > 0 and ring.unslotted <= len(held)  # slots sized for 24 serve every smaller size
    assert all(torch.equal(a, b) for a, b in held)
    loader.close()


def test_resume_continues_at_the_saved_size(ds):
    res = check_resume(
        lambda **topo: shardkit.load(ds.url, size=24, num_workers=0, **topo, **KW),
        after=2,
        start=lambda loader: loader.set_epoch(1, size=16),
        pixels=True,
    )
    state = res.states[0]
    assert state["size"] == 16 and all(b.images.shape[-1] == 16 for b in res.head[0])
    b = shardkit.load(ds.url, size=24, num_workers=0, **KW)
    b.load_state_dict(state)
    assert b.size == 16 and b.epoch == 1
    b = res.loaders[0]  # resumed, the rest of the epoch delivered
    assert b.size == 16  # the next epoch stays at the size until it is set again
    assert all(im.shape[-1] == 16 for im, _ in _epoch(b))
    # a state saved before sizes existed (no "size") loads at the configured size
    old = {k: v for k, v in state.items() if k != "size"}
    c = shardkit.load(ds.url, size=24, num_workers=0, **KW)
    c.load_state_dict(old)
    assert c.size == 24 and all(im.shape[-1] == 24 for im, _ in _epoch(c))
    with pytest.raises(ValueError, match="size must be"):
        c.set_epoch(0, size=0)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_epoch_ended_without_stopiteration_starts_the_next(ds, num_workers):
    loader = shardkit.load(ds.url, size=16, num_workers=num_workers, **KW)
    n = len(loader)
    e0 = [k for _, _, k in itertools.islice(loader, n)]  # stops after n batches, never asks for n + 1
    e1 = [k for _, (_, _, k) in zip(range(n), loader)]
    assert (
        len(e0) == len(e1) == n and loader.epoch == 1 and loader.epoch_info.epoch == 2
    )  # the pass's epoch; len() is epoch 2's
    assert sorted(itertools.chain(*e0)) == sorted(itertools.chain(*e1)) == sorted(ds.keys) and e0 != e1
    ref = shardkit.load(ds.url, size=16, num_workers=num_workers, **KW)
    ref.set_epoch(1)
    assert [k for _, _, k in ref] == e1
    # a loop left early (break) still continues the same epoch, as documented
    part = [k for _, _, k in itertools.islice(loader, 2)]
    rest = [k for _, _, k in loader]
    assert len(part) + len(rest) == n and sorted(itertools.chain(*part, *rest)) == sorted(ds.keys)
    assert loader.epoch == 3  # the full pass of epoch 2 finished with StopIteration and advanced


def test_position_box_carries_the_size():
    from shardkit.loader.transport import PositionBox
    from shardkit.plan.position import Position, Segment

    box = PositionBox()
    for pos in (Position(), Position(3, 2, (Segment(2, 4, 5), Segment(1, 1, 3)), 160), Position(7, size=192)):
        box.write(pos)
        assert box.read() == pos
    p = Position(1, 4, size=160)
    assert p.advanced().size == p.next_epoch().size == p.replanned(2, 2).size == p.started(5).size == 160
    assert p.resized(0) == Position(1, 4)
