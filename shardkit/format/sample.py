"""One sample as read from a shard (:class:`RawSample`), filled the same way by the header walk and the index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from shardkit.format.fields import (
    DEFAULT_FIELDS,
    INSTANCES_EXT,
    LABELS_EXT,
    MASK_EXT,
    MAX_TEXT_BYTES,
    OBJECTS_EXT,
    TARGET_EXT,
    TEXT_EXT,
    Objects,
    parse_labels,
    parse_target,
    parse_text,
)
from shardkit.format.members import IMAGE_EXT, LABEL_EXT, MAX_JSON_BYTES, META_EXT, label_error, parse_label, parse_meta
from shardkit.format.objects import parse_objects

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
            until the dataset's :class:`SampleRule` parses the declared ones.
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


@dataclass(frozen=True)
class SampleRule:
    """What makes a sample of one dataset usable: its stored fields, and their class and target counts.

    Attributes:
        fields: the dataset's stored fields (``"image"`` and any of ``label``, ``labels``, ``target``, ``text``).
        num_classes: ``C``: class indices lie in ``[0, C)`` (``None``: any int64 >= 0).
        num_targets: ``D``, the values per ``target`` (``None``: any count).
    """

    fields: tuple[str, ...] = DEFAULT_FIELDS
    num_classes: Optional[int] = None
    num_targets: Optional[int] = None
    num_keypoints: int = 0

    @classmethod
    def of(cls, manifest: object) -> "SampleRule":
        """The rule of a :class:`~shardkit.format.Manifest` (its ``fields``, ``classes``, ``targets`` and
        ``keypoint_names``)."""
        classes, targets = getattr(manifest, "classes", []), getattr(manifest, "targets", [])
        return cls(
            tuple(getattr(manifest, "fields", DEFAULT_FIELDS)),
            len(classes) or None,
            len(targets) or None,
            len(getattr(manifest, "keypoint_names", [])),
        )

    def check(self, sample: RawSample) -> None:
        """Set ``sample.error`` if it breaks the rule, else fill its declared fields' values.

        The image and (where declared) the label follow the one label rule
        (:func:`~shardkit.format.members.label_error`); ``labels``, ``target`` and ``text`` are parsed
        from the members :func:`~shardkit.format.sample.store_field` kept.
        """
        if sample.error:
            return
        extra = sample.unparsed or {}
        if "label" in self.fields:
            if sample.label is None and LABEL_EXT in extra:
                sample.error = f"unreadable label {extra[LABEL_EXT][:20]!r}"
            else:
                sample.error = label_error(sample.jpeg, sample.label, self.num_classes)
        elif sample.jpeg is None:
            sample.error = f"missing field '{IMAGE_EXT}'"
        if sample.error:
            return
        try:
            if "labels" in self.fields:
                sample.labels = parse_labels(_member(extra, LABELS_EXT), self.num_classes)
            if "target" in self.fields:
                sample.target = parse_target(_member(extra, TARGET_EXT), self.num_targets)
            if "text" in self.fields:
                sample.text = parse_text(_member(extra, TEXT_EXT))
            if "boxes" in self.fields:
                sample.objects = parse_objects(_member(extra, OBJECTS_EXT), self.num_classes, self.num_keypoints)
            if "mask" in self.fields:
                sample.mask = _member(extra, MASK_EXT)  # decoded with the image (a bad PNG fails its decode)
            if "instances" in self.fields:
                sample.instances = _member(extra, INSTANCES_EXT)  # likewise
        except ValueError as exc:
            sample.error = str(exc)
        except OverflowError:
            sample.error = "target has a value beyond float range"


def _member(extra: dict[str, bytes], ext: str) -> bytes:
    if ext not in extra:
        raise ValueError(f"missing field '{ext}'")
    return extra[ext]


def check_sample(sample: RawSample, rule: "SampleRule | int | None") -> None:
    """Set ``sample.error`` when it breaks the dataset's rule (image, label and the declared fields).

    ``rule`` an int or ``None``: a single-label dataset of that many classes (any, for ``None``).
    """
    if not isinstance(rule, SampleRule):
        rule = SampleRule(num_classes=rule)
    rule.check(sample)
