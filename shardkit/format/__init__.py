"""The shard format: which members form a sample, reading and writing shards, the sample index.

* :mod:`~shardkit.format.members`: the one member rule and the label/metadata rules;
* :mod:`~shardkit.format.fields`: the stored fields (label, labels, target, text) and their rule;
* :mod:`~shardkit.format.sample`: :class:`RawSample`, a sample as read;
* :mod:`~shardkit.format.tar`: the hardened tar header walk (:class:`ShardReader`);
* :mod:`~shardkit.format.index`: the per-shard sample index (one range read per block);
* :mod:`~shardkit.format.writer`: the deterministic writer (tar + index);
* :mod:`~shardkit.format.splits`: which splits a dataset URL holds, finished or interrupted.

The manifest that lists a split's shards is :mod:`shardkit.format.manifest`.
"""

from shardkit.format.index import INDEX_FORMAT, IndexDamage, IndexMismatch, SampleIndex, index_url
from shardkit.format.indexio import load_index
from shardkit.format.members import IMAGE_EXT, KEY_PATTERN, LABEL_EXT, META_EXT, SAMPLE_EXTS, UnsafeName, split_member
from shardkit.format.sample import RawSample, SampleRule
from shardkit.format.tar import ShardReader, TarDamage
from shardkit.format.writer import EncodedSample, WrittenShard, meta_bytes, write_shard, write_tar
from shardkit.storage.fs import sha256_file

__all__ = [
    "EncodedSample",
    "IMAGE_EXT",
    "INDEX_FORMAT",
    "IndexDamage",
    "IndexMismatch",
    "KEY_PATTERN",
    "LABEL_EXT",
    "META_EXT",
    "RawSample",
    "SAMPLE_EXTS",
    "SampleIndex",
    "SampleRule",
    "ShardReader",
    "TarDamage",
    "UnsafeName",
    "WrittenShard",
    "index_url",
    "load_index",
    "meta_bytes",
    "sha256_file",
    "split_member",
    "write_shard",
    "write_tar",
]
