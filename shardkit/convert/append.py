"""``convert --append``: what a new generation of a split needs to know about the split it extends.

An append converts NEW_SRC into the same split folders as a new generation (:mod:`shardkit.format.generations`),
with the planner, encoder, journal and merge of a conversion; this module holds what differs:

* :func:`load_base`: the split as it is (its manifest, every generation's key and per-sample tables), giving the
  next generation's number, the first key number (one past every key the split ever had, so keys never repeat
  and a removed key is never reused), and the ``source_sha256`` of every image already in the split;
* :func:`check_compatible`: NEW_SRC must store the same fields, targets and keypoints, and be converted with the
  split's own image options (``--short-side``, ``--quality``, ...), else a one-line refusal naming what differs;
* :func:`merged_classes` / :func:`relabelled`: class names merge by name -- every existing index stays, new
  classes are added at the end -- and NEW_SRC's labels are renumbered into the merged list;
* :func:`appended_manifest`: the manifest after the generation (the earlier shards first, untouched).

The duplicate rule: an image whose source bytes (sha256) an earlier generation of the same split holds is not
converted again; it is skipped with reason ``already_in_split`` and counted as the generation's ``duplicates``.
Two different images with the same relative path both stay (their keys differ).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from shardkit.convert.options import ConvertConfig
from shardkit.convert.scan.source import ScannedSource, SplitSource
from shardkit.convert.skips import SkipReason
from shardkit.errors import ConvertError, ShardkitError
from shardkit.format.generations import Generation
from shardkit.format.manifest import Manifest, ShardInfo, SkippedFile
from shardkit.format.snapshot.pin import fingerprint, generations_of
from shardkit.format.tables import TABLES_FORMAT, KeyTable, checked, read_samples_table
from shardkit.storage import fs as storage

#: the options that decide an image's pixels and bytes: an append must use the split's own (CLI spelling as key)
IMAGE_OPTIONS = ("short_side", "max_side", "quality", "max_pixels", "resample", "copy", "colour", "prefixes")
#: what those options are when a manifest does not record them
_ABSENT = {"copy": False, "prefixes": 1}


@dataclass(frozen=True)
class Base:
    """A split as an append finds it.

    Attributes:
        manifest: its manifest.
        generation: the number the appended generation gets.
        key_offset: the first key number of the appended generation.
        hashes: ``source_sha256 -> key`` of every sample of every generation (those whose table has the hash).
        fingerprint: :func:`~shardkit.format.snapshot.pin.fingerprint` of the split (the append's base).
    """

    manifest: Manifest
    generation: int
    key_offset: int
    hashes: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""


def _read(url: str, so: dict) -> bytes:
    try:
        return storage.read_bytes(url, **so)
    except ShardkitError as exc:
        raise ConvertError(f"{url}: cannot read ({exc}); restore it, or build it with `shardkit index`") from None


def load_base(m: Manifest, storage_options: dict) -> Base:
    """The :class:`Base` of the split whose manifest is ``m`` (its tables read and checked).

    Raises:
        ConvertError: a generation has no tables (written before them: run ``shardkit index`` first), a table
            is damaged, or a key is not a number (not written by ``shardkit convert``).
    """
    top = 0
    hashes: dict[str, str] = {}
    base = m.base_url
    for g in generations_of(m):
        t = g.tables
        if not t or t.get("format") != TABLES_FORMAT:
            raise ConvertError(
                f"{base}: generation {g.number} has no key table, which an append needs to continue its keys and "
                f"find images already there: run `shardkit index {base}` first"
            )
        kurl = storage.join(base, t["keys"]["name"])
        try:
            table = KeyTable.from_bytes(checked(_read(kurl, storage_options), t["keys"], kurl), kurl)
            surl = storage.join(base, t["samples"]["name"])
            _, rows = read_samples_table(checked(_read(surl, storage_options), t["samples"], surl), surl)
            for row in rows:
                if row.get("source_sha256"):
                    hashes.setdefault(row["source_sha256"], row["key"])
        except ShardkitError as exc:
            raise ConvertError(str(exc)) from None
        for k in table.keys.tolist():
            try:
                top = max(top, int(k.decode("ascii")) + 1)
            except (UnicodeDecodeError, ValueError):
                raise ConvertError(
                    f"{kurl}: key {k!r} is not a number, so an append cannot continue the keys; "
                    "append only to splits written by `shardkit convert`"
                ) from None
    return Base(m, len(generations_of(m)), top, hashes, fingerprint(m))


def check_compatible(m: Manifest, options: ConvertConfig, fields: Sequence[str], targets: Sequence[str],
                     keypoint_names: Sequence[str]) -> None:  # fmt: skip
    """Refuse (one line, naming it) an append whose stored fields or image options differ from split ``m``'s."""
    where = m.base_url
    if list(fields) != list(m.fields):
        raise ConvertError(
            f"{where}: NEW_SRC stores fields {', '.join(fields)} but the split stores {', '.join(m.fields)}; "
            "an append must store the same fields (label kind included): check NEW_SRC's options"
        )
    if list(targets) != list(m.targets):
        raise ConvertError(f"{where}: NEW_SRC's targets are {list(targets)} but the split's are {m.targets}")
    if list(keypoint_names) != list(m.keypoint_names):
        raise ConvertError(
            f"{where}: NEW_SRC's keypoints are {list(keypoint_names)} but the split's are {m.keypoint_names}"
        )
    given = options.recorded()
    for k in IMAGE_OPTIONS:
        have, want = given.get(k, _ABSENT.get(k)), m.options.get(k, _ABSENT.get(k))
        if have != want:
            raise ConvertError(
                f"{where}: --{k.replace('_', '-')} is {want!r} in this split but {have!r} was given; an append uses "
                "the split's own image options: leave the option out (the CLI then takes the split's)"
            )


def appending(dest: str, source: ScannedSource, options: ConvertConfig, so: dict) -> dict[str, Base]:
    """The :class:`~shardkit.convert.append.Base` of each split of ``source`` that ``dest`` already holds (each
    checked against ``source`` and ``options``); a split ``dest`` lacks is converted as its generation 0.

    Raises:
        ConvertError: ``dest`` is a selection or holds no split; a split stores other fields or was converted
            with other image options.
    """
    import json

    from shardkit.format.manifest import MANIFEST_NAME, load_manifest, split_names
    from shardkit.format.snapshot.selection import SELECTION_FORMAT

    murl = storage.join(dest, MANIFEST_NAME)
    if storage.exists(murl, **so):
        try:
            fmt = json.loads(storage.read_bytes(murl, **so)).get("format")
        except (ValueError, UnicodeDecodeError, AttributeError):
            fmt = None
        if fmt == SELECTION_FORMAT:
            raise ConvertError(
                f"{dest} is a selection (shardkit select), not a dataset: append to the dataset it was taken from"
            )
        raise ConvertError(f"{dest} holds one split directly; append to its parent folder, which holds the splits")
    have = set(split_names(dest, **so)) if storage.exists(dest, **so) else set()
    if not have:
        raise ConvertError(f"{dest}: no converted split to append to; convert without --append first (or check DEST)")
    out = {}
    for s in source.splits:
        if s.name in have and s.files:
            m = load_manifest(storage.join(dest, s.name), **so)
            check_compatible(m, options, source.fields, source.targets, source.keypoint_names)
            out[s.name] = load_base(m, so)
    return out


def dataset_options(dest: str, storage_options: dict) -> dict[str, Any]:
    """The image options (:data:`IMAGE_OPTIONS`) DEST's splits were converted with (its first split's; ``{}``
    when DEST holds no split: :func:`appending` then says so)."""
    from shardkit.format.manifest import load_manifest, split_names

    try:
        names = split_names(dest, **storage_options)
        if not names:
            return {}
        m = load_manifest(storage.join(dest, names[0]), **storage_options)
    except ShardkitError:
        return {}
    return {k: m.options.get(k, _ABSENT.get(k)) for k in IMAGE_OPTIONS}


def merged_classes(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """``old`` with the names of ``new`` it lacks added at the end, in ``new``'s order (no index moves)."""
    have = set(old)
    return list(old) + [c for c in new if c not in have and not have.add(c)]  # type: ignore[func-returns-value]


def relabelled(src: SplitSource, source_classes: Sequence[str], classes: Sequence[str]) -> SplitSource:
    """``src`` with its items' labels renumbered from ``source_classes`` to ``classes`` (a superset).

    Raises:
        ConvertError: the items carry class indices in boxes, masks or instances, which an append cannot renumber
            (their class list must then equal the split's).
    """
    at = {c: i for i, c in enumerate(classes)}
    mapping = [at[c] for c in source_classes]
    if mapping == list(range(len(mapping))):
        return src
    if any(f.objects is not None or f.mask is not None or f.segments is not None for f in src.files):
        raise ConvertError(
            f"split {src.name}: NEW_SRC's classes ({', '.join(source_classes[:5])}...) are not the split's first "
            "classes in order, and its boxes or masks hold class indices that an append does not renumber; "
            "give NEW_SRC the split's class list (e.g. --mask-classes)"
        )
    files = [
        dataclasses.replace(
            f,
            label=None if f.label is None else mapping[f.label],
            labels=None if f.labels is None else tuple(sorted(mapping[x] for x in f.labels)),
        )
        for f in src.files
    ]
    return dataclasses.replace(src, files=files)


def duplicate(relpath: str, key: str) -> SkippedFile:
    """The skip record of an appended image whose bytes are sample ``key``'s."""
    return SkippedFile(relpath, SkipReason.ALREADY_IN_SPLIT.value, f"the same bytes as sample {key}")


def appended_manifest(
    old: Manifest,
    new: Manifest,
    *,
    generation: int,
    duplicates: int,
    created: Optional[str] = None,
) -> Manifest:
    """Split ``old`` with generation ``generation`` added: ``new`` describes only what the generation wrote
    (its shards, merged classes, counts, skips, tables and options)."""
    gens = [
        dataclasses.replace(g, tables=g.tables or (old.tables if g.number == 0 else {})) for g in generations_of(old)
    ]
    counts = list(new.class_counts)
    gen = Generation(
        number=generation,
        shards=len(new.shards),
        samples=new.num_samples,
        classes=len(new.classes),
        class_counts=counts,
        created=created or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        duplicates=duplicates,
        options=dict(new.options),
        tables=dict(new.tables),
    )
    total = [0] * len(new.classes)
    for i, c in enumerate(old.class_counts):
        total[i] += c
    for i, c in enumerate(counts):
        total[i] += c
    shards: list[ShardInfo] = list(old.shards) + list(new.shards)
    return dataclasses.replace(
        old,
        classes=list(new.classes),
        shards=shards,
        class_counts=total if (old.class_counts or counts) else [],
        skipped=sorted(old.skipped + new.skipped, key=lambda s: s.path),
        sample_index=old.sample_index if old.sample_index == new.sample_index else "",
        annotations={
            k: old.annotations.get(k, 0) + new.annotations.get(k, 0)
            for k in sorted({*old.annotations, *new.annotations})
        },  # fmt: skip
        tables={},  # every generation's tables are in its record
        generations=[*gens, gen],
    )


__all__ = [
    "IMAGE_OPTIONS",
    "Base",
    "appended_manifest",
    "appending",
    "check_compatible",
    "dataset_options",
    "duplicate",
    "load_base",
    "merged_classes",
    "relabelled",
]
