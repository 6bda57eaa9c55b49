"""The resume journal kept next to the shards, in ``<split dir>/_shardkit/``.

* ``plan.json``: the split's plan (options, classes, input fingerprint,
  samples per planned shard, files skipped at discovery). Every task writes
  the same bytes, so concurrent tasks may race on it harmlessly.
* ``<split>-NNNNNN.json``: one record per finished planned shard, written after
  the shard itself is in place: its :class:`~shardkit.format.manifest.ShardInfo`
  (named as the manifest will name it, in its prefix directory with ``--prefixes``: :func:`shard_path`),
  its overflow (samples beyond the byte cap, kept in
  ``<split>-NNNNNN.overflow``, a tar), class counts and skipped files.

An append (``--append``) names its shards, records, overflows and rows with its generation's stem
(:func:`generation_stem`, ``train-g000001``) instead of the split's name, and its plan replaces ``plan.json``
(the earlier generation's plan is of no use once its manifest exists).

A planned shard is finished when its record exists and the files it names
have the recorded size and sha256. Merging reads only the journal, never SRC.
The folder is small and may be deleted once ``manifest.json`` exists (a later
rerun then re-encodes everything, with identical output).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from shardkit.errors import ConvertError, ShardkitError
from shardkit.format.fields import DEFAULT_FIELDS
from shardkit.format.manifest import ShardInfo, SkippedFile
from shardkit.format.prefixes import spread_name
from shardkit.storage import fs as storage

JOURNAL_DIR = storage.WORK_DIR
PLAN_NAME = "plan.json"
PLAN_FORMAT = "shardkit-convert-plan"
PLAN_VERSION = 1
#: :attr:`Plan.overlap` of a split whose mask is painted from segmentations: the smaller object on top
#: (:func:`shardkit.convert.segments.semantic_mask`), as in its instance map
OVERLAP_RULE = "smaller-on-top"


def generation_stem(split: str, generation: int) -> str:
    """The name stem of ``split``'s ``generation``'s shards and journal files (see :attr:`Plan.stem`)."""
    return f"{split}-g{generation:06d}" if generation else split


def shard_name(split: str, index: int) -> str:
    """File name of shard ``index`` of ``split``."""
    return f"{split}-{index:06d}.tar"


def shard_path(split: str, index: int, prefixes: int = 1) -> str:
    """Name of shard ``index`` of ``split`` relative to the split folder, as the manifest records it: its
    :func:`shard_name` in prefix directory ``index % prefixes`` (:func:`~shardkit.format.prefixes.spread_name`;
    flat with one prefix). Planned and overflow shards alike are spread by their index."""
    return spread_name(shard_name(split, index), index, prefixes)


def journal_url(split_url: str, name: str = "") -> str:
    """URL of the journal folder of ``split_url``, or of ``name`` inside it."""
    return storage.join(split_url, JOURNAL_DIR, name) if name else storage.join(split_url, JOURNAL_DIR)


def json_sha256(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass
class Plan:
    """The split-level plan shared by all tasks (see module docstring)."""

    split: str
    options: dict[str, Any]
    classes: list[str]
    encoder: str
    input_sha256: str
    num_items: int
    samples_per_shard: int
    num_planned: int
    key_width: int
    skipped: list[SkippedFile] = field(default_factory=list)
    fields: list[str] = field(default_factory=lambda: list(DEFAULT_FIELDS))  #: the stored fields of the split
    targets: list[str] = field(default_factory=list)  #: the names of the ``target`` values
    keypoint_names: list[str] = field(default_factory=list)  #: the ``K`` keypoints' names (``keypoints``)
    flip_pairs: list[list[int]] = field(default_factory=list)  #: keypoints a horizontal flip swaps
    #: what the source made of its annotations (detection sources), before the encode-time moves of the records
    annotations: dict[str, int] = field(default_factory=dict)
    #: the SRC the conversion was started with, as given (shown in messages; not part of the fingerprint)
    src: str = ""
    #: how overlapping objects are painted into a mask made of segmentations (:data:`OVERLAP_RULE`); ``""``: no
    #: such mask. Part of the fingerprint when set, so a conversion painted by another rule is never resumed into.
    overlap: str = ""
    #: the generation this plan adds to the split (0: a conversion; 1, 2, ...: ``--append``)
    generation: int = 0
    #: an append: the first key number of the generation (after every key of the earlier generations)
    key_offset: int = 0
    #: an append: :func:`~shardkit.format.snapshot.pin.fingerprint` of the split it appends to
    base: str = ""

    @property
    def stem(self) -> str:
        """What the generation's shard, record and overflow names start with: the split's name for generation 0,
        ``<split>-g<generation:06d>`` for an appended one (names that cannot collide with an earlier generation's)."""
        return generation_stem(self.split, self.generation)

    @property
    def prefixes(self) -> int:
        """The prefix directories the split's shards are spread over (``options["prefixes"]``; 1: flat names)."""
        return int(self.options.get("prefixes", 1))

    @property
    def fingerprint(self) -> str:
        """Identity of the conversion: options, classes, fields, encoder and input (not derived numbers).

        The default fields (``image``, ``label``) are left out, so a plan written before fields kept its
        fingerprint; so are empty keypoint names, flip pairs and annotation counts.
        """
        more: list[Any] = (
            [self.fields, self.targets] if (self.fields, self.targets) != (list(DEFAULT_FIELDS), []) else []
        )
        more += [self.keypoint_names, self.flip_pairs] if self.keypoint_names or self.flip_pairs else []
        more += [self.annotations] if self.annotations else []
        more += [{"overlap": self.overlap}] if self.overlap else []
        more += (
            [{"generation": self.generation, "key_offset": self.key_offset, "base": self.base}]
            if self.generation
            else []
        )
        return json_sha256([self.split, self.options, self.classes, self.encoder, self.input_sha256, *more])

    def to_json(self) -> bytes:
        d = {"format": PLAN_FORMAT, "version": PLAN_VERSION, **asdict(self), "fingerprint": self.fingerprint}
        return (json.dumps(d, indent=1, ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, text: bytes, url: str) -> "Plan":
        try:
            d = json.loads(text)
            if d.get("format") != PLAN_FORMAT or d.get("version") != PLAN_VERSION:
                raise ValueError(f"format {d.get('format')!r} version {d.get('version')!r}")
            d = {k: v for k, v in d.items() if k not in ("format", "version", "fingerprint")}
            d["skipped"] = [SkippedFile(**s) for s in d.get("skipped", [])]
            return cls(**d)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ConvertError(f"{url}: unreadable conversion plan ({exc}); rerun with --overwrite") from None


#: manifest option fields that are derived or identities, not options (not compared by :func:`differences`)
_DERIVED = frozenset({"samples_per_shard", "encoder", "input_sha256", "fingerprint"})


_OVERLAP_WORDS = {"": "in annotation order (the later on top)", OVERLAP_RULE: "smaller on top"}


def differences(old: Plan, new: Plan) -> list[str]:
    """What makes ``new`` a different conversion from ``old``, in words (options as their CLI names)."""

    def flat(options: dict[str, Any]) -> dict[str, Any]:  # {"source": {"path_col": ...}} -> {"path_col": ...}
        return {**{k: v for k, v in options.items() if k != "source"}, **(options.get("source") or {})}

    was, now = flat(old.options), flat(new.options)
    keys = [k for k in now if k not in _DERIVED] + sorted(k for k in was if k not in now and k not in _DERIVED)
    out = [
        f"--{k.replace('_', '-')} was {repr(was[k]) if k in was else 'the default'}, now {repr(now[k]) if k in now else 'the default'}"
        for k in keys
        if was.get(k) != now.get(k)
    ]
    if old.split != new.split:
        out.append(f"split was {old.split!r}, now {new.split!r}")
    if old.classes != new.classes:
        gone, added = sorted(set(old.classes) - set(new.classes)), sorted(set(new.classes) - set(old.classes))
        out.append(
            "classes differ"
            + (f" (no longer: {', '.join(gone[:5])})" if gone else "")
            + (f" (new: {', '.join(added[:5])})" if added else "")
        )
    if old.input_sha256 != new.input_sha256:
        counts = (
            f": {old.num_items} files then, {new.num_items} now"
            if old.num_items >= 0 and old.num_items != new.num_items
            else ""
        )
        out.append(f"the input listing differs (files added, removed, resized or relabelled{counts})")
    if (old.fields, old.targets) != (new.fields, new.targets):
        out.append(f"the fields were {old.fields} (targets {old.targets}), now {new.fields} (targets {new.targets})")
    if (old.keypoint_names, old.flip_pairs) != (new.keypoint_names, new.flip_pairs):
        out.append(f"the keypoints were {old.keypoint_names}, now {new.keypoint_names}")
    if old.annotations != new.annotations:
        out.append(f"the source's annotations were {old.annotations}, now {new.annotations}")
    if old.overlap != new.overlap:
        out.append(
            f"overlapping objects were painted {_OVERLAP_WORDS.get(old.overlap, old.overlap)}, "
            f"now {_OVERLAP_WORDS.get(new.overlap, new.overlap)}"
        )
    if old.encoder != new.encoder:
        out.append(f"the encoder was {old.encoder!r}, now {new.encoder!r}")
    return out or ["an unknown conversion format"]


@dataclass
class Part:
    """A tar written for a planned shard: the shard itself or its overflow."""

    name: str
    samples: int
    bytes: int
    sha256: str


@dataclass
class ShardRecord:
    """What finishing planned shard ``index`` produced."""

    fingerprint: str
    index: int
    shard: Part | None
    overflow: Part | None
    class_counts: list[int]
    skipped: list[SkippedFile]
    bytes_in: int
    fields: list[str] = field(default_factory=lambda: list(DEFAULT_FIELDS))  #: the fields its samples store
    targets: list[str] = field(default_factory=list)
    keypoint_names: list[str] = field(default_factory=list)  #: the keypoints its samples store
    #: annotations of its items moved out of ``kept`` while encoding (``clipped``, ``outside_image``, ``image_skipped``)
    annotations: dict[str, int] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        """Samples written for this planned shard (its tar and its overflow)."""
        return (self.shard.samples if self.shard else 0) + (self.overflow.samples if self.overflow else 0)

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, text: bytes) -> "ShardRecord | None":
        """The record, or ``None`` if it is damaged (the shard is then redone)."""
        try:
            d = json.loads(text)
            d["shard"] = Part(**d["shard"]) if d["shard"] else None
            d["overflow"] = Part(**d["overflow"]) if d["overflow"] else None
            d["skipped"] = [SkippedFile(**s) for s in d["skipped"]]
            return cls(**d)
        except (ValueError, TypeError, KeyError):
            return None

    def shard_info(self) -> ShardInfo | None:
        return ShardInfo(**asdict(self.shard)) if self.shard else None


def record_name(split: str, index: int) -> str:
    return f"{split}-{index:06d}.json"


def overflow_name(split: str, index: int) -> str:
    return f"{split}-{index:06d}.overflow"


def read_plan(split_url: str, **storage_options: Any) -> Plan | None:
    """The plan at ``split_url``, or ``None`` if there is none."""
    url = journal_url(split_url, PLAN_NAME)
    if not storage.exists(url, **storage_options):
        return None
    return Plan.from_json(storage.read_bytes(url, **storage_options), url)


def read_record(split_url: str, split: str, index: int, **storage_options: Any) -> ShardRecord | None:
    """The record of planned shard ``index``, or ``None`` if missing or damaged."""
    try:
        return ShardRecord.from_json(
            storage.read_bytes(journal_url(split_url, record_name(split, index)), **storage_options)
        )
    except ShardkitError:
        return None
