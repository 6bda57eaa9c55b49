"""Old import path of the shard writer and member constants: moved to :mod:`shardkit.format` (kept until callers move)."""

from .format.members import IMAGE_EXT, KEY_PATTERN, LABEL_EXT, META_EXT, SAMPLE_EXTS
from .format.writer import EncodedSample, WrittenShard, meta_bytes, write_shard, write_tar
from .storage import sha256_file

__all__ = ["EncodedSample", "IMAGE_EXT", "KEY_PATTERN", "LABEL_EXT", "META_EXT", "SAMPLE_EXTS", "WrittenShard", "meta_bytes",
           "sha256_file", "write_shard", "write_tar"]
