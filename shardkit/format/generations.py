"""A split's generations: what each ``convert`` / ``convert --append`` run added and corrected.

A split's manifest lists every shard of every generation in one ``shards`` list, generation 0's first, and
(written once the split has more than one generation) a ``generations`` list, one :class:`Generation` per run:
the shards and samples it added (its shards follow the earlier generations' in ``shards``), how many class
names the split had after it (a prefix of ``classes``: classes only ever grow at the end), the class counts of
what it added, its key and per-sample tables, when, its options, the source images skipped as already present,
and its :class:`Corrections` (a small file of removed keys and relabelled keys, applied on read, never by
rewriting a shard).

Compatibility: ``generations`` is optional in manifest version 3, so a release that does not know it reads an
appended split as one dataset of all its shards -- which it is. Corrections change what a reader must deliver
(removed samples, new labels), so a manifest with any is written as version :data:`CORRECTED_VERSION`, which
a release without corrections refuses in one line instead of delivering removed samples and old labels.

:func:`pin` gives the manifest as of one generation (its shards, classes and counts), which is what a loader,
``shardkit.open`` and a selection read; :func:`corrections_of` reads and checks one generation's corrections file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from shardkit.errors import ManifestError
from shardkit.format import jsonvalues

#: the manifest version of a split with corrections (readers without corrections refuse it)
CORRECTED_VERSION = 4
CORRECTIONS_FORMAT = "shardkit-corrections"
CORRECTIONS_VERSION = 1
CORRECTIONS_SUFFIX = ".corrections.json"


def corrections_name(split: str, generation: int) -> str:
    """File name of ``split``'s ``generation``'s corrections, beside the manifest."""
    return f"{split}-g{generation:06d}{CORRECTIONS_SUFFIX}"


def is_corrections_name(split: str, name: str) -> bool:
    """Whether ``name`` is named like a corrections file of ``split`` (any generation)."""
    return bool(re.fullmatch(rf"{re.escape(split)}-g\d{{6}}{re.escape(CORRECTIONS_SUFFIX)}", name))


@dataclass(frozen=True)
class Corrections:
    """A generation's corrections file, as the manifest records it.

    Attributes:
        name: the file beside the manifest (:func:`corrections_name`).
        bytes: its size.
        sha256: its checksum (checked before use).
        removed: keys it removes.
        relabeled: keys whose class it changes.
    """

    name: str
    bytes: int
    sha256: str
    removed: int = 0
    relabeled: int = 0


@dataclass(frozen=True)
class Generation:
    """What one conversion run added to a split.

    Attributes:
        number: 0 for the first conversion, then 1, 2, ... in order.
        shards: shards it added (they follow the earlier generations' in the manifest's ``shards``).
        samples: samples those shards hold.
        classes: class names the split had after it (the first ``classes`` of the manifest's ``classes``).
        class_counts: samples it added per class index (``classes`` entries; ``[]`` without a single label).
        created: when it was written (UTC, ISO 8601).
        duplicates: source images skipped because their bytes were already in the split.
        options: the run's conversion options (the image options are the split's own).
        tables: its key table and per-sample table (:func:`shardkit.format.tables.table_entry`), ``{}``: none.
        corrections: its removals and relabels, or ``None``.
    """

    number: int
    shards: int
    samples: int
    classes: int
    class_counts: list[int] = field(default_factory=list)
    created: str = ""
    duplicates: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    corrections: Optional[Corrections] = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly (``corrections`` and ``tables`` left out when absent)."""
        d: dict[str, Any] = {
            "number": self.number,
            "shards": self.shards,
            "samples": self.samples,
            "classes": self.classes,
            "class_counts": list(self.class_counts),
            "created": self.created,
            "duplicates": self.duplicates,
            "options": dict(self.options),
        }
        if self.tables:
            d["tables"] = dict(self.tables)
        if self.corrections is not None:
            d["corrections"] = {
                "name": self.corrections.name,
                "bytes": self.corrections.bytes,
                "sha256": self.corrections.sha256,
                "removed": self.corrections.removed,
                "relabeled": self.corrections.relabeled,
            }
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "Generation":
        """Parse one record (``TypeError``/``KeyError``/``ValueError`` on a malformed one)."""
        if not isinstance(d, dict):
            raise TypeError(f"generation {d!r} is not an object")
        c = d.get("corrections")
        corr = None
        if c is not None:
            if not isinstance(c, dict):
                raise TypeError(f"corrections {c!r} is not an object")
            corr = Corrections(
                name=jsonvalues.text(c["name"]),
                bytes=jsonvalues.count(c["bytes"]),
                sha256=jsonvalues.text(c["sha256"]),
                removed=jsonvalues.count(c.get("removed", 0)),
                relabeled=jsonvalues.count(c.get("relabeled", 0)),
            )
        tables = d.get("tables", {})
        if not isinstance(tables, dict):
            raise TypeError("generation tables is not an object")
        options = d.get("options", {})
        if not isinstance(options, dict):
            raise TypeError("generation options is not an object")
        counts = d.get("class_counts", [])
        if not isinstance(counts, list):
            raise TypeError("generation class_counts is not a list")
        return cls(
            number=jsonvalues.count(d["number"]),
            shards=jsonvalues.count(d["shards"]),
            samples=jsonvalues.count(d["samples"]),
            classes=jsonvalues.count(d["classes"]),
            class_counts=[jsonvalues.count(x) for x in counts],
            created=jsonvalues.text(d.get("created", "")),
            duplicates=jsonvalues.count(d.get("duplicates", 0)),
            options=dict(options),
            tables=dict(tables),
            corrections=corr,
        )


def generations_error(
    gens: Sequence[Generation], split: str, shard_samples: Sequence[int], classes: int
) -> Optional[str]:
    """Why ``gens`` do not describe a split of ``shard_samples`` (samples per shard, manifest order) and ``classes``
    class names (``[]``: one implicit generation), or ``None``."""
    if not gens:
        return None
    from shardkit.format.tables import tables_error

    for i, g in enumerate(gens):
        if g.number != i:
            return f"generation {i} is numbered {g.number}"
        if i and g.classes < gens[i - 1].classes:
            return f"generation {i} has fewer classes ({g.classes}) than generation {i - 1} ({gens[i - 1].classes})"
        if g.class_counts and len(g.class_counts) != g.classes:
            return f"generation {i}'s class_counts has {len(g.class_counts)} entries for {g.classes} classes"
        if g.corrections is not None and g.corrections.name != corrections_name(split, i):
            return f"generation {i}'s corrections file is {g.corrections.name!r}, not {corrections_name(split, i)!r}"
        problem = tables_error(g.tables)
        if problem:
            return f"generation {i}: {problem}"
    if sum(g.shards for g in gens) != len(shard_samples):
        return f"the generations add {sum(g.shards for g in gens)} shards but the manifest lists {len(shard_samples)}"
    if gens[-1].classes != classes:
        return f"the last generation has {gens[-1].classes} classes but the manifest lists {classes}"
    first = 0
    for g in gens:
        if sum(shard_samples[first : first + g.shards]) != g.samples:
            return f"generation {g.number}'s shards do not hold its {g.samples} samples"
        first += g.shards
    return None


def has_corrections(gens: Sequence[Generation]) -> bool:
    """Whether any of ``gens`` removes or relabels samples."""
    return any(g.corrections is not None for g in gens)


@dataclass(frozen=True)
class CorrectionRows:
    """One corrections file's content: keys removed and ``(key, class name)`` relabels, in file order."""

    removed: tuple[str, ...]
    relabeled: tuple[tuple[str, str], ...]

    def to_bytes(self, split: str, generation: int) -> bytes:
        """The file's bytes (sorted keys, one JSON object)."""
        d = {
            "format": CORRECTIONS_FORMAT,
            "version": CORRECTIONS_VERSION,
            "split": split,
            "generation": generation,
            "removed": sorted(self.removed),
            "relabeled": sorted([list(r) for r in self.relabeled]),
        }
        return (json.dumps(d, ensure_ascii=False, indent=0) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, url: str) -> "CorrectionRows":
        """Parse; :class:`ManifestError` naming ``url`` when it is not a corrections file of a known version."""
        try:
            d = json.loads(data)
            if d.get("format") != CORRECTIONS_FORMAT or d.get("version") != CORRECTIONS_VERSION:
                raise ValueError(f"not a {CORRECTIONS_FORMAT} file of version {CORRECTIONS_VERSION}")
            removed = tuple(jsonvalues.text(k) for k in d["removed"])
            relabeled = tuple((jsonvalues.text(k), jsonvalues.text(c)) for k, c in d["relabeled"])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ManifestError(f"{url}: unusable corrections file ({exc}); restore it or convert again") from None
        return cls(removed, relabeled)


__all__ = [
    "CORRECTED_VERSION",
    "CorrectionRows",
    "Corrections",
    "Generation",
    "corrections_name",
    "generations_error",
    "has_corrections",
    "is_corrections_name",
]
