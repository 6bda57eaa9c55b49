"""The one rule for which tar members form a sample, and what a usable sample holds.

Every reader and writer of shards uses these functions: the loader's header walk
(:mod:`shardkit.format.tar`), the sample index (:mod:`shardkit.format.index`),
``shardkit verify`` and ``info`` (:mod:`shardkit.ops.verify`) and the writer
(:mod:`shardkit.format.writer`). Two rules would disagree exactly on the damaged
shards where agreement matters.

The rule (webdataset's): a regular-file member ``dir/stem.ext1.ext2`` belongs to
the sample with key ``dir/stem`` (the name up to the first dot of its base name)
as field ``ext1.ext2``. Members whose base name has no dot, an empty stem or
starts with ``__`` (webdataset's reserved ``__key__``-like names) belong to no
sample and are ignored. A name that is absolute, has a ``..`` component or is
longer than :data:`MAX_NAME` is damage (:class:`UnsafeName`): the sample it
would belong to is unusable. Consecutive members with the same key form one
sample; a field that repeats starts a new sample; a key seen before in the same
shard (adjacent or not) is damage: its later samples are unusable.

:func:`split_member` is the per-name half of the rule, :func:`group_members` the
whole rule over a tar's member names (the converter's scan of existing tars uses
it); the loader's header walk (:class:`shardkit.format.tar.ShardReader`) applies
the same grouping one member at a time, as it reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

IMAGE_EXT = "jpg"
LABEL_EXT = "cls"
META_EXT = "json"
#: the member extensions a shardkit sample holds; readers ignore every other member
SAMPLE_EXTS = (LABEL_EXT, IMAGE_EXT, META_EXT)
#: keys the writer accepts: unique within a split, no dots, no slashes, not starting with ``__`` (reserved, see above)
KEY_PATTERN = re.compile(r"^(?!__)[A-Za-z0-9_-]{1,80}\Z")  # \Z: "$" would accept a trailing newline
#: longest member name accepted
MAX_NAME = 4096
#: largest ``.json`` member parsed, and its deepest nesting
MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 64
#: images declaring more pixels (width x height) are refused from their header, before any decode:
#: skipped as ``too_many_pixels`` by ``shardkit convert``, skipped (counted) by the loader, reported by
#: ``verify``: one default, so what converts also loads
MAX_PIXELS = 100_000_000
_INT64_MAX = (1 << 63) - 1
_decode = json.JSONDecoder().decode


class UnsafeName(ValueError):
    """A member name that no sample may have (absolute, ``..``, too long).

    ``key`` and ``ext`` are what the name would group as, so the damaged sample keeps its members together.
    """

    def __init__(self, message: str, key: str, ext: str):
        super().__init__(message)
        self.key, self.ext = key, ext


def split_member(name: str) -> Optional[tuple[str, str]]:
    """``(key, extension)`` of a regular-file member name, or ``None`` if it belongs to no sample.

    Raises:
        UnsafeName: the name is absolute, has a ``..`` component or is too long (damage).
    """
    d, slash, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if len(name) > MAX_NAME:
        raise UnsafeName(f"member name of {len(name)} characters (limit {MAX_NAME})", name[:200], ext[:20])
    if name[:1] == "/" or ".." in name and ".." in name.split("/"):
        raise UnsafeName(f"unsafe member name {name[:200]!r} (absolute or '..')", d + slash + stem, ext)
    if not dot or not stem or base.startswith("__"):
        return None
    return d + slash + stem, ext


@dataclass
class MemberGroup:
    """One sample by the member rule: its key, ``{field: member index}``, and why it is unusable.

    ``again`` is 0 for the key's first sample in the tar and ``n`` for its ``n``-th repeat (damage).
    """

    key: str
    fields: dict[str, int] = field(default_factory=dict)
    again: int = 0  # 0: the key's first sample in the tar; n: its n-th repeat
    unsafe: Optional[str] = None


def group_members(names: Sequence[str], *, fold_case: bool = False) -> tuple[list[MemberGroup], int]:
    """The samples that tar members named ``names`` (in tar order) form, and how many belong to no sample.

    The member rule (module docstring): :func:`split_member` per name; consecutive members with the same
    key form one sample, a repeated field starts a new one. ``fold_case``: fields are compared (and kept)
    lower-case, as webdataset's reader does (``lcase``), for tars that shardkit did not write.
    """
    groups: list[MemberGroup] = []
    seen: dict[str, int] = {}
    ignored = 0
    for i, name in enumerate(names):
        unsafe = None
        try:
            ke = split_member(name)
        except UnsafeName as exc:
            ke, unsafe = (exc.key, exc.ext), str(exc)
        if ke is None:
            ignored += 1
            continue
        key, ext = ke[0], ke[1].lower() if fold_case else ke[1]
        if not groups or groups[-1].key != key or ext in groups[-1].fields:  # a repeated field starts a new sample
            groups.append(MemberGroup(key, again=seen.get(key, -1) + 1))
            seen[key] = groups[-1].again
        groups[-1].fields[ext] = i
        groups[-1].unsafe = groups[-1].unsafe or unsafe
    return groups, ignored


def duplicate_key_error(key: str) -> str:
    """The message for a sample whose key appeared before in the same shard (loader and verify say the same)."""
    return f"key {key!r} appears more than once in the shard (damaged or tampered)"


def label_error(jpeg: Optional[bytes], label: Optional[int], num_classes: Optional[int]) -> Optional[str]:
    """Why a sample with this image and label is unusable, or ``None``: the one label rule.

    ``num_classes`` bounds the label to ``[0, num_classes)``; ``None`` accepts any int64 >= 0.
    """
    if jpeg is None:
        return f"missing field '{IMAGE_EXT}'"
    if label is None:
        return f"missing field '{LABEL_EXT}'"
    if not 0 <= label <= _INT64_MAX or (num_classes is not None and label >= num_classes):
        limit = f"[0, {num_classes})" if num_classes is not None else "[0, 2**63)"
        return f"label {label} outside {limit}"
    return None


def parse_label(data: bytes) -> int:
    """The label of a ``.cls`` member (ASCII decimal); ``ValueError`` if it is not one."""
    return int(data.strip())


def parse_meta(data: bytes) -> dict:
    """A ``.json`` member as a dict, parsed with bounded size and depth.

    Raises:
        ValueError: too large, nested too deep, not JSON or not an object.
    """
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"metadata of {len(data)} bytes (limit {MAX_JSON_BYTES})")
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH and _depth(data) > MAX_JSON_DEPTH:
        raise ValueError(f"metadata nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        d = _decode(data.decode("utf-8"))  # UnicodeDecodeError is a ValueError
    except (ValueError, RecursionError) as exc:  # RecursionError: cannot happen after the depth check
        raise ValueError(f"metadata is not JSON ({str(exc)[:80]})") from None
    if not isinstance(d, dict):
        raise ValueError(f"metadata is a JSON {type(d).__name__}, not an object")
    return d


def _depth(data: bytes) -> int:
    """Deepest bracket nesting outside JSON strings, in linear time (vectorised: no per-byte Python, no regex)."""
    import numpy as np

    a = np.frombuffer(data, np.uint8)
    pos = np.arange(len(a))
    # a quote is escaped when an odd run of backslashes precedes it
    last_plain = np.maximum.accumulate(np.where(a != 92, pos, -1))
    run = np.empty(len(a), np.int64)
    run[0:1] = 0
    run[1:] = pos[:-1] - last_plain[:-1]  # backslashes just before each position
    quote = (a == 34) & (run % 2 == 0)
    outside = np.cumsum(quote) % 2 == 0  # not inside a string (a closing quote counts as outside)
    step = (((a == 91) | (a == 123)).astype(np.int32) - ((a == 93) | (a == 125))) * outside
    return int(np.cumsum(step).max(initial=0))
