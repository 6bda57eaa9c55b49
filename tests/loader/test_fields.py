"""``load(fields=...)``: dict batches of image/views, label, labels, target, text, meta, key, source.

The oracle: datasets built from raw tar bytes whose every field is a known function of the sample's key
(:func:`label_of`, :func:`labels_of`, :func:`target_of`, :func:`text_of`, a solid colour per key); every yielded
row must match its key, every good sample must appear exactly once, and a bad member of a declared field skips
its sample (counted) while one of an undeclared field is ignored.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.loader import View
from tests.support.data import (
    FIELDS_C,
    FIELDS_N,
    FIELDS_TARGETS,
    add_index,
    label_of,
    labels_of,
    meta_of,
    target_of,
    text_of,
    write_fields_dataset,
)
from tests.support.source_reference import image_id

N = FIELDS_N
C = FIELDS_C
TARGETS = FIELDS_TARGETS
write = write_fields_dataset


def _id(key: str) -> int:
    return int(key.rsplit("/", 1)[-1][1:])


def check_row(name: str, value, row: int, i: int) -> None:
    """Row ``row`` of field ``name`` is sample ``i``'s."""
    if name == "label":
        assert int(value[row]) == label_of(i), f"label of k{i}"
    elif name == "labels":
        assert value[row].tolist() == [int(c in labels_of(i)) for c in range(C)], f"labels of k{i}"
    elif name == "target":
        assert value[row].tolist() == pytest.approx(target_of(i), rel=1e-6), f"target of k{i}"
    elif name == "text":
        assert value[row] == text_of(i), f"text of k{i}"
    elif name == "meta":
        assert value[row] == meta_of(i), f"meta of k{i}"
    elif name == "image":
        views = value if isinstance(value, list) else [value]
        for v in views:
            rgb = v[row].float().mean(dim=(1, 2)).tolist()
            assert image_id(tuple(rgb)) == i % 64, f"image row {row} shows {rgb}, not k{i}'s colour"


def check_batch(batch: dict, names: tuple[str, ...], n_max: int) -> list[int]:
    """The batch is a dict of exactly ``names`` (in order), of the documented types, every row its key's; the ids."""
    assert isinstance(batch, dict) and tuple(batch) == names
    ids = [_id(k) for k in batch["key"]]
    n = len(ids)
    assert n <= n_max
    for name in names:
        v = batch[name]
        if name in ("label", "source"):
            assert v.dtype == torch.int64 and tuple(v.shape) == (n,)
        elif name == "labels":
            assert v.dtype == torch.uint8 and tuple(v.shape) == (n, C)
        elif name == "target":
            assert v.dtype == torch.float32 and tuple(v.shape) == (n, len(TARGETS))
        elif name in ("text", "meta", "key"):
            assert isinstance(v, list) and len(v) == n
        for row, i in enumerate(ids):
            check_row(name, v, row, i)
    return ids


BAD = {3: "labels", 9: "target", 16: "text", 22: "pixels", 30: "label"}  # 30's .cls is undeclared in 'rich'
RICH = ["image", "labels", "target", "text"]


@pytest.fixture(scope="module")
def rich(tmp_path_factory) -> str:
    return write(str(tmp_path_factory.mktemp("rich")), RICH, bad=BAD)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> str:
    """A single-label dataset whose bad labels/target/text members are undeclared: ignored."""
    return write(str(tmp_path_factory.mktemp("plain")), ["image", "label"], bad={3: "labels", 9: "target", 16: "text"})


OPTIONAL = ["labels", "target", "text", "meta", "source"]


@settings(derandomize=True, deadline=None, max_examples=10, phases=[Phase.explicit, Phase.generate])  # no shrinking
@given(
    picked=st.lists(st.sampled_from(OPTIONAL), unique=True, max_size=5),
    image_first=st.booleans(),
    batch_size=st.integers(1, 9),
    num_workers=st.sampled_from([0, 2]),
    shuffle=st.booleans(),
    seed=st.integers(0, 5),
)
def test_every_row_of_every_field_is_its_samples(rich, picked, image_first, batch_size, num_workers, shuffle, seed):
    names = ("image", "key", *picked) if image_first else (*picked, "key", "image")
    loader = shardkit.load(
        rich, fields=names, batch_size=batch_size, num_workers=num_workers, size=16, shuffle=shuffle, seed=seed
    )
    seen: list[int] = []
    try:  # a failing example must not leave its workers running while Hypothesis tries the next one
        for batch in loader:
            seen += check_batch(batch, names, batch_size)
            if "source" in names:
                assert batch["source"].tolist() == [0] * len(batch["key"])
        bad_here = {i for i, f in BAD.items() if f != "label"}  # 'label' is not among rich's fields: ignored
        assert sorted(seen) == sorted(set(range(N)) - bad_here)  # every good sample exactly once
        assert loader.stats.skipped == len(bad_here)
    finally:
        loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_undeclared_members_are_ignored_and_the_default_stays_a_tuple(plain, num_workers):
    names = ("label", "meta", "key", "image")
    got = [
        check_batch(b, names, 8)
        for b in shardkit.load(plain, fields=names, batch_size=8, num_workers=num_workers, size=16)
    ]
    assert sorted(i for ids in got for i in ids) == list(range(N))
    tuples = list(shardkit.load(plain, batch_size=8, num_workers=num_workers, size=16, with_keys=True))
    assert all(isinstance(b, tuple) and len(b) == 3 for b in tuples)
    assert sorted(_id(k) for _, labels, keys in tuples for k in keys) == list(range(N))
    assert all(int(lab) == label_of(_id(k)) for _, labels, keys in tuples for k, lab in zip(keys, labels))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_views_and_fields_rows_belong_to_the_same_sample(rich, num_workers):
    names = ("image", "labels", "text", "key", "target")
    views = [View(16, scale=(0.3, 1.0), count=2), View(8, scale=(0.05, 0.4))]
    loader = shardkit.load(rich, views=views, fields=names, batch_size=6, num_workers=num_workers, seed=2)
    seen = []
    for batch in loader:
        assert [tuple(v.shape[2:]) for v in batch["image"]] == [(16, 16), (16, 16), (8, 8)]
        seen += check_batch(batch, names, 6)
    assert sorted(seen) == sorted(set(range(N)) - {3, 9, 16, 22})


@pytest.mark.parametrize("views", [False, True])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_device_decode_drops_a_sample_from_every_field(rich, num_workers, views):
    """Sample 22's header reads but its pixels do not: the consumer drops it, and every field follows."""
    names = ("text", "image", "labels", "key", "meta", "target")
    shape = {"views": [View(16, scale=(0.3, 1.0)), View(8, count=2)]} if views else {"size": 16}
    loader = shardkit.load(
        rich, fields=names, batch_size=8, num_workers=num_workers, decode_on="device", shuffle=False, **shape
    )
    seen = []
    for batch in loader:
        if views:
            assert [tuple(v.shape[2:]) for v in batch["image"]] == [(16, 16), (8, 8), (8, 8)]
            assert all(len(v) == len(batch["key"]) for v in batch["image"])
        seen += check_batch(batch, names, 8)
    assert sorted(seen) == sorted(set(range(N)) - {3, 9, 16, 22})
    assert loader.stats.skipped == 4


def test_pinned_and_pickled_batches_keep_every_field(rich):
    import pickle

    from shardkit.loader import ShardDataset
    from shardkit.loader.config import build_config

    cfg = build_config(None, {"fields": ("image", "labels", "target", "text", "meta"), "batch_size": 8, "size": 16})
    ds = ShardDataset(rich, cfg)
    batch = next(iter(ds))
    for b in (pickle.loads(pickle.dumps(batch)), batch.copied(torch.clone)):
        assert b.keys == batch.keys
        assert torch.equal(b.extra.labels, batch.extra.labels) and torch.equal(b.extra.target, batch.extra.target)
        assert b.extra.text == batch.extra.text and b.extra.meta == batch.extra.meta
    assert batch.extra.labels.dtype == torch.uint8


@pytest.fixture(scope="module")
def rich_indexed(tmp_path_factory) -> str:
    root = write(str(tmp_path_factory.mktemp("rich-indexed")), RICH, bad=BAD)
    add_index(root)
    return root


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_sample_index_reads_every_field_like_the_header_walk(rich_indexed, num_workers):
    names = ("image", "labels", "target", "text", "meta", "key")
    loader = shardkit.load(rich_indexed, fields=names, batch_size=5, num_workers=num_workers, size=16, seed=7)
    seen = [i for batch in loader for i in check_batch(batch, names, 5)]
    assert sorted(seen) == sorted(set(range(N)) - {3, 9, 16, 22}) and loader.stats.skipped == 4
    assert loader.stats.shards_withheld == 0


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_batch_whose_every_sample_failed_leaves_the_shared_slots_intact(plain_cut, batch_size):
    """Batch size 1 and a sample whose pixels fail: an empty batch, cut from its slot. Claimed by its slot's
    offset (an empty tensor's data pointer is 0), it never goes through torch's shared-memory reducer, which would
    move the worker's whole slot memory away from the ring (every later image: another sample's pixels)."""
    loader = shardkit.load(plain_cut, batch_size=batch_size, num_workers=2, size=16, with_keys=True, shuffle=False)
    keys = []
    for images, _labels, batch_keys in loader:
        for row, key in enumerate(batch_keys):
            check_row("image", images, row, _id(key))
        keys += batch_keys
    assert len(keys) == N - 1 and loader.stats.skipped == 1


@pytest.fixture(scope="module")
def plain_cut(tmp_path_factory) -> str:
    return write(str(tmp_path_factory.mktemp("plain-cut")), ["image", "label"], bad={22: "pixels"})


# ------------------------------------------------------------------ one-line errors


def test_a_field_the_dataset_lacks_is_one_line_naming_what_it_has(rich, plain):
    with pytest.raises(
        ValueError, match=r"has no 'label' field; it has image, labels, target, text, meta, key, source"
    ):
        shardkit.load(rich, fields=("image", "label"))
    with pytest.raises(ValueError, match=r"has no 'text' field; it has image, label, meta, key, source"):
        shardkit.load(plain, fields=("image", "text"))
    with pytest.raises(
        ValueError, match=r"no 'label' field .*pass fields=, e\.g\. fields=\('image', 'labels', 'target', 'text'\)"
    ):
        shardkit.load(rich)
    with pytest.raises(ValueError, match="unknown field 'caption'"):
        shardkit.load(rich, fields=("image", "caption"))
    with pytest.raises(ValueError, match="listed twice"):
        shardkit.load(rich, fields=("image", "image"))
    with pytest.raises(ValueError, match="sequence of field names"):
        shardkit.load(rich, fields="image")
    with pytest.raises(ValueError, match="raw=True are exclusive"):
        shardkit.load(rich, fields=("image",), raw=True)
    with pytest.raises(ValueError, match="with_keys/with_source and fields= are exclusive"):
        shardkit.load(rich, fields=("image",), with_keys=True)


# ------------------------------------------------------------------ mixtures


def merged_reference(names_a: list[str], names_b: list[str]) -> tuple[list[str], dict[int, list[int]]]:
    """The mixture's classes (sorted union) and each source's index table, by a plain loop."""
    union = sorted(set(names_a) | set(names_b))
    return union, {0: [union.index(c) for c in names_a], 1: [union.index(c) for c in names_b]}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mixture_multi_label_spaces_merge_by_class_name(tmp_path, num_workers):
    a_classes = [f"c{c}" for c in range(C)]
    b_classes = ["c3", "zz", "c0", "c9", "aa"]  # shares c0 and c3 at other positions
    a = write(str(tmp_path / "a"), ["image", "labels", "text"], n=20, classes=a_classes)
    b = write(str(tmp_path / "b"), ["image", "labels", "text"], n=20, classes=b_classes, first=20)
    union, table = merged_reference(a_classes, b_classes)
    names = ("image", "labels", "text", "key", "source")
    loader = shardkit.load(
        [shardkit.Source(a, repeat=1), shardkit.Source(b, repeat=1)],
        fields=names,
        batch_size=6,
        num_workers=num_workers,
        size=16,
    )
    assert list(loader.classes) == union
    seen = []
    for batch in loader:
        assert tuple(batch) == names and batch["labels"].shape[1] == len(union)
        for row, (key, src) in enumerate(zip(batch["key"], batch["source"].tolist())):
            i = _id(key)
            assert key.startswith(f"{src}/") and src == (0 if i < 20 else 1)
            want = sorted(table[src][c] for c in labels_of(i))
            assert batch["labels"][row].nonzero().flatten().tolist() == want, f"labels of {key}"
            assert batch["text"][row] == text_of(i)
            check_row("image", batch["image"], row, i)
            seen.append(i)
    assert sorted(seen) == list(range(40))


def test_mixture_sources_must_agree_on_the_fields_asked_for(tmp_path):
    a = write(str(tmp_path / "a"), ["image", "labels", "target"], n=7)
    b = write(str(tmp_path / "b"), ["image", "label"], n=7, first=7)
    c = write(str(tmp_path / "c"), ["image", "labels", "target"], n=7, targets=["a", "c", "b"], first=14)
    a, b, c = (shardkit.Source(u, repeat=1) for u in (a, b, c))
    with pytest.raises(ValueError, match=r"^source 1 \(.*/b\) has no 'labels' field; it has image, label, meta, key"):
        shardkit.load([a, b], fields=("image", "labels"))
    with pytest.raises(
        ValueError, match=r"^source 1 \(.*\) names its targets \['a', 'c', 'b'\], source 0 \['a', 'b', 'c'\]"
    ):
        shardkit.load([a, c], fields=("image", "target"))
    loader = shardkit.load([a, b], fields=("image", "key"), batch_size=4, num_workers=0, size=16)
    assert sorted(k for batch in loader for k in batch["key"]) == sorted(
        [f"0/k{i:06d}" for i in range(7)] + [f"1/k{i:06d}" for i in range(7, 14)]
    )


# ------------------------------------------------------------------ resume


class AsTuples:
    """A fields loader as ``check_resume`` sees it: ``(image, row digest, keys)``, the digest a function of every field."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        for b in self.loader:
            digest = [
                hash((tuple(b["labels"][r].tolist()), tuple(b["target"][r].tolist()), b["text"][r])) % 1000
                for r in range(len(b["key"]))
            ]
            for r, k in enumerate(b["key"]):
                check_row("labels", b["labels"], r, _id(k))
                check_row("text", b["text"], r, _id(k))
            image = b["image"][0] if isinstance(b["image"], list) else b["image"]
            yield image, torch.tensor(digest), b["key"]

    def __getattr__(self, name):
        return getattr(self.loader, name)


@pytest.mark.parametrize("views", [False, True])
def test_mid_epoch_and_elastic_resume_with_fields(rich, views):
    from tests.support.resume import check_resume

    extra = {"views": [View(16, count=2)]} if views else {"size": 16}

    def make(rank, world_size):
        return AsTuples(
            shardkit.load(
                rich,
                fields=("image", "labels", "target", "text", "key"),
                batch_size=4,
                num_workers=2,
                rank=rank,
                world_size=world_size,
                seed=3,
                **extra,
            )
        )

    check_resume(make, after=2, world_size=2, pixels=True)
    check_resume(make, after=2, world_size=2, resume_world_size=3)


def test_default_batches_are_unchanged_byte_for_byte(plain):
    """The default tuple and a fields dict of the same loader options hold the same tensors."""
    opts = dict(batch_size=8, num_workers=0, size=16, seed=4)
    for (images, labels, keys), d in zip(
        shardkit.load(plain, with_keys=True, **opts), shardkit.load(plain, fields=("image", "label", "key"), **opts)
    ):
        assert torch.equal(images, d["image"]) and torch.equal(labels, d["label"]) and keys == d["key"]
        assert np.array_equal(images.numpy(), d["image"].numpy())


def test_loader_without_label_in_raw_mode_reads_label_minus_one(rich):
    samples = [s for batch in shardkit.load(rich, raw=True, batch_size=8, num_workers=0) for s in batch]
    assert len(samples) == N - 3 and all(s.label == -1 for s in samples)  # raw: 22 is not decoded
    assert all(s.text == text_of(_id(s.key)) for s in samples)


# ------------------------------------------------------------------ DevicePrefetcher


def test_device_prefetcher_moves_every_tensor_field_and_transforms_the_image(rich):
    from shardkit.loader.prefetch import DevicePrefetcher, _tensors

    names = ("labels", "image", "text", "key", "target")
    loader = shardkit.load(rich, fields=names, batch_size=8, num_workers=0, size=16, shuffle=False)
    got = []
    for batch in DevicePrefetcher(loader, device="cpu", transform=lambda x: x.float() / 255):
        assert tuple(batch) == names and batch["image"].dtype == torch.float32
        assert [t.dtype for t in _tensors(batch)] == [torch.uint8, torch.float32, torch.float32]
        for row, key in enumerate(batch["key"]):
            check_row("labels", batch["labels"], row, _id(key))
            check_row("text", batch["text"], row, _id(key))
        got += batch["key"]
    assert len(got) == N - 4

    def mix(images, labels):  # a label-mixing transform gets (image, labels) of a dict batch
        return images.float(), labels.float() * 0.5

    pre = DevicePrefetcher(loader, device="cpu", transform=mix, transform_labels=True)
    batch = next(iter(pre))
    assert batch["labels"].dtype == torch.float32 and float(batch["labels"].max()) == 0.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("decode_on", ["worker", "device"])
def test_cuda_prefetcher_moves_dict_batches(rich, decode_on):
    from shardkit.loader.prefetch import DevicePrefetcher

    names = ("image", "labels", "target", "text", "key")
    loader = shardkit.load(rich, fields=names, batch_size=8, num_workers=2, size=16, shuffle=False, decode_on=decode_on)
    seen = []
    for batch in DevicePrefetcher(loader, device="cuda"):
        assert all(batch[f].device.type == "cuda" for f in ("image", "labels", "target"))
        seen += check_batch({k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()}, names, 8)
    assert sorted(seen) == sorted(set(range(N)) - {3, 9, 16, 22})
