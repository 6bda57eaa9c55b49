"""The format of a living split: ``Subset`` against plain Python sets, generations in the manifest (round trip,
checks, version 4 with corrections), ``pin`` against a prefix taken by hand, and ``resolve`` refusing a selection
whose parent changed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.errors import ManifestError
from shardkit.format.generations import CORRECTED_VERSION, Corrections, Generation
from shardkit.format.manifest import Manifest, ShardInfo
from shardkit.format.snapshot.pin import pin
from shardkit.format.snapshot.subset import Subset

SHA = "0" * 64


@st.composite
def masks(draw):
    sizes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=5))
    mask = draw(st.lists(st.booleans(), min_size=sum(sizes), max_size=sum(sizes)))
    return sizes, np.array(mask, bool)


@settings(phases=[Phase.explicit, Phase.generate], max_examples=80, deadline=None)
@given(masks(), masks())
@example(
    ([3, 0, 2], np.array([True, False, True, True, True])), ([3, 0, 2], np.array([False, True, True, True, False]))
)
def test_a_subset_keeps_what_its_mask_keeps(a, b):
    sizes, mask = a
    s = Subset.from_mask(mask, sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    ref = [[p for p in range(n) if mask[offsets[j] + p]] for j, n in enumerate(sizes)]
    assert s.sizes(sizes).tolist() == [len(r) for r in ref]
    for j, r in enumerate(ref):
        assert s.stored(j, np.arange(len(r))).tolist() == r
    assert s.mask(sizes).tolist() == mask.tolist()
    assert s.is_everything == bool(mask.all())
    sizes_b, mask_b = b
    if sizes_b == sizes:
        both = s.restrict(Subset.from_mask(mask_b, sizes))
        assert both.mask(sizes).tolist() == (mask & mask_b).tolist()


def test_relabels_and_fingerprints():
    s = Subset((None, np.array([0, 2])), ({1: 4}, {}))
    assert s.label(0, 1, 0) == 4 and s.label(0, 0, 3) == 3 and s.label(1, 2, 7) == 7
    assert not s.is_everything
    other = Subset((None, np.array([0, 2])), ({1: 5}, {}))
    fewer = Subset((None, np.array([0])), ({1: 4}, {}))
    assert len({s.fingerprint(), other.fingerprint(), fewer.fingerprint()}) == 3
    assert Subset((None, np.array([0, 2])), ({1: 4}, {})).fingerprint() == s.fingerprint()
    with pytest.raises(ValueError, match="strictly increasing"):
        Subset((np.array([2, 1]),), ({},))


def _manifest(sizes, gens=None, classes=("a", "b", "c")):
    shards = [ShardInfo(f"s-{i:06d}.tar", n, 100 * (n + 1), SHA) for i, n in enumerate(sizes)]
    return Manifest(split="train", classes=list(classes), shards=shards, generations=list(gens or []))


def _gens():
    return [
        Generation(0, shards=2, samples=5, classes=2, class_counts=[3, 2]),
        Generation(1, shards=1, samples=4, classes=3, class_counts=[1, 1, 2], duplicates=2),
    ]


def test_generations_round_trip_and_pin_takes_a_prefix():
    m = _manifest([2, 3, 4], _gens())
    back = Manifest.from_json(m.to_json(), url="/x/train/manifest.json")
    assert back.generations == m.generations and back.version == 3
    p = pin(back, 0)
    assert [s.name for s in p.shards] == ["s-000000.tar", "s-000001.tar"]
    assert p.classes == ["a", "b"] and p.class_counts == [3, 2] and len(p.generations) == 1
    assert pin(back, 1) is back and pin(back, None) is back
    with pytest.raises(ManifestError, match="no generation 2"):
        pin(back, 2)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda g: g.__setitem__(1, Generation(2, 1, 4, 3)), "numbered"),
        (lambda g: g.__setitem__(1, Generation(1, 2, 4, 3)), "shards"),
        (lambda g: g.__setitem__(1, Generation(1, 1, 5, 3)), "samples"),
        (lambda g: g.__setitem__(1, Generation(1, 1, 4, 1)), "fewer classes"),
        (lambda g: g.__setitem__(1, Generation(1, 1, 4, 3, class_counts=[1])), "class_counts"),
    ],
)
def test_generations_that_do_not_describe_the_shards_are_refused(edit, words):
    gens = _gens()
    edit(gens)
    with pytest.raises(ManifestError, match=words):
        _manifest([2, 3, 4], gens).validate()


def test_corrections_make_version_4_and_a_version_3_file_with_them_is_refused():
    gens = _gens()
    gens[1] = Generation(1, 1, 4, 3, corrections=Corrections("train-g000001.corrections.json", 10, SHA, removed=1))
    m = _manifest([2, 3, 4], gens)
    d = json.loads(m.to_json())
    assert d["version"] == CORRECTED_VERSION
    assert Manifest.from_json(m.to_json()).version == CORRECTED_VERSION
    d["version"] = 3
    with pytest.raises(ManifestError, match="with corrections"):
        Manifest.from_json(json.dumps(d))
    plain = json.loads(_manifest([2, 3, 4], _gens()).to_json())
    plain["version"] = 4
    with pytest.raises(ManifestError, match="without corrections"):
        Manifest.from_json(json.dumps(plain))
    assert pin(Manifest.from_json(m.to_json()), 0).version == 3  # generation 0 has no corrections


def test_a_selection_whose_parent_was_reconverted_is_refused(tmp_path):
    from shardkit.format.snapshot import resolve
    from shardkit.format.snapshot.selection import write_selection
    from tests.support.data import write_dataset

    split = write_dataset(str(tmp_path / "ds"), num_samples=12, shard_size=5).url
    snap = resolve(split)
    mask = np.arange(snap.num_samples) % 2 == 0
    write_selection(split, mask, str(tmp_path / "sel"))
    sel = resolve(str(tmp_path / "sel"))
    assert sel.num_samples == int(mask.sum()) and sel.subset.mask(sel.manifest.shard_sizes).tolist() == mask.tolist()
    mpath = sel.manifest.url
    d = json.loads(open(mpath).read())
    d["shards"][0]["sha256"] = "f" * 64
    open(mpath, "w").write(json.dumps(d))
    with pytest.raises(ManifestError, match="changed since the selection was taken"):
        resolve(str(tmp_path / "sel"))
