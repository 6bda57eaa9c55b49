"""One sample as read from a shard (:class:`RawSample`), filled the same way by the header walk and the index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from shardkit.format.fields import (
    INSTANCES_EXT,
    LABELS_EXT,
    MASK_EXT,
    MAX_TEXT_BYTES,
    OBJECTS_EXT,
    TARGET_EXT,
    TEXT_EXT,
    Objects,
    SampleRule,
)
from shardkit.format.members import IMAGE_EXT, LABEL_EXT, MAX_JSON_BYTES, META_EXT, parse_label, parse_meta

#: members kept as bytes until the dataset's :class:`SampleRule` parses the ones it declares
EXTRA_EXTS = frozenset((LABELS_EXT, TARGET_EXT, TEXT_EXT, OBJECTS_EXT, MASK_EXT, INSTANCES_EXT))
#: the fields a reader loads; every other member is skipped unread (and never unpickled)
LOADED_EXTS = frozenset((IMAGE_EXT, LABEL_EXT, META_EXT)) | EXTRA_EXTS
#: largest member the reader loads into memory (a bigger one makes its sample unusable)
MAX_MEMBER_BYTES = 1 << 28
#: largest label member (an int64 in decimal, with room for whitespace)
MAX_LABEL_BYTES = 64
#: largest member of each loaded field (readers compare inline, then ask :func:`size_error` for the message)
FIELD_LIMITS = {
    IMAGE_EXT: MAX_MEMBER_BYTES,
    LABEL_EXT: MAX_LABEL_BYTES,
    META_EXT: MAX_JSON_BYTES,
    LABELS_EXT: MAX_JSON_BYTES,
    TARGET_EXT: MAX_JSON_BYTES,
    TEXT_EXT: MAX_TEXT_BYTES,
    OBJECTS_EXT: MAX_JSON_BYTES,
    MASK_EXT: MAX_MEMBER_BYTES,
    INSTANCES_EXT: MAX_MEMBER_BYTES,
}


def size_error(key: str, ext: str, size: int) -> Optional[str]:
    """Why member ``key.ext`` of ``size`` bytes is not even read (too large for its field), or ``None``.

    The walk asks before reading a member and the index before handing one out, so both refuse the same
    members with the same message, and neither reads a 256 MiB ``.cls`` or ``.json`` only to refuse it.
    """
    limit = FIELD_LIMITS.get(ext, MAX_MEMBER_BYTES)
    if size <= limit:
        return None
    if ext == META_EXT:
        return f"bad .{META_EXT} member: metadata of {size} bytes (limit {limit})"
    return f"member {key}.{ext} has {size} bytes (limit {limit})"


@dataclass
class RawSample:
    """One sample as stored: JPEG bytes, label, metadata and the other fields, plus where it came from.

    Attributes:
        key: sample key (``__key__`` in webdataset terms).
        gid: global sample id (``shard_offsets[shard] + index``).
        shard: URL of its shard.
        index: position in its shard.
        jpeg: the image bytes (``None`` if missing).
        label: class index (``None`` if missing or unreadable).
        meta_bytes: the raw ``.json`` member (``b""`` if missing).
        error: why this sample cannot be used, or ``None``.
        labels: sorted class indices (``labels`` datasets; ``None`` otherwise).
        target: the target values (``target`` datasets).
        text: the text (``text`` datasets).
        objects: the boxes, their classes and keypoints (``boxes`` datasets).
        mask: the ``.mask.png`` bytes (``mask`` datasets; decoded with the image).
        instances: the ``.instances.png`` bytes (``instances`` datasets; decoded with the image).
        unparsed: the raw ``labels``/``target``/``text`` members (and an unreadable ``.cls``) by extension,
            until the dataset's :class:`~shardkit.format.fields.SampleRule` parses the declared ones.
    """

    key: str
    gid: int
    shard: str
    index: int
    jpeg: Optional[bytes] = None
    label: Optional[int] = None
    meta_bytes: bytes = b""
    error: Optional[str] = None
    labels: Optional[tuple[int, ...]] = None
    target: Optional[tuple[float, ...]] = None
    text: Optional[str] = None
    objects: Optional[Objects] = None
    mask: Optional[bytes] = None
    instances: Optional[bytes] = None
    unparsed: Optional[dict[str, bytes]] = None

    @property
    def meta(self) -> dict[str, Any]:
        """The sample's metadata (parsed JSON; ``{}`` if missing or invalid)."""
        try:
            return parse_meta(self.meta_bytes) if self.meta_bytes else {}
        except ValueError:
            return {}


def store_field(sample: RawSample, ext: str, data: bytes) -> None:
    """Put member ``ext`` of ``sample`` in place (only :data:`LOADED_EXTS` are ever passed)."""
    if ext == IMAGE_EXT:
        sample.jpeg = data
    elif ext == LABEL_EXT:
        try:
            sample.label = parse_label(data)
        except ValueError:  # an error only where the dataset declares 'label' (SampleRule.check)
            sample.unparsed = {**(sample.unparsed or {}), LABEL_EXT: data}
    elif ext in EXTRA_EXTS:
        sample.unparsed = {**(sample.unparsed or {}), ext: data}
    elif ext == META_EXT:
        sample.meta_bytes = data
        try:
            parse_meta(data)
        except ValueError as exc:
            sample.error = sample.error or f"bad .{META_EXT} member: {exc}"


def check_sample(sample: RawSample, rule: "SampleRule | int | None") -> None:
    """Set ``sample.error`` when it breaks the dataset's rule (image, label and the declared fields).

    ``rule`` an int or ``None``: a single-label dataset of that many classes (any, for ``None``).
    """
    if not isinstance(rule, SampleRule):
        rule = SampleRule(num_classes=rule)
    rule.check(sample)
