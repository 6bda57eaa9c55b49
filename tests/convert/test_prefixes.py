"""Prefix spreading at conversion (``shardkit convert --prefixes N``), against simple references.

* names: ``spread_name``/``prefix_of`` round trip, every prefix holds floor or ceil of shards/N, and the
  manifest's name rule accepts exactly what ``spread_name`` makes (a character-by-character reference rule);
* meaning unchanged: a spread conversion is the flat conversion of the same input with each shard ``j``
  renamed ``spread_name(name, j, N)`` (overflow shards included), its sidecars next to it and nothing else in
  DEST; the loader yields the same (key, label, pixels) sequence and ``verify`` checks every shard;
* resume, ``--num-tasks`` + merge, ``--overwrite`` with another ``--prefixes`` (no stale shard left), a spread
  DEST as SRC, ``file://`` through the CLI and ``s3://`` through moto.

The mutant gate (``tests/mutants/scale_prefixes.py``) plants the bugs these tests must catch.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit
from shardkit.convert import ConvertConfig, EncodeConfig, convert, merge
from shardkit.errors import ConvertError, ManifestError
from shardkit.format import index_url
from shardkit.format.manifest import Manifest, ShardInfo, load_manifest
from shardkit.format.prefixes import MAX_PREFIXES, prefix_dirs, prefix_of, spread_name
from shardkit.format.splits import find_splits
from shardkit.ops.verify import verify

SETTINGS = dict(derandomize=True, deadline=None, phases=[Phase.explicit, Phase.generate])
_HEX = "0123456789abcdef"
_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_REST = _FIRST + ".-"

# ----------------------------------------------------------------------------- names


def _flat_ok(name: str) -> bool:
    """The flat shard-name rule, spelled out: a letter, digit or ``_``, then letters, digits, ``_.-``, then ``.tar``;
    no ``..`` anywhere."""
    return (
        len(name) >= 5
        and name.endswith(".tar")
        and name[0] in _FIRST
        and all(c in _REST for c in name)
        and ".." not in name
    )


def _reference_ok(name: str) -> bool:
    """A name ``spread_name`` can make: a flat name, or four lowercase hex digits, ``/``, a flat name."""
    parts = name.split("/")
    if len(parts) == 1:
        return _flat_ok(name)
    return len(parts) == 2 and len(parts[0]) == 4 and all(c in _HEX for c in parts[0]) and _flat_ok(parts[1])


def _accepted(name: str) -> bool:
    m = Manifest(split="train", classes=["a"], shards=[ShardInfo(name, 1, 10, "0" * 64)], fields=["image", "label"])
    try:
        m.validate()
    except ManifestError:
        return False
    return True


_flat_names = st.builds(
    lambda a, b: a + b + ".tar", st.sampled_from(list(_FIRST)), st.text(alphabet=_REST, max_size=12)
).filter(lambda n: ".." not in n)
_pieces = st.sampled_from(
    ["ab12", "AB12", "abc", "ab123", "0000", "ffff", "g000", "..", ".", "", "/", "x", "train-000001.tar", ".tar",
     "a..b.tar", "s3:", "pipe:", "\\", " ", "é", "%2e"]
)  # fmt: skip


@settings(**SETTINGS, max_examples=120)
@given(_flat_names, st.integers(0, 10**6), st.integers(1, MAX_PREFIXES))
@example("train-000005.tar", 5, 4)
def test_spread_name_round_trips_and_is_accepted(name, index, n):
    """``prefix_of(spread_name(name, j, N))`` is directory ``j % N`` (none with one prefix), the file name is kept,
    and the manifest accepts the spread name exactly when the reference rule does (always, for a valid name)."""
    s = spread_name(name, index, n)
    assert prefix_of(s) == ("" if n == 1 else prefix_dirs(n)[index % n])
    assert s == (name if n == 1 else f"{prefix_of(s)}/{name}")
    assert _reference_ok(s) and _accepted(s)


@settings(**SETTINGS, max_examples=300)
@given(st.lists(st.one_of(_pieces, _flat_names), min_size=1, max_size=4), st.sampled_from(["", "/"]))
@example(["a..b.tar"], "")
@example(["ab12", "a..b.tar"], "")
@example(["ab12", "..", "x.tar"], "")
@example(["ab12", "cd34", "x.tar"], "")
@example(["AB12", "x.tar"], "")
@example(["ab12", "x.tar"], "/")
def test_name_rule_accepts_exactly_the_reference(parts, lead):
    """Names glued from tricky pieces (``..``, upper-case or short hex, URLs, nesting, absolute): the manifest's rule
    and the reference rule agree on every one."""
    name = lead + "/".join(parts)
    assert _accepted(name) == _reference_ok(name), name


@pytest.mark.parametrize("name", ["a/../b.tar", "ab12/../b.tar", "../b.tar", "/ab12/x.tar", "ab12/cd34/x.tar",
                                  "AB12/x.tar", "s3://b/x.tar", "ab12/.x.tar", "ab12//x.tar"])  # fmt: skip
def test_name_rule_refuses_paths_that_leave_the_split(name):
    assert not _accepted(name)


@settings(**SETTINGS, max_examples=60)
@given(st.integers(0, 300), st.integers(1, 64))
@example(10, 4)
@example(3, 8)
def test_every_prefix_holds_floor_or_ceil_of_the_shards(shards, n):
    """Counted by brute force: each of the N directories (of ``min(shards, N)`` used) holds ``shards // N`` or one
    more; directory names are distinct, four hex digits, and the first N of any larger count."""
    dirs = prefix_dirs(n)
    assert len(set(dirs)) == n and all(len(d) == 4 and set(d) <= set(_HEX) for d in dirs)
    assert prefix_dirs(min(n + 7, MAX_PREFIXES))[:n] == dirs
    counts: dict[str, int] = {}
    for j in range(shards):
        d = prefix_of(spread_name(f"train-{j:06d}.tar", j, n))
        counts[d] = counts.get(d, 0) + 1
    assert sum(counts.values()) == shards
    assert len(counts) == min(shards, n)
    assert all(shards // n <= c <= -(-shards // n) for c in counts.values())


@pytest.mark.parametrize("bad", [0, -1, MAX_PREFIXES + 1, True, 2.0, "4"])
def test_bad_prefix_counts_are_refused_naming_the_option(bad):
    with pytest.raises(ValueError, match=r"--prefixes"):
        ConvertConfig(prefixes=bad)


# ----------------------------------------------------------------------------- conversions


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    """24 images in sorted order, 12 tiny then 12 noisy: with ``shuffle=False`` and a byte cap, the pilot
    underestimates the tail, so planned shards spill into overflow shards."""
    root = str(tmp_path_factory.mktemp("pfx") / "src")
    rng = np.random.default_rng(0)
    for c in ("a_small", "b_large"):
        os.makedirs(f"{root}/{c}")
    for i in range(12):
        Image.new("RGB", (24, 24), (i * 8, 50, 90)).save(f"{root}/a_small/{i:02d}.png")
        Image.fromarray(rng.integers(0, 255, (72, 96, 3), dtype=np.uint8)).save(f"{root}/b_large/{i:02d}.png")
    return root


N = 3  #: the spread conversions' prefixes (not a divisor of the planned shards: overflow shard 4 goes to dir 1)


def _opts(prefixes: int = 1) -> ConvertConfig:
    return ConvertConfig(image=EncodeConfig(short_side=72), shard_bytes=60_000, shuffle=False, prefixes=prefixes)


@pytest.fixture(scope="module")
def flat_and_spread(src, tmp_path_factory) -> tuple[str, str]:
    """The same input converted flat and with ``--prefixes 3``: ``(flat split dir, spread split dir)``. Four planned
    shards and one overflow shard, numbered 4: in directory 4 % 3 = 1, not in the first one."""
    base = tmp_path_factory.mktemp("out")
    convert(src, str(base / "flat"), _opts(1), workers=1, quiet=True)
    convert(src, str(base / "spread"), _opts(N), workers=1, quiet=True)
    return str(base / "flat" / "train"), str(base / "spread" / "train")


def _files(split_dir: str) -> set[str]:
    """Every file below a split folder except the journal, as relative ``/`` paths; folders that hold nothing too."""
    out = set()
    for d, dirs, files in os.walk(split_dir):
        rel = os.path.relpath(d, split_dir).replace(os.sep, "/")
        dirs[:] = [x for x in dirs if rel != "." or x != "_shardkit"]  # the split's journal; not one in a prefix dir
        out.update(f"{rel}/{f}" if rel != "." else f for f in files)
        if not dirs and not files:
            out.add(rel + "/")
    return out


def _expected_files(m: Manifest) -> set[str]:
    tables = {m.tables[p]["name"] for p in ("keys", "samples")}  # beside the manifest, not in prefix directories
    return {"manifest.json"} | tables | {s.name for s in m.shards} | {index_url(s.name) for s in m.shards}


def _stream(url: str, **storage_options) -> list[tuple[str, int, str]]:
    """One shuffled epoch of the loader: (key, label, sha256 of the pixels) in order."""
    loader = shardkit.load(
        url, batch_size=4, size=16, num_workers=0, seed=3, with_keys=True, pin_memory=False,
        storage_options=storage_options,
    )  # fmt: skip
    out = []
    for images, labels, keys in loader:
        for im, lab, k in zip(images, labels.tolist(), keys):
            out.append((k, lab, hashlib.sha256(im.numpy().tobytes()).hexdigest()))
    return out


def test_spread_conversion_is_the_flat_one_renamed(flat_and_spread):
    """Shard ``j`` (planned or overflow) of the spread conversion is the flat shard ``j`` under
    ``spread_name(name, j, 3)``: same bytes, counts and index format; DEST holds exactly the shards, their
    sidecars next to them and the manifest (no work folder left in a prefix directory)."""
    flat, spread = (load_manifest(d) for d in flat_and_spread)
    planned = flat.options["samples_per_shard"]
    assert len(flat.shards) > -(-flat.num_samples // planned)  # the fixture makes overflow shards
    assert [s.name for s in spread.shards] == [spread_name(s.name, j, N) for j, s in enumerate(flat.shards)]
    assert [(s.samples, s.bytes, s.sha256) for s in spread.shards] == [
        (s.samples, s.bytes, s.sha256) for s in flat.shards
    ]
    assert spread.sample_index == flat.sample_index != ""
    assert spread.options.pop("prefixes") == N
    spread.options.pop("fingerprint"), flat.options.pop("fingerprint")
    assert (spread.options, spread.classes, spread.class_counts) == (flat.options, flat.classes, flat.class_counts)
    assert _files(flat_and_spread[1]) == _expected_files(spread)
    assert _files(flat_and_spread[0]) == _expected_files(flat)


def test_loader_and_verify_see_the_flat_dataset(flat_and_spread, tmp_path):
    """The loader's (key, label, pixels) sequence and ``verify``'s full check are those of the flat conversion, and
    verify looks for each shard in its prefix directory."""
    flat, spread = flat_and_spread
    a, b = _stream(flat), _stream(spread)
    assert len(a) == 24 and a == b
    ra, rb = verify(flat), verify(spread)
    assert ra.ok and rb.ok, rb.problems
    assert (ra.shards, ra.samples, ra.bytes) == (rb.shards, rb.samples, rb.bytes)
    copy = shutil.copytree(spread, str(tmp_path / "train"))
    last = load_manifest(copy).shards[-1].name
    os.remove(os.path.join(copy, last))
    assert [(p.shard, p.message) for p in verify(copy, quick=True).problems] == [(last, "shard is missing")]


def test_resume_and_tasks_give_the_single_run(src, flat_and_spread, tmp_path):
    """Task 0 of 2, then a single-task run over the same DEST: task 0's shards are found in their prefix
    directories and kept (one damaged one redone); task 1 of 2 + ``merge`` gives the same bytes too."""
    one = load_manifest(flat_and_spread[1])
    resumed = str(tmp_path / "resumed")
    first = convert(src, resumed, _opts(N), workers=1, quiet=True, num_tasks=2, task_index=0)
    mine = first.splits[0].shards_written
    assert first.splits[0].manifest is None and mine >= 2
    # the unfinished split is one unfinished conversion holding task 0's shards, its prefix dirs no splits of their own
    found = find_splits(os.path.join(resumed, "train"))
    assert not found.manifests and len(found.incomplete) == 1, found
    assert f"{mine} shard(s)" in found.incomplete[0].detail, found.incomplete[0].detail
    with pytest.raises(ManifestError, match="unfinished conversion.*run the same 'shardkit convert'"):
        shardkit.load(os.path.join(resumed, "train"))  # not just "manifest.json: not found"
    with open(os.path.join(resumed, "train", one.shards[2].name), "r+b") as f:  # planned shard 2: task 0's
        f.write(b"x")
    again = convert(src, resumed, _opts(N), workers=1, quiet=True).splits[0]
    assert (again.shards_resumed, again.shards_written) == (mine - 1, len(one.shards) - mine + 1 - _overflow(one))
    tasks = str(tmp_path / "tasks")
    for i in (1, 0):
        convert(src, tasks, _opts(N), workers=1, quiet=True, num_tasks=2, task_index=i)
    (merged,) = merge(tasks)
    for m in (again.manifest, merged):
        assert m is not None and m.to_json() == one.to_json()
    for d in (resumed, tasks):
        assert _files(os.path.join(d, "train")) == _expected_files(one)


def _overflow(m: Manifest) -> int:
    return len(m.shards) - -(-m.num_samples // m.options["samples_per_shard"])


def test_overwrite_with_other_prefixes_leaves_no_stale_shard(src, tmp_path):
    """Another ``--prefixes`` over a DEST is refused in one line naming ``--overwrite``; with it, the old prefix
    directories go (N=3 -> N=5 -> flat): only the new manifest's shards are left for verify or a loader."""
    dest = str(tmp_path / "d")
    convert(src, dest, _opts(3), workers=1, quiet=True)
    with pytest.raises(ConvertError, match=r"--prefixes was 3, now 5.*--overwrite") as e:
        convert(src, dest, _opts(5), workers=1, quiet=True)
    assert "\n" not in str(e.value)
    for n in (5, 1):
        m = convert(src, dest, _opts(n), workers=1, quiet=True, overwrite=True).splits[0].manifest
        assert m is not None and {prefix_of(s.name) for s in m.shards} == ({""} if n == 1 else set(prefix_dirs(n)))
        assert _files(os.path.join(dest, "train")) == _expected_files(m)
        assert verify(dest, quick=True).ok


def test_a_shard_someone_else_put_in_a_prefix_dir_is_refused(src, tmp_path):
    """A fresh DEST holding a file named like a spread shard (not written by shardkit) is refused, naming it."""
    dest = tmp_path / "d"
    name = spread_name("train-000001.tar", 1, N)
    os.makedirs(dest / "train" / prefix_of(name))
    (dest / "train" / name).write_bytes(b"not ours")
    with pytest.raises(ConvertError, match=rf"{name}: a file named like a shard"):
        convert(src, str(dest), _opts(N), workers=1, quiet=True)
    assert (dest / "train" / name).read_bytes() == b"not ours"


def test_a_spread_dest_as_src(flat_and_spread, tmp_path):
    """A spread DEST given as SRC: as a folder it is refused like a flat one (no prefix directory is taken for a
    class); its tars, named from the manifest, keep the manifest's classes and every sample, as the flat tars do."""
    flat, spread = flat_and_spread
    for d in (flat, spread):
        with pytest.raises(ConvertError, match="no images found"):
            convert(os.path.dirname(d), str(tmp_path / "x"), workers=1, quiet=True)
    for d in flat_and_spread:
        m = load_manifest(d)
        pattern = f"{d}/{{{','.join(s.name[:-4] for s in m.shards)}}}.tar"
        out = convert(pattern, str(tmp_path / os.path.basename(os.path.dirname(d))), workers=1, quiet=True)
        r = out.splits[0].manifest
        assert r is not None and (r.classes, r.class_counts, r.num_samples) == (m.classes, m.class_counts, 24)


def test_cli_prefixes_on_a_file_url(src, flat_and_spread, tmp_path, capsys):
    """``shardkit convert --prefixes 3`` to a ``file://`` DEST writes the module fixture's dataset byte for byte."""
    from shardkit.cli import main

    dest = f"file://{tmp_path}/u"
    argv = ["convert", src, dest, "--short-side", "72", "--shard-bytes", "60000", "--no-shuffle", "--prefixes", str(N)]
    assert main([*argv, "--workers", "1", "--quiet"]) == 0
    assert load_manifest(f"{dest}/train").to_json() == load_manifest(flat_and_spread[1]).to_json()
    assert _files(f"{tmp_path}/u/train") == _expected_files(load_manifest(flat_and_spread[1]))
    assert main([*argv[:-1], "0", "--workers", "1", "--quiet"]) != 0
    assert "--prefixes" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_s3_through_moto(src, s3, tmp_path):
    """On moto's S3 (6 images, 3 shards over 2 prefixes): the same manifest and bytes as a local conversion and the
    loader's sequence; ``--overwrite`` to flat removes every spread object (moto answers slowly: kept small)."""
    import s3fs

    opts, bucket = s3
    tiny = str(tmp_path / "src")
    for c in ("a_small", "b_large"):
        os.makedirs(f"{tiny}/{c}")
        for f in sorted(os.listdir(f"{src}/{c}"))[:3]:
            shutil.copy(f"{src}/{c}/{f}", f"{tiny}/{c}/{f}")
    dest, local = f"s3://{bucket}/ds", str(tmp_path / "local")
    cfg = ConvertConfig(image=EncodeConfig(short_side=32), shard_size=2, shuffle=False, prefixes=2)
    want = convert(tiny, local, cfg, workers=1, quiet=True).splits[0].manifest
    got = convert(tiny, dest, cfg, workers=1, quiet=True, storage_options=opts).splits[0].manifest
    assert want is not None and got is not None and got.to_json() == want.to_json()
    fs = s3fs.S3FileSystem(**opts)

    def objects() -> set[str]:
        fs.invalidate_cache()
        return {k[len(f"{bucket}/ds/train/") :] for k in fs.find(f"{bucket}/ds/train") if "/_shardkit/" not in k}

    assert objects() == _expected_files(want) and {prefix_of(s.name) for s in want.shards} == set(prefix_dirs(2))
    assert _stream(f"{dest}/train", **opts) == _stream(f"{local}/train")
    flat = convert(tiny, dest, ConvertConfig(image=cfg.image, shard_size=2, shuffle=False), workers=1, quiet=True,
                   storage_options=opts, overwrite=True).splits[0].manifest  # fmt: skip
    assert flat is not None and objects() == _expected_files(flat)
