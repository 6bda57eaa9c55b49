"""The key table against a plain dict over generated keys and shard layouts; ``shardkit index`` builds the tables a
conversion writes (less the source hash)."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.format.tables import KeyTable, TableError

KEY = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=12)


@settings(phases=[Phase.explicit, Phase.generate], max_examples=60, deadline=None)
@given(st.lists(st.lists(KEY, max_size=6), min_size=1, max_size=5), st.lists(KEY, max_size=5))
@example([["b", "a"], [], ["ab", "a\u00e9"]], ["a ", "", "abc"])
def test_the_key_table_finds_what_a_dict_finds(shards, probes):
    flat = [k for ks in shards for k in ks]
    if len(set(flat)) != len(flat):
        with pytest.raises(TableError, match="appears twice"):
            KeyTable.build(shards)
        return
    ref = {k: (j, p) for j, ks in enumerate(shards) for p, k in enumerate(ks)}
    t = KeyTable.from_bytes(KeyTable.build(shards).to_bytes())
    t.check([len(ks) for ks in shards], "t")
    offsets = np.concatenate([[0], np.cumsum([len(ks) for ks in shards])]).astype(np.int64)
    assert t.in_order(offsets) == flat
    for k in flat + probes:
        assert t.find(k) == ref.get(k), k


def test_index_builds_the_tables_a_conversion_writes(tmp_path):
    from shardkit.convert import convert
    from shardkit.ops.upgrade import add_checksums
    from tests.support.data import jpeg_bytes

    src = tmp_path / "src"
    for i in range(11):
        d = src / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i}.jpg").write_bytes(jpeg_bytes(i % 3, i))
    from shardkit.convert import ConvertConfig

    convert(str(src), str(tmp_path / "ds"), ConvertConfig(shard_size=4), workers=1, quiet=True)
    split = tmp_path / "ds" / "train"
    m = json.loads((split / "manifest.json").read_text())
    keys, samples = ((split / m["tables"][p]["name"]).read_bytes() for p in ("keys", "samples"))
    for p in ("keys", "samples"):
        os.remove(split / m["tables"][p]["name"])
    del m["tables"]
    (split / "manifest.json").write_text(json.dumps(m, indent=1) + "\n")
    (s,) = add_checksums(str(split)).splits
    assert s.tables_written and s.written == 0
    m2 = json.loads((split / "manifest.json").read_text())
    assert (split / m2["tables"]["keys"]["name"]).read_bytes() == keys
    rows = [json.loads(x) for x in gzip.decompress(samples).splitlines()]
    rows2 = [
        json.loads(x) for x in gzip.decompress((split / m2["tables"]["samples"]["name"]).read_bytes()).splitlines()
    ]
    assert rows[0]["source_hash"] == "sha256" and rows2[0]["source_hash"] == ""
    assert [{**r, "source_sha256": ""} for r in rows[1:]] == rows2[1:]
    assert {r["class"] for r in rows[1:]} == {"c0", "c1", "c2"} and all(r["path"].endswith(".jpg") for r in rows[1:])
