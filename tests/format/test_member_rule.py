"""The shard format: one member rule shared by loader and verify (awkward names, repeated keys), the sample
index against the header walk, incomplete conversions and bad ``.json`` members (issues #10 and #11)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from dataclasses import replace

import numpy as np
import pytest

import shardkit
from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.demo.sampledata import make_imagefolder
from shardkit.errors import DataError
from shardkit.format import IndexDamage, IndexMismatch, RawSample, ShardReader, load_index, split_member
from shardkit.format.manifest import load_manifest
from shardkit.format.members import UnsafeName
from shardkit.ops.verify import verify
from tests.support.data import jpeg_bytes, tar_bytes, write_raw_dataset

SMALL = dict(size=16, pin_memory=False, multiprocessing_context="fork")
CLASSES = ["x", "y", "z"]
J = [jpeg_bytes(n % 3, n, (24, 20)) for n in range(12)]


def _meta(label: int) -> bytes:
    return json.dumps({"class": CLASSES[label]}).encode()


def _sample(key: str, label: int, j: int, order=("cls", "jpg", "json")) -> list:
    fields = {"cls": str(label).encode(), "jpg": J[j], "json": _meta(label)}
    return [(f"{key}.{e}", fields[e]) for e in order]


def _awkward() -> list:
    return [
        *_sample("a", 0, 0),
        *_sample("dir.v1/b", 1, 1),  # dots in a directory: key "dir.v1/b"
        ("__key__.cls", b"2"),
        ("__meta__.json", b"{}"),  # webdataset-reserved names: no sample
        *_sample("c", 2, 2, order=("json", "jpg", "cls")),  # members in another order: one sample
        *_sample("d", 0, 3),
        *_sample("d", 1, 4),  # adjacent duplicate key
        *_sample("e", 1, 5),
        *_sample("a", 2, 6),  # duplicate key, not adjacent
        ("f.jpg", J[7]),
        ("g.jpg", J[8]),
        ("f.cls", b"1"),
        ("g.cls", b"2"),  # interleaved: four broken samples
        *_sample("../../up", 0, 9),  # unsafe names
        *_sample("/abs/k", 1, 10),
        ("h.v2.cls", b"0"),
        ("h.v2.jpg", J[11]),  # key "h", fields "v2.*": no usable fields
        *_sample("i", 1, 11),
    ]


def _walk(path: str) -> list[RawSample]:
    with open(path, "rb") as f:
        r = ShardReader(f, path, num_classes=len(CLASSES))
        out = []
        while (s := r.read(r.index, r.index)) is not None:
            out.append(s)
        return out


def test_member_rule():
    assert split_member("dir.v1/b.cls") == ("dir.v1/b", "cls")
    assert split_member("a.tar.gz") == ("a", "tar.gz")
    assert split_member("__key__.cls") is None and split_member("noext") is None and split_member("dir/.hidden") is None
    for bad in ("../x.jpg", "a/../../x.jpg", "/abs/x.jpg", "x" * 5000 + ".jpg"):
        with pytest.raises(UnsafeName):
            split_member(bad)
    assert split_member("a..b.jpg") == ("a", ".b.jpg")  # ".." inside a name is not a path component


@pytest.mark.timeout(60)
def test_json_bounds_are_linear_and_ignore_brackets_in_strings():
    from shardkit.format.members import parse_meta

    assert parse_meta(json.dumps({"s": "[" * 1000, "t": '\\"[[', "a": [[[1]]] * 40}).encode())["a"][0] == [[1]]
    for bad, why in [
        (b"[" * 100_000, "nested deeper"),
        (b"{" * 65 + b"}" * 65, "nested deeper"),
        (b'"' + b'\\"' * 500_000, "not JSON"),
        (b"{}" + b" " * (1 << 20), "limit"),
        (b"[1]", "not an object"),
        (b"\xff{}", "not JSON"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_meta(bad)


def test_loader_and_verify_agree_sample_by_sample(tmp_path):
    data = tar_bytes(_awkward())
    probe = write_raw_dataset(str(tmp_path / "probe"), [(data, 0)], CLASSES)
    walked = _walk(os.path.join(probe, "train-000000.tar"))
    root = write_raw_dataset(str(tmp_path / "ds"), [(data, len(walked))], CLASSES)
    errors = [(s.key, s.error) for s in walked if s.error]
    assert [k for k, _ in errors] == ["d", "a", "f", "g", "f", "g", "../../up", "/abs/k", "h"]
    assert {e for k, e in errors if k in ("d", "a")} == {
        f"key {k!r} appears more than once in the shard (damaged or tampered)" for k in "da"
    }
    assert all("unsafe member name" in e for k, e in errors if k.startswith(("/", "..")))
    good = [s.key for s in walked if not s.error]
    assert good == ["a", "dir.v1/b", "c", "d", "e", "i"]
    # the loader delivers exactly the samples without error, and counts the others
    loader = shardkit.load(root, batch_size=4, num_workers=0, raw=True, shuffle=False, **SMALL)
    got = [s for batch in loader for s in batch]
    assert [s.key for s in got] == good and [s.label for s in got] == [s.label for s in walked if not s.error]
    assert loader.stats.skipped == len(errors)
    # verify reports exactly those samples, with the loader's reason, and nothing else
    report = verify(root)
    assert [(p.key, p.message) for p in report.problems] == errors
    assert all(str(p).startswith("train-000000.tar key ") for p in report.problems)
    with pytest.raises(DataError, match="appears more than once"):
        list(shardkit.load(root, batch_size=4, num_workers=0, raw=True, shuffle=False, strict=True, **SMALL))


def test_adjacent_duplicate_keys_are_damage_for_both(tmp_path):
    # the case: 00000000.* twice in a row, then 00000002.*, manifest says 2 samples
    members = _sample("00000000", 0, 0) + _sample("00000000", 1, 1) + _sample("00000002", 2, 2)
    root = write_raw_dataset(str(tmp_path / "ds"), [(tar_bytes(members), 2)], CLASSES)
    msgs = [str(p) for p in verify(root).problems]
    assert msgs == [
        "train-000000.tar key 00000000: key '00000000' appears more than once in the shard (damaged or tampered)",
        "train-000000.tar: holds 3 samples, manifest says 2",
    ]
    keys = [
        s.key for b in shardkit.load(root, batch_size=2, num_workers=0, raw=True, shuffle=False, **SMALL) for s in b
    ]
    assert keys == ["00000000"]  # never twice


def test_deep_json_is_a_bad_sample_not_a_crash(tmp_path, capsys):
    members = _sample("a", 0, 0) + [("b.cls", b"1"), ("b.jpg", J[1]), ("b.json", b"[" * 100_000)] + _sample("c", 2, 2)
    members += [("d.cls", b"1"), ("d.jpg", J[3]), ("d.json", b"{not json")]
    root = write_raw_dataset(str(tmp_path / "ds"), [(tar_bytes(members), 4)], CLASSES)
    problems = verify(root).problems
    assert [(p.key, p.message.split(":")[0]) for p in problems] == [
        ("b", "bad .json member"),
        ("d", "bad .json member"),
    ]
    assert "nested deeper than 64" in problems[0].message
    assert main(["verify", root, "--quiet"]) == 1 and "b: bad .json member" in capsys.readouterr().out
    loader = shardkit.load(root, batch_size=2, num_workers=0, raw=True, shuffle=False, **SMALL)
    got = [s for batch in loader for s in batch]
    assert [s.key for s in got] == ["a", "c"] and got[0].meta == {"class": "x"} and loader.stats.skipped == 2
    assert RawSample("k", 0, "s", 0, meta_bytes=b"[" * 100_000).meta == {}
    with pytest.raises(DataError, match="bad .json member"):
        list(shardkit.load(root, batch_size=2, num_workers=0, raw=True, shuffle=False, strict=True, **SMALL))


# --- the sample index -------------------------------------------------------------------------------------------

OPTS = ConvertConfig(image=EncodeConfig(short_side=32), shard_size=6, seed=3)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    src = make_imagefolder(str(tmp_path_factory.mktemp("src") / "if"), num_classes=3, per_class=7)
    dest = str(tmp_path_factory.mktemp("out") / "ds")
    return convert(src, dest, OPTS, workers=1, quiet=True).splits[0].url


@pytest.fixture()
def ds(tmp_path, converted):
    dest = str(tmp_path / "ds")
    shutil.copytree(converted, dest)
    return dest


def test_index_slices_equal_the_header_walk(converted):
    m = load_manifest(converted)
    assert m.version == 3 and m.sample_index == "sidecar-2" and len(m.shards) == 4
    rng = np.random.default_rng(0)
    for i, s in enumerate(m.shards):
        url = m.shard_url(i)
        assert os.path.exists(m.index_url(i)) and m.index_url(i).endswith(".idx")
        walked = _walk(url)
        idx = load_index(url, shard_bytes=s.bytes, shard_sha256=s.sha256)
        assert len(idx) == s.samples == len(walked)
        data = open(url, "rb").read()
        spans = [(0, s.samples)] + [tuple(sorted(rng.choice(s.samples + 1, 2, replace=False))) for _ in range(5)]
        for a, b in spans:
            lo, hi = idx.byte_range(a, b)
            got = idx.slice(data[lo:hi], a, b, url=url, first_gid=a, num_classes=3)
            assert got == [walked[k] for k in range(a, b)]
            assert all(x.error is None and x.jpeg[:2] == b"\xff\xd8" for x in got)
    assert verify(converted).ok


def _rewrite_index(path: str, patch) -> None:
    """Apply ``patch`` to an index's body and recompute its CRC (a consistent but wrong index)."""
    body = bytearray(open(path, "rb").read()[:-4])
    patch(body)
    open(path, "wb").write(bytes(body) + struct.pack("<I", zlib.crc32(bytes(body))))


def test_damaged_or_wrong_index_is_detected(ds):
    m = load_manifest(ds)
    s0, url0 = m.shards[0], m.shard_url(0)
    ipath = m.index_url(0)
    good = open(ipath, "rb").read()
    # a flipped byte: CRC
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    open(ipath, "wb").write(bytes(bad))
    with pytest.raises(IndexDamage, match="CRC"):
        load_index(url0, shard_bytes=s0.bytes, shard_sha256=s0.sha256)
    # another shard's index
    shutil.copy(m.index_url(1), ipath)
    with pytest.raises(IndexDamage, match="another shard"):
        load_index(url0, shard_bytes=s0.bytes, shard_sha256=s0.sha256)
    # consistent (CRC fixed) but pointing at the wrong bytes: the slice checks each member's tar header
    open(ipath, "wb").write(good)
    idx = load_index(url0, shard_bytes=s0.bytes, shard_sha256=s0.sha256)
    sizes_at = len(good) - 4 - idx.crc32c.nbytes - idx.sizes.nbytes  # sizes, then the checksums, then the CRC-32
    _rewrite_index(
        ipath, lambda b: b.__setitem__(slice(sizes_at + 4, sizes_at + 8), struct.pack("<I", idx.sizes[0, 1] - 1))
    )
    wrong = load_index(url0, shard_bytes=s0.bytes, shard_sha256=s0.sha256)
    data = open(url0, "rb").read()
    lo, hi = wrong.byte_range(0, 2)
    got = wrong.slice(data[lo:hi], 0, 2, url=url0)  # sample 0 withheld, by its CRC32C and by its tar header alone
    assert "changed since conversion" in got[0].error and got[0].jpeg is None and got[1].error is None
    got = replace(wrong, crc32c=None).slice(data[lo:hi], 0, 2, url=url0)
    assert "differs from the index" in got[0].error and got[0].jpeg is None and got[1].error is None
    with pytest.raises(IndexMismatch, match="range read returned"):
        idx.slice(data[lo : hi - 1], 0, 2, url=url0)
    # verify names each kind of damage
    msgs = [str(p) for p in verify(ds).problems]
    assert msgs == [
        "train-000000.idx: sample index does not match the tar (the loader withholds the samples it rejects)"
    ]
    os.remove(m.index_url(2))
    msgs = [str(p) for p in verify(ds, quick=True).problems]
    assert len(msgs) == 1 and msgs[0].startswith("train-000002.idx: sample index unusable") and "cannot read" in msgs[0]


def test_datasets_without_index_still_load_and_verify(ds, capsys):
    m = load_manifest(ds)
    n = m.num_samples
    path = os.path.join(ds, "manifest.json")
    d = json.load(open(path))
    d["version"] = 1
    del d["sample_index"]
    json.dump(d, open(path, "w"))
    for i in range(len(m.shards)):
        os.remove(m.index_url(i))
    old = load_manifest(ds)
    assert old.version == 1 and old.sample_index == ""
    assert verify(ds).ok
    keys = [k for _, _, ks in shardkit.load(ds, batch_size=5, num_workers=0, with_keys=True, **SMALL) for k in ks]
    assert len(keys) == len(set(keys)) == n


# --- verify: incomplete conversions and its summary -------------------------------------------------------------


def test_verify_reports_incomplete_splits(tmp_path, capsys):
    src = make_imagefolder(str(tmp_path / "src"), num_classes=2, per_class=4, splits={"train": 4, "val": 2})
    dest = str(tmp_path / "ds")
    convert(src, dest, OPTS, workers=1, quiet=True)
    assert verify(dest).ok
    os.remove(os.path.join(dest, "val", "manifest.json"))  # as after Ctrl-C while val was being written
    report = verify(dest)
    assert [p.shard for p in report.problems] == ["val/"]
    assert "incomplete conversion" in report.problems[0].message and "shardkit convert" in report.problems[0].message
    assert "1 of 1 planned shards finished" in report.problems[0].message
    assert main(["verify", dest, "--quiet"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("val/: incomplete conversion: 1 shard(s) and a conversion journal (_shardkit/)")
    assert main(["info", dest]) == 0 and "val" in capsys.readouterr().err
    # a single split interrupted before its manifest: a problem, not "no manifest here"
    os.remove(os.path.join(dest, "train", "manifest.json"))
    report = verify(os.path.join(dest, "train"))
    assert [p.shard for p in report.problems] == ["./"] and report.splits == 1
    # journal only (planned, no shard yet)
    for f in os.listdir(os.path.join(dest, "val")):
        if f.endswith((".tar", ".idx")):
            os.remove(os.path.join(dest, "val", f))
    shutil.rmtree(os.path.join(dest, "train"))
    msgs = [str(p) for p in verify(dest).problems]
    assert len(msgs) == 1 and msgs[0].startswith("val/: incomplete conversion: 0 shard(s) and a conversion journal")
    # a conversion stopped in its first split: the later split, never begun, is reported too (plans come first)
    cls = sorted(os.listdir(os.path.join(src, "train")))[0]
    with open(os.path.join(src, "train", cls, "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8 not a jpeg")
    dest2 = str(tmp_path / "ds2")
    from shardkit.errors import ConvertError

    with pytest.raises(ConvertError, match="broken.jpg: skipped .*--strict"):
        convert(src, dest2, ConvertConfig(image=OPTS.image, shard_size=6, seed=3, strict=True), workers=1, quiet=True)
    msgs = sorted(str(p) for p in verify(dest2).problems)
    assert [m.split(":")[0] for m in msgs] == ["train/", "val/"]
    assert (
        msgs[1].startswith("val/: incomplete conversion: 0 shard(s) and a conversion journal")
        and "0 of 1 planned shards finished" in msgs[1]
    )


def test_verify_summary_and_paths_of_a_single_folder_dataset(ds, capsys):
    assert main(["verify", ds, "--quick", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("OK: checksums of 4 shards (21 samples listed, not decoded)")
    assert main(["verify", ds, "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("OK: samples in 4 shards, 21 samples")
    assert not os.path.exists(os.path.join(ds, "train"))
    os.remove(os.path.join(ds, "train-000001.tar"))
    assert [str(p) for p in verify(ds).problems] == ["train-000001.tar: shard is missing"]


# --- bounded fuzzing of the index: any damage is refused or detected, never wrong bytes --------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from shardkit.format import EncodedSample, write_tar  # noqa: E402
from shardkit.format.index import SampleIndex  # noqa: E402

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _fuzz_shard():
    import io

    samples = [EncodedSample(f"k{i:03d}", J[i % len(J)], i % 3, {"class": CLASSES[i % 3]}) for i in range(9)]
    buf = io.BytesIO()
    w = write_tar(samples, buf)
    return buf.getvalue(), w


_DATA, _WRITTEN = _fuzz_shard()
_INDEX = _WRITTEN.index.to_bytes()


def _walk_bytes(data: bytes) -> list:
    import io

    r = ShardReader(io.BytesIO(data), "s.tar", num_classes=3)
    out = []
    try:
        while (s := r.read(r.index, r.index)) is not None:
            out.append(s)
    except Exception:  # noqa: BLE001 - TarDamage: the walk stops; compare what it delivered
        pass
    return out


@pytest.mark.timeout(120)
@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, len(_INDEX) - 5), st.integers(1, 255)), min_size=1, max_size=3),
    span=st.tuples(st.integers(0, 8), st.integers(1, 9)),
)
def test_fuzz_index_damage_is_refused_or_detected(flips, span):
    body = bytearray(_INDEX[:-4])
    for at, x in flips:
        body[at] ^= x
    body = bytes(body)
    data = body + struct.pack("<I", zlib.crc32(body))  # a consistent CRC: only the content checks remain
    try:
        idx = SampleIndex.from_bytes(data, "s.idx", shard_bytes=len(_DATA), shard_sha256=_WRITTEN.sha256)
    except IndexDamage:
        return
    a, b = min(span), max(span)
    if a == b or b > len(idx):
        return
    lo, hi = idx.byte_range(a, b)
    got = idx.slice(_DATA[lo:hi], a, b, url="s.tar", first_gid=a, num_classes=3)
    _withheld_or_walked(got, _walk_bytes(_DATA)[a:b])  # accepted: then it is exactly what the header walk reads


@pytest.mark.timeout(120)
@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(_DATA) - 1), st.integers(1, 255)), min_size=1, max_size=3))
def test_fuzz_damaged_shard_bytes_never_differ_from_the_walk(flips):
    data = bytearray(_DATA)
    for at, x in flips:
        data[at] ^= x
    _slice_is_the_walk_or_refused(bytes(data))


def _withheld_or_walked(got: list, walked: list) -> None:
    """Each sample sliced is withheld (its error says the shard changed, no field delivered) or exactly
    what the header walk of the converted bytes reads."""
    assert len(got) == len(walked)
    for g, w in zip(got, walked):
        if g.error and "changed since conversion" in g.error:
            assert g.jpeg is None and g.label is None and g.meta_bytes == b"" and not g.unparsed
        else:
            assert g == w


def _slice_is_the_walk_or_refused(data: bytes) -> None:
    """Damaged shard bytes: each sample is withheld or exactly the walk's of the *converted* bytes, by the
    index's CRC32C and, for an index without checksums, by its tar header checks (then the walk of the
    damaged bytes is the reference: a flip in a JPEG's data is only visible to a checksum)."""
    idx = _WRITTEN.index
    lo, hi = idx.byte_range(0, len(idx))
    got = idx.slice(data[lo:hi], 0, len(idx), url="s.tar", first_gid=0, num_classes=3)
    _withheld_or_walked(got, _walk_bytes(_DATA))
    if data[lo:hi] != _DATA[lo:hi]:
        assert any(g.error for g in got), "a changed byte inside the samples is caught by their CRC32C"
    got = replace(idx, crc32c=None).slice(data[lo:hi], 0, len(idx), url="s.tar", first_gid=0, num_classes=3)
    _withheld_or_walked(got, [_walk_alone(data, idx, i) for i in range(len(idx))])


def _walk_alone(data: bytes, idx, i: int):
    """What the header walk reads of sample ``i``'s bytes alone (as the only sample of a tar), placed as
    sample ``i``; None when the walk does not find exactly that one sample there."""
    from dataclasses import replace as _replace

    a, b = idx.byte_range(i, i + 1)
    found = _walk_bytes(data[a:b] + bytes(1024))
    if len(found) != 1:
        return None
    return _replace(found[0], gid=i, index=i)


_HEADERS = [int(_WRITTEN.index.starts[i] + _WRITTEN.index.offsets[i, c]) - 512 for i in range(9) for c in range(3)]


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(_HEADERS), st.integers(0, 511), st.integers(0, 255)), min_size=1, max_size=3
    )
)
def test_fuzz_tampered_headers_with_valid_checksums_never_differ_from_the_walk(edits):
    """Any header bytes (type flag, USTAR prefix, size...) changed and the checksum recomputed: the slice is the
    walk's samples or refused (found the USTAR prefix that renamed a sample for the walk only)."""
    data = bytearray(_DATA)
    for at, off, value in edits:
        if not 148 <= off < 156:
            data[at + off] = value
            h = data[at : at + 512]
            h[148:156] = b" " * 8
            data[at + 148 : at + 156] = b"%06o\0 " % sum(h)
    _slice_is_the_walk_or_refused(bytes(data))


def test_rerun_over_shards_without_index_does_not_claim_one(tmp_path):
    # shards resumed from a conversion by a shardkit without the index (no .idx files): the manifest claims none
    src = make_imagefolder(str(tmp_path / "src"), num_classes=2, per_class=4)
    dest = str(tmp_path / "ds")
    split = convert(src, dest, OPTS, workers=1, quiet=True).splits[0].url
    for f in os.listdir(split):
        if f.endswith(".idx"):
            os.remove(os.path.join(split, f))
    os.remove(os.path.join(split, "manifest.json"))
    res = convert(src, dest, OPTS, workers=1, quiet=True)
    assert res.converted == 0 and load_manifest(split).sample_index == ""
    assert verify(dest).ok


def test_index_over_http_through_the_loaders_opener(converted, http_root, tmp_path):
    from shardkit.loader.config import StorageConfig
    from shardkit.storage.opener import ShardOpener

    base, directory = http_root
    shutil.copytree(converted, os.path.join(directory, "ds"))
    m = load_manifest(f"{base}/ds")
    opener = ShardOpener(StorageConfig(cache_dir=str(tmp_path / "cache")))  # the test server has no range requests
    s, url = m.shards[1], m.shard_url(1)
    idx = load_index(url, shard_bytes=s.bytes, shard_sha256=s.sha256, open_fn=opener.open)
    with opener.open(url, s.bytes, s.sha256) as f:  # the cache's content key
        got = idx.read(f, 1, s.samples, url=url, first_gid=7, num_classes=3)
    walked = _walk(os.path.join(converted, s.name))[1:]
    assert [(x.key, x.label, x.jpeg, x.meta_bytes) for x in got] == [
        (x.key, x.label, x.jpeg, x.meta_bytes) for x in walked
    ]
    assert [x.gid for x in got] == list(range(7, 7 + s.samples - 1)) and all(x.error is None for x in got)
    assert verify(f"{base}/ds").ok


def _tarfile_write(samples, f) -> None:
    """The writer as it was before its headers were hand-filled: ``tarfile`` in stream mode."""
    import io
    import tarfile

    from shardkit.format.writer import meta_bytes

    with tarfile.open(fileobj=f, mode="w|") as tf:
        for s in samples:
            fields = {"cls": str(int(s.label)).encode("ascii"), "jpg": s.jpeg, "json": meta_bytes(s.meta)}
            for ext in sorted(fields):
                ti = tarfile.TarInfo(f"{s.key}.{ext}")
                ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = len(fields[ext]), 0, 0o444, "shardkit", "shardkit"
                tf.addfile(ti, io.BytesIO(fields[ext]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[A-Za-z0-9_-]{1,80}", fullmatch=True).filter(lambda k: not k.startswith("__")),
            st.binary(max_size=3000),
            st.integers(0, 10**6),
            st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3),
        ),
        unique_by=lambda t: t[0],
        max_size=12,
    )
)
def test_writer_bytes_equal_tarfiles(rows):
    """The hand-filled headers give byte for byte what tarfile writes (sizes, names, record padding, metadata)."""
    import io

    samples = [EncodedSample(k, data, label, meta) for k, data, label, meta in rows]
    ours, ref = io.BytesIO(), io.BytesIO()
    w = write_tar(samples, ours)
    _tarfile_write(samples, ref)
    assert ours.getvalue() == ref.getvalue()
    assert w.bytes == len(ref.getvalue()) and w.samples == len(samples)


@pytest.mark.parametrize(
    "name,size",
    [
        ("k.jpg", 0),
        ("k.jpg", 1),
        ("a" * 100, 5),
        ("a" * 101, 5),
        ("é.jpg", 3),
        ("k.jpg", 8**11 - 1),
        ("k.jpg", 8**11),
    ],
)
def test_member_header_equals_tarfile_including_its_pax_cases(name, size):
    import tarfile

    from shardkit.format.writer import member_header

    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = size, 0, 0o444, "shardkit", "shardkit"
    assert member_header(name, size) == ti.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")
