"""Shard reads as requests: a raw file that records each read as one ``[lo, hi)`` request, and shards of
identical samples whose layout is known."""

from __future__ import annotations

import io
import tarfile

from shardkit.format.writer import EncodedSample, write_shard
from shardkit.loader.read import ranges


class RecordingRaw(io.RawIOBase):
    """A raw file whose every read is one request ``[lo, hi)`` (as ``RetryingFile`` over s3fs sends it)."""

    def __init__(self, data: bytes):
        self.data, self.pos, self.gets = data, 0, []

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = offset if whence == io.SEEK_SET else self.pos + offset if whence == io.SEEK_CUR else len(self.data)
        return self.pos

    def tell(self):
        return self.pos

    def readinto(self, b):
        if self.pos >= len(self.data):
            return 0
        chunk = self.data[self.pos : self.pos + len(b)]
        self.gets.append((self.pos, self.pos + len(chunk)))
        b[: len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)


def uniform_shard(n: int, jpeg_bytes: int) -> tuple[bytes, ranges.SampleLayout]:
    """A tar of ``n`` samples that all have the same member sizes, and their layout."""
    samples = [EncodedSample(f"k{i:06d}", b"\xff" * jpeg_bytes, 0, {"i": f"{i:06d}"}) for i in range(n)]
    f = io.BytesIO()
    write_shard(samples, f)
    data = f.getvalue()
    members = tarfile.open(fileobj=io.BytesIO(data)).getmembers()
    per = [m for m in members if m.name.startswith("k000000.")]
    size = per[-1].offset_data + -(-per[-1].size // 512) * 512
    for i in range(n):  # every sample alike
        assert [m.offset for m in members[i * len(per) : (i + 1) * len(per)]] == [i * size + m.offset for m in per]
    return data, ranges.SampleLayout(size, tuple((m.offset, m.size, True) for m in per))
