"""The worker -> main transport (shardkit/loader/transport.py): batches in reused shared slots are never
overwritten while any view of them lives, slots come back, a batch sent to another process stays intact,
and a copied (pinned) batch releases its slot at once."""

from __future__ import annotations

import pickle
from dataclasses import fields
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing as tmp

import shardkit
from shardkit.loader.batchtypes import Batch, JpegBatch, PixelBatch, RawBatch
from shardkit.loader.stats import Counters
from shardkit.loader.transport import Envelope, Ring, envelopes
from tests.support.data import write_dataset

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


def ring_of(loader):
    return loader._pool.ring


def test_the_batch_carries_data_only():
    for kind, payload in ((PixelBatch, "images"), (RawBatch, "samples"), (JpegBatch, "jpegs")):  # one type per mode
        assert [f.name for f in fields(kind)] == [
            payload,
            "labels",
            "gids",
            "keys",
            "extra",
        ]  # extra: the row fields (fields=)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_slots_are_reused_when_batches_are_dropped(url, context):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, **{**OPTS, "multiprocessing_context": context})
    seen = 0
    for batch in loader:
        check(batch, ref)
        seen += len(batch[2])
    del batch
    assert seen == len(ref)
    ring = ring_of(loader)
    assert ring.leased == len(loader) and ring.unslotted == 0  # steady state: no new segment per batch
    assert ring.in_use() == 0
    loader.close()


def test_held_batches_are_never_overwritten(url):
    ref0, ref1 = reference(url, 0), reference(url, 1)
    loader = shardkit.load(url, num_workers=2, persistent_workers=True, **OPTS)
    kept = list(loader)  # every batch of the epoch held at once: the ring runs dry, new memory takes over
    view = kept[0][0][1]  # a view of one image; its batch tensor is dropped below
    expect = view.clone()
    loader.set_epoch(1)
    for batch in loader:  # a whole epoch more through the same workers
        check(batch, ref1)
    for batch in kept[1:]:
        check(batch, ref0)
    del kept, batch
    for _batch in loader:  # the next pass (epoch 2) reuses the released slots
        pass
    assert torch.equal(view, expect)
    ring = ring_of(loader)
    assert ring.leased > 0 and ring.unslotted > 0
    loader.close()


def test_slots_of_discarded_batches_come_back(url):
    loader = shardkit.load(url, num_workers=2, persistent_workers=True, prefetch_factor=2, **OPTS)
    for i, b in enumerate(loader):  # noqa: B007 - dropped below, after the loop
        if i == 1:
            break  # the DataLoader discards the batches it prefetched
    del b
    loader.set_epoch(1)
    ref = reference(url, 1)
    ring = ring_of(loader)
    for batch in loader:
        check(batch, ref)
    del batch
    assert ring.in_use() == 0  # the discarded batches were unpickled, dropped and released
    before = ring.unslotted
    for _batch in loader:  # epoch 2: no slot leaked to the discarded batches
        pass
    assert ring.unslotted == before
    loader.close()


def test_new_worker_processes_get_a_new_ring(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, persistent_workers=False, **OPTS)
    it = iter(loader)
    held = next(it)
    first = ring_of(loader)
    del it
    again = list(loader)  # the epoch again with new workers (non-persistent) and a new ring
    assert ring_of(loader) is not first
    check(held, ref)
    for batch in again:
        check(batch, ref)
    loader.close()


def test_reuse_can_be_switched_off(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, reuse_buffers=False, **OPTS)
    for batch in loader:
        check(batch, ref)
    assert ring_of(loader) is None
    loader.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned memory)")
def test_pinned_batches_free_their_slot_at_once(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, **{**OPTS, "pin_memory": True})
    kept = list(loader)  # all held: they are pinned copies, so no slot stays lent
    for batch in kept:
        assert batch[0].is_pinned() and batch[0].is_contiguous(memory_format=torch.channels_last)
        check(batch, ref)
    ring = ring_of(loader)
    assert ring.leased == len(loader) and ring.unslotted == 0 and ring.in_use() == 0
    loader.close()


def _one_envelope(ring, fill=7):
    """What a worker sends for one batch in slot ring ``ring``, unpickled as the main process does."""
    writer = ring.writer(0)
    images = writer((2, 3, 4, 4))
    images.fill_(fill)
    batch = PixelBatch(images, torch.tensor([1, 2]), torch.tensor([10, 11]), ["a", "b"])
    env = next(envelopes([batch], worker=0, counters=Counters(), writer=writer))
    assert env.slot >= 0
    return pickle.loads(ForkingPickler.dumps(env))


def test_a_copied_batch_releases_its_slot_at_once():
    """The release logic of the pin-memory path, on CPU: ``Envelope.pin_memory`` is ``copied(Tensor.pin_memory)``."""
    ring = Ring(1, 2, 2 * 3 * 4 * 4)
    got = _one_envelope(ring)
    assert isinstance(got, Envelope) and ring.in_use() == 1 and ring.leased == 1
    pinned = got.copied(torch.Tensor.clone)  # what the pin thread does, with a CPU copy
    del got
    assert ring.in_use() == 0
    assert torch.equal(pinned.batch.images, torch.full((2, 3, 4, 4), 7, dtype=torch.uint8))
    assert pinned.batch.keys == ["a", "b"] and pinned.batch.labels.tolist() == [1, 2]


def test_a_leased_batch_lives_as_long_as_any_view():
    ring = Ring(1, 2, 2 * 3 * 4 * 4)
    got = _one_envelope(ring)
    images = got.batch.images
    del got
    row = images[1].numpy()  # a numpy view of one image
    del images
    assert ring.in_use() == 1
    assert (row == 7).all()
    del row
    assert ring.in_use() == 0


def _hold(q, done, out):
    images, expect = q.get()
    done.wait(120)
    out.put(bool(torch.equal(images, expect)))


def test_a_batch_sent_to_another_process_is_never_overwritten(url):
    """Safe by design: a leased batch is not torch shared memory, so torch's pickler moves it into a
    new segment (the slot is released), and the other process never sees the slot."""
    ctx = tmp.get_context("fork")
    q, out, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_hold, args=(q, done, out))
    child.start()
    try:
        loader = shardkit.load(url, num_workers=2, persistent_workers=True, **OPTS)
        it = iter(loader)
        images, _, _ = next(it)
        q.put((images, images.clone()))
        del images
        for _ in it:
            pass
        for _ in range(2):  # two more epochs through the same slots
            for _ in loader:
                pass
        assert ring_of(loader).unslotted == 0
        done.set()
        assert out.get(timeout=120) is True
        loader.close()
    finally:
        done.set()
        child.join(60)
        if child.is_alive():
            child.kill()


def test_a_kept_storage_object_keeps_its_slot(url):
    ref = reference(url, 0)
    loader = shardkit.load(url, num_workers=2, **OPTS)
    it = iter(loader)
    images, _, keys = next(it)
    shape, stride = images.shape, images.stride()
    storage = images.untyped_storage()
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
    assert loader.dataset.ring is None  # only the loader's private copy has one
    dl = DataLoader(
        loader.dataset, batch_size=None, num_workers=3, multiprocessing_context="fork"
    )  # more workers than rows
    held = [(b.images, b.images.clone()) for b in dl]
    assert all(isinstance(b, Batch) for b in dl)
    for _ in loader:
        pass
    assert all(torch.equal(a, c) for a, c in held)
    loader.close()


def test_a_short_batch_owns_exactly_its_bytes(url):
    loader = shardkit.load(url, num_workers=2, **{**OPTS, "batch_size": 7})  # 120 = 17 x 7 + 1
    sizes = [(len(images), images.untyped_storage().nbytes()) for images, _, _ in loader]
    assert sizes[-1] == (1, 3 * 24 * 24)  # no other samples' leftover pixels behind a partial batch
    loader.close()
