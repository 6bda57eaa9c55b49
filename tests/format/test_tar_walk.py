"""The tar header walker: skip to a sample without reading data, ignore foreign members, report damage."""

from __future__ import annotations

import io
import pickle
import tarfile

import pytest

from shardkit.format.tar import ShardReader, TarDamage
from tests.support.data import RecordingFile, member_ranges, write_dataset


def _tar(members: list[tuple[str, bytes]], fmt=tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class CountingFile(io.BytesIO):
    def __init__(self, data):
        super().__init__(data)
        self.read_bytes = 0

    def read(self, n=-1):
        b = super().read(n)
        self.read_bytes += len(b)
        return b


def test_skip_reads_only_headers(tmp_path):
    ds = write_dataset(str(tmp_path / "d"), num_samples=20, shard_size=20, size=(200, 150))
    with open(ds.manifest.shard_url(0), "rb") as f:
        data = f.read()
    cf = CountingFile(data)
    r = ShardReader(cf, "mem.tar")
    s = r.read(17)
    assert s.key == ds.keys[17] and s.label == ds.labels[s.key] and s.jpeg[:2] == b"\xff\xd8"
    assert cf.read_bytes < 18 * 3 * 3 * 512 + len(s.jpeg) < len(data) // 2  # headers (and pax records) only
    assert r.read(19).key == ds.keys[19]
    assert r.read(20) is None
    with pytest.raises(ValueError, match="cannot go back"):
        r.read(3)


class _Marker:
    """Unpickling this creates the file ``path`` (a stand-in for running arbitrary code)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_foreign_members_ignored_never_unpickled(tmp_path):
    marker = tmp_path / "UNPICKLED"
    evil = pickle.dumps(_Marker(str(marker)))
    pickle.loads(evil)  # the payload works: unpickling it creates the marker
    assert marker.exists()
    marker.unlink()
    data = _tar(
        [
            ("a.cls", b"1"),
            ("a.jpg", b"JPEG"),
            ("a.pyd", evil),
            ("a.json", b'{"x": 1}'),
            ("dir/b.cls", b"2"),
            ("dir/b.jpg", b"J2"),
            ("__meta__.txt", b"x"),
        ]
    )
    f = RecordingFile(data)
    r = ShardReader(f, "mem.tar")
    a = r.read(0)
    assert (a.key, a.label, a.jpeg, a.meta) == ("a", 1, b"JPEG", {"x": 1}) and not hasattr(a, "extra")
    b = r.read(1)
    assert (b.key, b.label, b.jpeg) == ("dir/b", 2, b"J2")
    assert r.read(2) is None
    assert not marker.exists()
    ranges = member_ranges(data)
    for name in ("a.pyd", "__meta__.txt"):  # foreign members: not a byte of them is read
        assert f.touched(*ranges[name]) == [], (name, ranges[name], f.reads)
    assert f.touched(*ranges["a.jpg"]) != []  # (the recording works: the image was read)


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_long_names(fmt):
    key = "x" * 120
    r = ShardReader(io.BytesIO(_tar([(f"{key}.cls", b"4"), (f"{key}.jpg", b"J")], fmt)), "mem.tar")
    s = r.read(0)
    assert s.key == key and s.label == 4


def test_missing_field_is_an_error_not_a_crash():
    r = ShardReader(io.BytesIO(_tar([("a.jpg", b"J"), ("b.cls", b"1")])), "mem.tar")
    assert r.read(0).error == "missing field 'cls'"
    assert r.read(1).error == "missing field 'jpg'"


def test_damage_reported_with_offset():
    data = bytearray(_tar([("a.cls", b"1"), ("a.jpg", b"J" * 2000), ("b.cls", b"2"), ("b.jpg", b"K" * 10)]))
    bad = data.find(b"b.cls")
    data[bad] = ord("c")  # header checksum no longer matches
    r = ShardReader(io.BytesIO(bytes(data)), "s.tar")
    assert r.read(0).key == "a"  # complete before the damage: delivered
    with pytest.raises(TarDamage, match=rf"s.tar: damaged tar at byte {bad}: header checksum"):
        r.read(1)
    r = ShardReader(io.BytesIO(bytes(data[: data.find(b"JJJJ") + 100])), "t.tar")
    with pytest.raises(TarDamage, match="truncated member a.jpg"):
        r.read(0)
