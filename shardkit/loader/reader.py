"""Old import path of the tar header walk: moved to :mod:`shardkit.format.tar` (kept until callers move)."""

from ..format.sample import RawSample
from ..format.tar import MAX_HEADER_BYTES, MAX_MEMBER_BYTES, ShardReader, TarDamage

__all__ = ["MAX_HEADER_BYTES", "MAX_MEMBER_BYTES", "RawSample", "ShardReader", "TarDamage"]
