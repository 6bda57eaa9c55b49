"""The versioned manifest that describes one converted split.

One JSON file per split, ``<dataset>/<split>/manifest.json`` (datasets written
by older shardkit may hold a single split's ``<dataset>/manifest.json``; they load
the same way). It records the format
version, the shardkit version, the conversion options, the classes
(index -> name, as a list), one entry per shard ``{name, samples, bytes,
sha256}``, per-class counts, every source file that was skipped with its
reason and (version 2) ``sample_index``: the format of the per-shard sample
index sidecars (:mod:`shardkit.format.index`; ``""``: none). Readers check
``version`` and refuse unknown ones; version 1 manifests (written before the
sample index) stay readable as datasets without an index. Version 3 adds ``fields`` (the
stored fields beside the image: :mod:`shardkit.format.fields`) and ``targets`` (the names of
the ``target`` values), and for datasets with ``keypoints`` the ``keypoint_names`` and the
``flip_pairs`` a horizontal flip swaps (written only when not empty); versions 1 and 2 read as
``fields = ["image", "label"]``. The optional ``tables`` (written only when present, in any version: a
reader that does not know it loses nothing, as the tables only speed up lookups) names the split's key
table and per-sample table with their sizes and sha256s (:mod:`shardkit.format.tables`). The optional
``generations`` (written once a split was appended to) records what each conversion run added and corrected
(:mod:`shardkit.format.generations`); a manifest with corrections is version 4, which releases that would ignore
them refuse. Shard names are
validated so that a manifest cannot point outside its own directory unless the
caller opts in: a name is a plain ``.tar`` file name, or one inside a prefix directory
(``<4 hex digits>/<file>.tar``, as ``shardkit convert --prefixes N`` writes them:
:mod:`shardkit.format.prefixes`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from shardkit.errors import ManifestError, ShardkitError
from shardkit.format import jsonvalues
from shardkit.format.fields import DEFAULT_FIELDS, fields_error
from shardkit.format.generations import CORRECTED_VERSION, Generation, generations_error, has_corrections
from shardkit.format.prefixes import PREFIX_DIR
from shardkit.format.tables import tables_error
from shardkit.storage import fs as storage

FORMAT = "shardkit-manifest"
VERSION = 3
#: manifest versions this shardkit reads (1: before the sample index; 2: before ``fields``; 4: with corrections)
READABLE_VERSIONS = (1, 2, 3, CORRECTED_VERSION)
MANIFEST_NAME = "manifest.json"
_MAX_COUNT = 1 << 40
#: a shard name: a plain ``.tar`` file name, optionally in a prefix directory (:func:`~shardkit.format.prefixes.spread_name`)
_SAFE_NAME = re.compile(rf"^(?:{PREFIX_DIR.pattern}/)?[A-Za-z0-9_][A-Za-z0-9_.-]*\.tar$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ShardInfo:
    """One finished shard: file name relative to the manifest (``train-000000.tar``, or ``ac72/train-000000.tar``
    in a prefix directory), samples, size and checksum."""

    name: str
    samples: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class SkippedFile:
    """A source file that is not in any shard, and why (``reason`` is a short code)."""

    path: str
    reason: str
    detail: str = ""


@dataclass
class Manifest:
    """Everything a reader needs to know about one split, without opening a shard.

    ``url`` is where the manifest was loaded from (not serialised); shard URLs
    are resolved relative to its directory.
    """

    split: str
    classes: list[str]
    shards: list[ShardInfo]
    options: dict[str, Any] = field(default_factory=dict)
    class_counts: list[int] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    shardkit_version: str = ""
    sample_index: str = ""  #: format of the shards' index sidecars (``shardkit.format.INDEX_FORMAT``), ``""`` if none
    fields: list[str] = field(default_factory=lambda: list(DEFAULT_FIELDS))  #: stored fields (``"image"`` first)
    targets: list[str] = field(default_factory=list)  #: names of the ``target`` values (``[]``: no ``target``)
    keypoint_names: list[str] = field(default_factory=list)  #: the ``K`` keypoints' names (``keypoints`` datasets)
    flip_pairs: list[list[int]] = field(default_factory=list)  #: keypoints a horizontal flip swaps, by index
    #: what became of the source's annotations (detection sources): ``{"kept": n, "clipped": n, <reason>: n}``
    annotations: dict[str, int] = field(default_factory=dict)
    #: the split's key table and per-sample table (:func:`shardkit.format.tables.table_entry`); ``{}``: none
    tables: dict[str, Any] = field(default_factory=dict)
    #: what each conversion run added and corrected (:mod:`shardkit.format.generations`); ``[]``: one generation
    generations: list[Generation] = field(default_factory=list)
    version: int = VERSION
    url: str = field(default="", compare=False, repr=False)

    @property
    def num_samples(self) -> int:
        """Total samples over all shards."""
        return sum(s.samples for s in self.shards)

    @property
    def num_bytes(self) -> int:
        """Total shard bytes."""
        return sum(s.bytes for s in self.shards)

    @property
    def shard_sizes(self) -> list[int]:
        """Samples per shard, in manifest order."""
        return [s.samples for s in self.shards]

    @property
    def base_url(self) -> str:
        """Directory (local path or URL) that holds the shards."""
        if not self.url:
            raise ShardkitError("manifest has no location: load it with load_manifest(url)")
        if storage.is_local(self.url) and not self.url.startswith("file://"):
            import os

            return os.path.dirname(self.url) or "."
        return self.url.rsplit("/", 1)[0]

    def shard_url(self, index: int) -> str:
        """URL of shard ``index``."""
        return storage.join(self.base_url, self.shards[index].name)

    def index_url(self, index: int) -> str:
        """URL of the sample index sidecar of shard ``index`` (present when :attr:`sample_index` is set)."""
        from shardkit.format.index import index_url

        return index_url(self.shard_url(index))

    def shard_urls(self) -> list[str]:
        """URLs of all shards, in order (one join per shard: fast for 100,000 shards)."""
        base = self.base_url
        if storage.is_local(base) and not base.startswith("file://"):
            import os

            return [os.path.join(base, s.name) for s in self.shards]
        base = base.rstrip("/") + "/"
        return [base + s.name for s in self.shards]

    def to_json(self) -> str:
        """Serialise (stable key order, one shard per line for readable diffs)."""
        d = asdict(self)
        d.pop("url")
        d["generations"] = [g.to_dict() for g in self.generations]
        d["version"] = CORRECTED_VERSION if has_corrections(self.generations) else min(self.version, VERSION)
        for key in (
            "keypoint_names",
            "flip_pairs",
            "annotations",
            "tables",
            "generations",
        ):  # written only by datasets that have them
            if not d[key]:
                d.pop(key)
        d = {"format": FORMAT, **d}
        d["num_samples"] = self.num_samples
        d["num_bytes"] = self.num_bytes
        return json.dumps(d, indent=1, sort_keys=False, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, url: str = "", *, allow_unsafe_names: bool = False) -> "Manifest":
        """Parse and validate; :class:`ManifestError` naming ``url`` on any problem."""
        where = url or "<manifest>"
        try:
            d = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ManifestError(f"{where}: not valid JSON ({exc}); re-run 'shardkit convert' to rewrite it") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ManifestError(f'{where}: not a shardkit manifest (missing "format": "{FORMAT}")')
        version = d.get("version")
        if not jsonvalues.is_int(version) or version not in READABLE_VERSIONS:
            raise ManifestError(
                f"{where}: manifest version {version!r} is not supported by this shardkit "
                f"(reads versions {', '.join(map(str, READABLE_VERSIONS))}); upgrade shardkit or re-convert the dataset"
            )
        try:
            if (
                not isinstance(d["shards"], list)
                or not isinstance(d["classes"], list)
                or not isinstance(d.get("class_counts", []), list)
            ):
                raise TypeError("'shards', 'classes' and 'class_counts' must be lists")
            shards = [ShardInfo(**s) for s in d["shards"]]
            skipped = [SkippedFile(**s) for s in d.get("skipped", [])]
            m = cls(
                split=str(d["split"]),
                classes=[str(c) for c in d["classes"]],
                shards=shards,
                options=dict(d.get("options", {})),
                class_counts=[jsonvalues.integer(c) for c in d.get("class_counts", [])],
                skipped=skipped,
                shardkit_version=str(d.get("shardkit_version", "")),
                sample_index=jsonvalues.text(d.get("sample_index", "")) if version >= 2 else "",
                fields=[jsonvalues.text(f) for f in jsonvalues.items(d.get("fields", list(DEFAULT_FIELDS)))]
                if version >= 3
                else list(DEFAULT_FIELDS),
                targets=[jsonvalues.text(t) for t in jsonvalues.items(d.get("targets", []))] if version >= 3 else [],
                keypoint_names=[jsonvalues.text(t) for t in jsonvalues.items(d.get("keypoint_names", []))]
                if version >= 3
                else [],
                flip_pairs=[list(jsonvalues.items(p)) for p in jsonvalues.items(d.get("flip_pairs", []))]
                if version >= 3
                else [],
                annotations={
                    jsonvalues.text(k): jsonvalues.integer(v)
                    for k, v in jsonvalues.obj(d.get("annotations", {})).items()
                },
                tables=dict(jsonvalues.obj(d.get("tables", {}))),
                generations=[Generation.from_dict(g) for g in jsonvalues.items(d.get("generations", []))],
                version=version,
                url=url,
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ManifestError(f"{where}: malformed manifest ({type(exc).__name__}: {exc})") from None
        m.validate(allow_unsafe_names=allow_unsafe_names)
        if has_corrections(m.generations) != (version == CORRECTED_VERSION):
            raise ManifestError(
                f"{where}: manifest version {version} "
                + ("with corrections: corrected splits are version 4" if version < 4 else "without corrections")
                + "; the manifest was edited or damaged"
            )
        declared = d.get("num_samples")
        if declared is not None and declared != m.num_samples:
            raise ManifestError(
                f"{where}: num_samples says {declared!r} but the shards hold {m.num_samples}; the manifest was edited or damaged"
            )
        return m

    def validate(self, *, allow_unsafe_names: bool = False) -> None:
        """Check counts, checksums and shard names; raise :class:`ManifestError`."""
        where = self.url or "<manifest>"
        names = set()
        for s in self.shards:
            if not isinstance(s.name, str) or not jsonvalues.is_int(s.samples) or not jsonvalues.is_int(s.bytes):
                raise ManifestError(f"{where}: shard entry {s!r} has wrong field types")
            if not 0 <= s.samples < _MAX_COUNT or not 0 <= s.bytes < _MAX_COUNT:
                raise ManifestError(
                    f"{where}: shard {s.name!r} has an impossible count ({s.samples} samples, {s.bytes} bytes)"
                )
            if not isinstance(s.sha256, str) or not _HEX64.fullmatch(s.sha256):
                raise ManifestError(f"{where}: shard {s.name!r} has a malformed sha256")
            if s.name in names:
                raise ManifestError(f"{where}: shard {s.name!r} is listed twice")
            names.add(s.name)
            if not allow_unsafe_names and (not _SAFE_NAME.fullmatch(s.name) or ".." in s.name):
                raise ManifestError(
                    f"{where}: shard name {s.name!r} is not a plain file name in the dataset directory or one of its "
                    "prefix directories (other paths, '..', URLs and pipe: are refused); pass allow_unsafe_names=True "
                    "only for manifests you trust"
                )
        if self.class_counts and (len(self.class_counts) != len(self.classes) or min(self.class_counts) < 0):
            raise ManifestError(f"{where}: class_counts does not match classes")
        if any(v < 0 for v in self.annotations.values()):
            raise ManifestError(f"{where}: annotations holds a negative count")
        problem = fields_error(
            self.fields, len(self.classes), len(self.targets), len(self.keypoint_names), self.flip_pairs
        )
        if problem:
            raise ManifestError(f"{where}: {problem}")
        problem = tables_error(self.tables)
        if problem:
            raise ManifestError(f"{where}: {problem}")
        problem = generations_error(self.generations, self.split, self.shard_sizes, len(self.classes))
        if problem:
            raise ManifestError(f"{where}: {problem}")
        if self.num_samples >= _MAX_COUNT:
            raise ManifestError(f"{where}: an impossible total of {self.num_samples} samples")


def manifest_url(url: str) -> str:
    """Accept a dataset directory or the manifest file itself; return the manifest URL."""
    if url.rstrip("/").endswith(".json"):
        return url
    return storage.join(url, MANIFEST_NAME)


def load_manifest(url: str, *, allow_unsafe_names: bool = False, **storage_options: Any) -> Manifest:
    """Load and validate the manifest of one split from a local path or any fsspec URL.

    Args:
        url: the split directory (``s3://bucket/ds/train``) or its ``manifest.json``.
        allow_unsafe_names: accept shard names that are paths or URLs (trusted manifests only).
        storage_options: passed to fsspec (credentials, endpoint...).
    """
    murl = manifest_url(url)
    try:
        text = storage.read_bytes(murl, **storage_options)
    except ShardkitError as exc:
        splits = [] if murl == url else split_names(url, **storage_options)
        if splits:
            example = "train" if "train" in splits else splits[0]
            raise ManifestError(
                f"{url} holds splits {', '.join(splits)}, not one split: name one, e.g. {storage.join(url, example)}"
            ) from None
        base = url if murl != url else url.rstrip("/").rsplit("/", 1)[0]
        if storage.exists(storage.join(base, "_shardkit"), **storage_options):  # a conversion's journal
            raise ManifestError(
                f"{base}: an unfinished conversion (no {MANIFEST_NAME} yet): run the same 'shardkit convert' "
                "command again to finish it (after --num-tasks: 'shardkit merge DEST')"
            ) from None
        raise ManifestError(f"{exc}; is this a dataset written by 'shardkit convert'?") from None
    return Manifest.from_json(text, url=murl, allow_unsafe_names=allow_unsafe_names)


def split_names(url: str, **storage_options: Any) -> list[str]:
    """The sub-folders of ``url`` holding a ``manifest.json`` (the finished splits of a dataset root), sorted."""
    try:
        dirs, _ = storage.list_dir(url, **storage_options)
        return [d for d in dirs if storage.exists(storage.join(url, d, MANIFEST_NAME), **storage_options)]
    except Exception:  # noqa: BLE001 - only a hint for the error message; backends raise their own types (aiohttp...)
        return []


def save_manifest(manifest: Manifest, url: str, **storage_options: Any) -> None:
    """Validate and atomically write ``manifest`` to ``url`` (a split directory or .json URL)."""
    manifest.validate()
    storage.write_atomic(manifest_url(url), manifest.to_json().encode("utf-8"), **storage_options)
