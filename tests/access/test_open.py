"""``shardkit.open``: random access equals the stored samples field by field, list semantics, keys, workers,
threads, one ranged request per item, and the errors a user can meet."""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import tarfile
import threading

import numpy as np
import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit
from shardkit.demo.scenes import scene
from shardkit.demo.sources import write_source
from shardkit.errors import DataError
from shardkit.format.tables import TableError
from shardkit.ops.upgrade import add_checksums
from tests.support.data import (
    FIELDS_C,
    label_of,
    labels_of,
    meta_of,
    target_of,
    text_of,
    write_fields_dataset,
)
from tests.support.source_reference import colour

FIELDS = ["image", "label", "target", "text"]
MULTI = ["image", "labels", "text"]
N = 40
SIZE = (64, 48)


def plain_samples(split_dir: str) -> list[tuple[str, dict[str, bytes]]]:
    """Every sample of a split in manifest order, read with plain ``tarfile`` (the reference)."""
    with open(os.path.join(split_dir, "manifest.json"), encoding="utf-8") as f:
        names = [s["name"] for s in json.load(f)["shards"]]
    out = []
    for name in names:
        with tarfile.open(os.path.join(split_dir, name)) as t:
            members: dict[str, dict[str, bytes]] = {}
            for m in t.getmembers():
                key, ext = m.name.split(".", 1)
                members.setdefault(key, {})[ext] = t.extractfile(m).read()  # type: ignore[union-attr]
        out += list(members.items())
    return out


@pytest.fixture(scope="module", params=[FIELDS, MULTI], ids=["label", "labels"])
def fields_ds(tmp_path_factory, request):
    """A dataset of the row fields (written as raw tars, then given indexes and tables by ``shardkit index``)."""
    root = str(tmp_path_factory.mktemp("fields") / "train")
    write_fields_dataset(root, request.param, n=N, shard_size=7)
    assert add_checksums(root).complete
    return root


@pytest.fixture(scope="module")
def coco_ds(tmp_path_factory):
    """A converted COCO source of demo scenes: boxes, masks, instance maps."""
    from shardkit.convert import convert

    tmp = tmp_path_factory.mktemp("coco")
    src, dest = str(tmp / "src"), str(tmp / "ds")
    write_source(src, "coco", images=14, size=SIZE)
    from shardkit.convert import ConvertConfig
    from shardkit.convert.options import ScanConfig

    opts = ConvertConfig(shard_size=4, source=ScanConfig(masks=True, instances=True))
    convert(f"coco:{os.path.join(src, 'annotations.json')}", dest, opts, workers=1, quiet=True)
    return src, os.path.join(dest, "train")


def test_items_equal_the_stored_fields(fields_ds):
    ds = shardkit.open(fields_ds)
    ref = plain_samples(fields_ds)
    fields = ds.manifest.fields
    assert len(ds) == N == len(ref) and ds.classes == [f"c{c}" for c in range(FIELDS_C if "labels" in fields else 3)]
    for j, (key, parts) in enumerate(ref):
        i = int(key[1:])
        item = ds[j]
        assert item["key"] == key and ds.get(key)["key"] == key
        img = item["image"]
        assert img.dtype == torch.uint8 and tuple(img.shape) == (3, 30, 40)
        assert np.abs(img.float().mean((1, 2)).numpy() - np.array(colour(i % 64))).max() < 8, key  # colour = identity
        want = np.asarray(Image.open(io.BytesIO(parts["jpg"])).convert("RGB"))
        assert np.abs(img.permute(1, 2, 0).numpy().astype(int) - want).max() <= 2
        assert set(item) == {"image", "key", "meta", *fields} - {"image"} | {"image"}
        if "label" in fields:
            assert item["label"] == label_of(i) == int(parts["cls"])
            assert item["target"].dtype == torch.float32 and item["target"].tolist() == pytest.approx(target_of(i))
        else:
            hot = torch.zeros(FIELDS_C, dtype=torch.uint8)
            hot[labels_of(i)] = 1
            assert torch.equal(item["labels"], hot)
        assert item["text"] == text_of(i) and item["meta"] == meta_of(i)


def test_targets_equal_the_scenes(coco_ds):
    src, url = coco_ds
    ds = shardkit.open(url)
    seen = set()
    for j in range(len(ds)):
        item = ds[j]
        i = int(os.path.basename(item["meta"]["path"]).split(".")[0])
        seen.add(i)
        s = scene(0, i, SIZE)
        assert tuple(item["image"].shape) == (3, SIZE[1], SIZE[0])
        assert np.allclose(item["boxes"].numpy(), s.objects.boxes, atol=1e-3), i
        assert item["box_labels"].tolist() == [ds.classes.index(n) for n in _names(s)]
        assert tuple(item["mask"].shape) == (SIZE[1], SIZE[0])
        assert (item["mask"].numpy() == s.mask).mean() > 0.99
        inst = item["instances"].numpy()
        assert inst.dtype == np.int16 and (inst == s.instances).mean() > 0.99
        # each object's pixels lie in its own box
        for row, (x0, y0, x1, y1) in enumerate(item["boxes"].tolist()):
            ys, xs = np.nonzero(inst == row)
            assert len(xs) and xs.min() >= x0 - 1 and xs.max() <= x1 and ys.min() >= y0 - 1 and ys.max() <= y1
    assert seen == set(range(14))


def _names(s) -> list[str]:
    from shardkit.demo.scenes import CLASSES

    return [CLASSES[c] for c in s.objects.labels.tolist()]


def test_the_key_table_equals_every_shards_keys(fields_ds, coco_ds):
    for url in (fields_ds, coco_ds[1]):
        ds = shardkit.open(url)
        ref = [k for k, _ in plain_samples(url)]
        assert ds.keys() == ref
        assert [ds.index_of(k) for k in ref] == list(range(len(ref)))
        for k in ("", "k", "nope", ref[0] + "x", ref[0][:-1], "\0"):
            with pytest.raises(KeyError) as e:
                ds.get(k)
            assert repr(k) in e.value.args[0]


@settings(phases=[Phase.explicit, Phase.generate], max_examples=40, deadline=None)
@given(
    st.one_of(
        st.integers(-N - 3, N + 3),
        st.builds(slice, st.none() | st.integers(-N - 3, N + 3), st.none() | st.integers(-N - 3, N + 3),
                  st.none() | st.integers(-5, 5).filter(bool)),
    )
)  # fmt: skip
@example(-1)
@example(-N)
@example(N)
@example(-N - 1)
@example(slice(None, None, -1))
@example(slice(-3, None))
def test_indices_and_slices_behave_like_a_list(fields_ds, at):
    ds = shardkit.open(fields_ds)
    ref = [k for k, _ in plain_samples(fields_ds)]
    try:
        want = ref[at]
    except IndexError:
        with pytest.raises(IndexError):
            ds[at]
        return
    got = ds[at]
    assert ([x["key"] for x in got] if isinstance(at, slice) else got["key"]) == want


def test_dataloader_workers_and_threads_see_every_sample_once(fields_ds):
    ds = shardkit.open(fields_ds, max_indexes=2)
    ref = [k for k, _ in plain_samples(fields_ds)]
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, shuffle=False)
    assert [item["key"] for item in loader] == ref
    clone = pickle.loads(pickle.dumps(ds))
    clone.max_indexes = 1  # every item of another shard evicts the open one: reads race evictions
    got: dict[int, str] = {}
    errors: list[BaseException] = []
    order = np.random.default_rng(0).permutation(np.tile(np.arange(N), 3))

    def work(part: np.ndarray) -> None:
        try:
            for i in part.tolist():
                k = clone[i]["key"]
                assert got.setdefault(i, k) == k
        except BaseException as exc:  # noqa: BLE001 - a thread's failure is this test's failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p,)) for p in np.array_split(order, 8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: a read lands between another's lookup and its read
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert [got[i] for i in range(N)] == ref


class _PausingLock:
    """A lock that, once armed, stops the thread releasing it inside ``OpenDataset._read`` until ``go`` is set."""

    def __init__(self, lock) -> None:
        self.lock, self.armed = lock, False
        self.paused, self.go = threading.Event(), threading.Event()

    def __enter__(self):
        return self.lock.__enter__()

    def __exit__(self, *exc):
        out = self.lock.__exit__(*exc)
        if self.armed and sys._getframe(1).f_code.co_name == "_read":
            self.armed = False
            self.paused.set()
            assert self.go.wait(30)
        return out


def test_a_shard_evicted_between_its_lookup_and_its_read_is_read_again(fields_ds):
    ds = shardkit.open(fields_ds, max_indexes=1)
    want = ds.raw(0)
    ds.raw(0)  # shard 0 is open
    gate = _PausingLock(ds._lock)
    ds._lock, gate.armed = gate, True
    got: list = []
    reader = threading.Thread(target=lambda: got.append(ds.raw(0)))
    reader.start()
    assert gate.paused.wait(30)  # the reader holds shard 0's open file, not yet its lock
    ds.raw(len(ds) - 1)  # another shard: shard 0's file is evicted and closed
    gate.go.set()
    reader.join(30)
    assert [(s.key, s.jpeg, s.error) for s in got] == [(want.key, want.jpeg, None)]


def test_a_changed_sample_is_a_data_error_naming_shard_and_key(fields_ds, tmp_path):
    import shutil

    root = str(tmp_path / "train")
    shutil.copytree(fields_ds, root)
    ds = shardkit.open(root)
    m = ds.manifest
    idx_first = ds.raw(8)  # shard 1, position 1
    lo = int(ds._index(1).starts[1])
    path = os.path.join(root, m.shards[1].name)
    with open(path, "r+b") as f:  # one byte of the sample's image data, same size
        f.seek(lo + 512 + 100)
        b = f.read(1)
        f.seek(lo + 512 + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    fresh = shardkit.open(root)
    with pytest.raises(DataError, match=rf"{m.shards[1].name}.*{idx_first.key}"):
        fresh[8]
    assert fresh[7]["key"] != idx_first.key and fresh[9]["key"]  # its neighbours still read


def test_a_dataset_without_tables_or_indexes_names_the_command(tmp_path):
    root = str(tmp_path / "train")
    write_fields_dataset(root, FIELDS, n=10, shard_size=4)
    with pytest.raises(shardkit.ShardkitError, match=r"shardkit index"):
        shardkit.open(root)
    report = add_checksums(root)
    assert report.complete
    m = json.loads(open(os.path.join(root, "manifest.json"), encoding="utf-8").read())
    m.pop("tables")
    with open(os.path.join(root, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(m, f)
    ds = shardkit.open(root)
    assert ds[0]["key"] == "k000000"  # random access needs only the sample indexes
    with pytest.raises(TableError, match=r"`shardkit index .*train`"):
        ds.get("k000000")
    for name in os.listdir(root):
        if name.endswith(".idx"):
            os.remove(os.path.join(root, name))
    with pytest.raises(DataError, match=r"sample index not found.*shardkit index"):
        shardkit.open(root)[5]


def test_a_changed_key_table_is_refused(fields_ds, tmp_path):
    import shutil

    root = str(tmp_path / "train")
    shutil.copytree(fields_ds, root)
    name = shardkit.open(root).manifest.tables["keys"]["name"]
    with open(os.path.join(root, name), "r+b") as f:
        f.seek(30)
        b = f.read(1)
        f.seek(30)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(TableError, match=rf"{name}: size or sha256 differs"):
        shardkit.open(root).keys()


def test_one_ranged_request_per_item_on_s3(fields_ds, s3, s3_endpoint, monkeypatch):
    from shardkit.storage.opener import ShardOpener
    from tests.support.faults import FaultProxy

    opened: list[str] = []
    open_ranges = ShardOpener.open_ranges

    def counted(self, url, *args, **kwargs):
        opened.append(url)
        return open_ranges(self, url, *args, **kwargs)

    monkeypatch.setattr(ShardOpener, "open_ranges", counted)

    opts, bucket = s3
    import s3fs

    fs = s3fs.S3FileSystem(**opts)
    fs.put(fields_ds, f"{bucket}/ds/train", recursive=True)
    url = f"s3://{bucket}/ds/train"
    ref = [k for k, _ in plain_samples(fields_ds)]
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        ds = shardkit.open(url, storage_options=via)
        for i in (0, 1, 7, 8, 39, 3):
            proxy.log.clear()
            shard = int(np.searchsorted(ds.offsets, i, side="right") - 1)
            known = shard in ds._indexes
            assert ds[i]["key"] == ref[i]
            gets = [r for r in proxy.log if r.method == "GET"]
            tar = [r for r in gets if r.path.endswith(".tar")]
            idx = [r for r in gets if r.path.endswith(".idx")]
            lo, hi = ds._indexes[shard].byte_range(i - int(ds.offsets[shard]), i - int(ds.offsets[shard]) + 1)
            assert [r.range for r in tar] == [f"bytes={lo}-{hi - 1}"], proxy.log
            assert len(idx) == (0 if known else 1)  # a shard's first item: its index
            assert [r for r in proxy.log if r.method != "GET"] == []  # no size probe: the manifest knows the size
        assert len(opened) == len(set(opened)), opened  # a remote shard stays open across its items (an LRU)
        proxy.log.clear()
        assert ds.keys() == ref  # one GET of the key table, no shard and no index
        assert [r.path.rsplit("/", 1)[1] for r in proxy.log] == [os.path.basename(ds.manifest.tables["keys"]["name"])]


def test_a_cached_shard_is_read_locally_and_a_missing_one_is_not_downloaded(fields_ds, s3, s3_endpoint, tmp_path):
    from shardkit.storage.cache import ShardCache
    from tests.support.faults import FaultProxy

    opts, bucket = s3
    import s3fs

    s3fs.S3FileSystem(**opts).put(fields_ds, f"{bucket}/c/train", recursive=True)
    cache = tmp_path / "cache"
    ds0 = shardkit.open(fields_ds)
    info = ds0.manifest.shards[0]
    c = ShardCache(str(cache))
    with open(os.path.join(fields_ds, info.name), "rb") as src, open(c.path_for(info.sha256, info.bytes), "wb") as dst:
        dst.write(src.read())
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        before = sorted(os.listdir(cache))
        ds = shardkit.open(f"s3://{bucket}/c/train", storage_options=via, cache_dir=str(cache))
        assert ds[2]["key"] == ds0[2]["key"] and ds[10]["key"] == ds0[10]["key"]
        tars = [r for r in proxy.log if r.path.endswith(".tar") and r.method == "GET"]
    assert len(tars) == 1 and tars[0].range.startswith("bytes=") and "000001.tar" in tars[0].path  # shard 0: cache
    assert sorted(os.listdir(cache)) == before  # shard 1 was not downloaded into it


def test_convert_fills_the_per_sample_table(coco_ds):
    import gzip
    import hashlib

    src, url = coco_ds
    m = shardkit.load_manifest(url)
    rows = [
        json.loads(x)
        for x in gzip.decompress(open(os.path.join(url, m.tables["samples"]["name"]), "rb").read()).splitlines()
    ]
    head, rows = rows[0], rows[1:]
    assert head["source_hash"] == "sha256" and [r["key"] for r in rows] == shardkit.open(url).keys()
    for r in rows:
        with open(os.path.join(src, r["path"]), "rb") as f:
            assert r["source_sha256"] == hashlib.sha256(f.read()).hexdigest()
        assert (r["width"], r["height"]) == SIZE and r["class"] is None and "image_id" in r["meta"]


def test_crowd_regions_are_not_boxes_and_their_pixels_leave_the_instance_map(coco_ds):
    """As the loader: a crowd region is no box, its instance pixels are -1, the other objects' rows close up."""
    from dataclasses import replace

    from shardkit.access.items import ItemSpec, decode_item
    from shardkit.loader.decode.decoders import make_decoder

    ds = shardkit.open(coco_ds[1])
    j = next(j for j in range(len(ds)) if len(ds.raw(j).objects) >= 2)
    s = ds.raw(j)
    before = decode_item(s, ItemSpec.of(ds.manifest), make_decoder("pil"))
    crowd = np.zeros(len(s.objects), bool)
    crowd[0] = True
    s2 = replace(s, objects=replace(s.objects, iscrowd=crowd))
    after = decode_item(s2, ItemSpec.of(ds.manifest), make_decoder("pil"))
    assert torch.equal(after["boxes"], before["boxes"][1:]) and torch.equal(
        after["box_labels"], before["box_labels"][1:]
    )
    inst = before["instances"].numpy()
    want = np.where(inst == 0, -1, np.where(inst > 0, inst - 1, inst))  # row 0 gone, the others one up
    assert np.array_equal(after["instances"].numpy(), want)
