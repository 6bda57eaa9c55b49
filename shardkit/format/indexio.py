"""Sample indexes to and from shards and sidecars: building one from the layouts the writer records as it writes
(:func:`build_index`) or by walking the headers of an existing shard and reading its samples' bytes again for
their checksums (:func:`index_from_walk`: ``verify`` compares it with the sidecar, ``shardkit index`` writes it for
older shards), and loading a sidecar (:func:`load_index`, reading only the size its header announces). The format
and its checks are :mod:`shardkit.format.index`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO, Any, Optional

import numpy as np

from shardkit.format.checksum import crc32c
from shardkit.format.index import HEAD, MAX_INDEX_BYTES, IndexDamage, SampleIndex, index_url, layout_error, needed
from shardkit.format.tar import BLOCK, NAME_FIELD, SampleSpan, ShardReader

_U32 = (1 << 32) - 1


def build_index(
    layouts: Sequence[SampleSpan],
    keys: Sequence[str],
    shard_bytes: int,
    shard_sha256: str,
    crcs: Optional[Sequence[int]] = None,
) -> Optional[SampleIndex]:
    """The index of a shard from its samples' layouts, or ``None`` if the shard cannot be indexed.

    ``crcs``: the CRC32C of each sample's bytes (:mod:`shardkit.format.checksum`); None: an index
    without checksums (format ``sidecar-1``).

    Indexable: every sample has the same fields in the same order, each member's data follows
    its one 512-byte header (no pax or long-name headers) right after the previous member,
    samples are contiguous from byte 0, names fit a header's name field, and no member is
    larger than the walk loads.
    """
    if not layouts:
        return None
    exts = tuple(m.ext for m in layouts[0].members)
    n, k = len(layouts), len(exts)
    starts = np.empty(n + 1, np.uint64)
    offsets = np.empty((n, k), np.int64)
    sizes = np.empty((n, k), np.int64)
    for i, lay in enumerate(layouts):
        if tuple(m.ext for m in lay.members) != exts or (i and lay.start != starts[i]):
            return None
        if any(m.data_offset != m.start + BLOCK or m.unsafe for m in lay.members):
            return None
        starts[i], starts[i + 1] = lay.start, lay.end
        offsets[i] = [m.data_offset - lay.start for m in lay.members]
        sizes[i] = [m.size for m in lay.members]
    if (
        offsets.max() > _U32
        or sizes.max() > _U32
        or len(set(keys)) != n
        or layout_error(starts, offsets, sizes, shard_bytes)
    ):
        return None
    if max(len(x.encode("utf-8")) for x in keys) + 1 + max(len(e.encode("utf-8")) for e in exts) >= NAME_FIELD:
        return None
    if crcs is not None and len(crcs) != n:
        raise ValueError(f"{n} samples but {len(crcs)} checksums")
    return SampleIndex(
        tuple(keys),
        exts,
        starts,
        offsets.astype(np.uint32),
        sizes.astype(np.uint32),
        shard_bytes,
        shard_sha256,
        None if crcs is None else np.asarray(crcs, dtype=np.uint32),
    )


def index_from_walk(f: IO[bytes], url: str, shard_bytes: int, shard_sha256: str) -> Optional[SampleIndex]:
    """Walk the headers of the shard open as ``f`` (seekable) and build its index with checksums
    (``None``: not indexable): the CRC32C of each sample is computed from its bytes, read again.

    ``verify`` compares this with the sidecar; ``shardkit index`` writes it for shards written
    before the index or before its checksums.
    """
    r = ShardReader(f, url)
    layouts, keys = [], []
    while (s := r.read(r.index)) is not None:
        assert r.layout is not None
        layouts.append(r.layout)
        keys.append(s.key)
    crcs = []
    for lay in layouts:
        f.seek(lay.start)
        crcs.append(crc32c(f.read(lay.end - lay.start)))
    return build_index(layouts, keys, shard_bytes, shard_sha256, crcs)


def load_index(
    shard_url: str,
    *,
    shard_bytes: int,
    shard_sha256: str,
    open_fn: Optional[Callable[[str], IO[bytes]]] = None,
    **storage_options: Any,
) -> SampleIndex:
    """Load and check the sidecar index of ``shard_url`` (local path or any fsspec URL).

    Args:
        shard_url: the shard (its sidecar is :func:`index_url`).
        shard_bytes, shard_sha256: the shard's size and sha256 from the manifest.
        open_fn: opens a URL for reading (the loader's opener); default :func:`shardkit.storage.fs.open_read`.
        storage_options: fsspec options for the default opener.

    Raises:
        IndexDamage: missing, unreadable, corrupt or for another shard (read the shard with the walk).
    """
    from shardkit.errors import ShardkitError
    from shardkit.storage import fs as storage

    url = index_url(shard_url)
    try:
        with open_fn(url) if open_fn is not None else storage.open_read(url, **storage_options) as f:
            head = f.read(HEAD.size)
            need = _announced(head, url, shard_bytes)  # read what the header announces (bounded), not a fixed maximum
            data = head + f.read(need - len(head) + 1)
    except (ShardkitError, OSError) as exc:
        raise IndexDamage(f"{url}: cannot read the sample index ({exc})") from None
    return SampleIndex.from_bytes(data, url, shard_bytes=shard_bytes, shard_sha256=shard_sha256)


def _announced(head: bytes, url: str, shard_bytes: Optional[int]) -> int:
    """The sidecar size its header announces; :class:`IndexDamage` unless it is plausible for a shard of ``shard_bytes``.

    Each indexed member takes at least one 512-byte header in the shard, and each member name fits a
    header's name field: a header announcing more is refused before anything that size is read.
    """
    if len(head) < HEAD.size:
        raise IndexDamage(f"{url}: not a sample index or damaged (only {len(head)} bytes)")
    magic, n, k, _, _, le, lk = HEAD.unpack_from(head)
    need = needed(magic, n, k, le, lk)
    limit = MAX_INDEX_BYTES if shard_bytes is None else min(MAX_INDEX_BYTES, shard_bytes)
    if (
        need > limit
        or (shard_bytes is not None and n * k * BLOCK > shard_bytes)
        or le >= k * NAME_FIELD
        or lk >= (n + 1) * NAME_FIELD
    ):
        raise IndexDamage(
            f"{url}: its header announces {n} samples of {k} fields ({need} bytes), impossible for a shard of "
            f"{shard_bytes} bytes"
        )
    return need
