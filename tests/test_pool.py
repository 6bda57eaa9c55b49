"""Reused shared-memory batch buffers: a batch the user holds (or any view of it) is never overwritten,
released slots are reused, and slots of batches a DataLoader discarded come back."""

from __future__ import annotations

import pytest
import torch

from helpers import write_dataset

import shardkit
from shardkit.loader.pool import pool_supported

pytestmark = pytest.mark.skipif(not pool_supported(), reason="this torch cannot report storage use counts")

OPTS = dict(batch_size=8, size=24, pin_memory=False, multiprocessing_context="fork", with_keys=True)


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pool") / "ds")
    write_dataset(root, num_samples=120, shard_size=10, size=(40, 30), distinct_images=40)
    return root


def reference(url, epoch):
    """key -> image of one epoch, decoded in-process (a sample's crop depends only on seed, epoch, id)."""
    loader = shardkit.load(url, num_workers=0, **OPTS)
    loader.set_epoch(epoch)
    return {k: img.clone() for images, _, keys in loader for k, img in zip(keys, images)}


def check(batch, ref):
    images, _, keys = batch
    for k, img in zip(keys, images):
        assert torch.equal(img, ref[k]), k


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_slots_are_reused_when_batches_are_dropped(url, context):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, **{**OPTS, "multiprocessing_context": context})
    seen = 0
    for batch in loader:
        check(batch, ref)
        seen += len(batch[2])
    assert seen == len(ref)
    pool = loader._pool
    assert pool.pooled == len(loader) and pool.unpooled == 0
    loader.close()


def test_held_batches_are_never_overwritten(url):
    ref0, ref1 = reference(url, 0), reference(url, 1)
    loader = shardkit.load(url, num_workers=2, persistent_workers=True, **OPTS)
    kept = list(loader)  # every batch of the epoch held at once: the pool runs dry, new segments take over
    view = kept[0][0][1]  # a view of one image; its batch tensor is dropped below
    expect = view.clone()
    loader.set_epoch(1)
    for batch in loader:  # a whole epoch more through the same workers
        check(batch, ref1)
    for batch in kept[1:]:
        check(batch, ref0)
    del kept
    for batch in loader:  # the next pass (epoch 2) reuses the released slots
        pass
    assert torch.equal(view, expect)
    assert loader._pool.pooled > 0 and loader._pool.unpooled > 0
    loader.close()


def test_slots_of_discarded_batches_come_back(url):
    loader = shardkit.load(url, num_workers=2, persistent_workers=True, prefetch_factor=2, **OPTS)
    for i, b in enumerate(loader):
        if i == 1:
            break  # the DataLoader discards the batches it prefetched
    del b  # the batches received are released once nothing references them
    loader.set_epoch(1)
    ref = reference(url, 1)
    pool = loader._pool
    for batch in loader:
        check(batch, ref)
    flags = pool.flags.numpy()
    assert not ((flags != 0) & (flags >> 32 < pool.generation)).any()  # no slot left to a discarded batch
    before = pool.unpooled
    for batch in loader:  # epoch 2: no slot leaked to the discarded batches
        pass
    assert pool.unpooled == before
    loader.close()


def test_new_worker_processes_get_a_new_table(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, persistent_workers=False, **OPTS)
    first = loader._dataloader() and loader._pool
    held = next(iter(loader))
    again = list(loader)  # the epoch again with new workers (non-persistent) and a new flag table
    assert loader._pool is not first
    check(held, ref)
    for batch in again:
        check(batch, ref)
    loader.close()


def test_reuse_can_be_switched_off(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, reuse_buffers=False, **OPTS)
    for batch in loader:
        check(batch, ref)
    assert loader._pool is None
    loader.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned memory)")
def test_pinned_batches_free_their_slot_at_once(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, **{**OPTS, "pin_memory": True})
    kept = list(loader)  # all held: they are pinned copies, so no slot stays lent
    for batch in kept:
        assert batch[0].is_pinned() and batch[0].is_contiguous(memory_format=torch.channels_last)
        check(batch, ref)
    pool = loader._pool
    assert pool.pooled == len(loader) and pool.unpooled == 0 and pool.num_held() == 0
    loader.close()


def test_a_kept_storage_object_keeps_its_slot(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, **OPTS)
    it = iter(loader)
    images, _, keys = next(it)
    shape, stride = images.shape, images.stride()
    storage = images.untyped_storage()  # the very Python object the pool holds: use count alone cannot see it
    del images
    for _ in it:
        pass
    again = torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape, stride)
    check((again, None, keys), ref)
    loader.close()


def test_other_dataloaders_over_the_dataset_never_take_slots(url):
    from torch.utils.data import DataLoader

    loader = shardkit.load(url, num_workers=2, **OPTS)
    for _ in loader:
        pass
    assert loader.dataset.pool_state is None  # only the loader's private copy has it
    dl = DataLoader(loader.dataset, batch_size=None, num_workers=3, multiprocessing_context="fork")  # more workers than rows
    held = [(b.images, b.images.clone()) for b in dl]
    assert all(b.pool_slot == -1 for b in dl)
    for _ in loader:
        pass
    assert all(torch.equal(a, c) for a, c in held)
    loader.close()


def test_a_short_batch_owns_exactly_its_bytes(url):
    loader = shardkit.load(url, num_workers=2, **{**OPTS, "batch_size": 7})  # 120 = 17 x 7 + 1
    sizes = [(len(images), images.untyped_storage().nbytes()) for images, _, _ in loader]
    assert sizes[-1] == (1, 3 * 24 * 24)  # no other samples' leftover pixels behind a partial batch
    loader.close()
