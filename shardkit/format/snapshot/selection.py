"""A selection: a small folder naming some samples of another split, read wherever a split is.

``shardkit select`` writes ``SEL/manifest.json`` (format ``shardkit-selection``) and ``SEL/selection.bits``: one
bit per stored sample of the parent split as of one generation (``numpy.packbits``, little bit order, split
order), set when the sample is in. The manifest names the parent by URL and by the fingerprint of what it was
(:func:`shardkit.format.snapshot.pin.fingerprint` of the parent pinned to that generation), the generation, the
number of samples in, the bits file's size and sha256, and the criteria it was taken with (a record for people:
nothing in it is run at load time). No shard is copied: a reader resolves the parent, checks its fingerprint
(an append to the parent keeps it; a reconversion or a new correction is refused in one line), and reads the
parent's shards through a :class:`~shardkit.format.snapshot.subset.Subset`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from shardkit import __version__
from shardkit.errors import ManifestError, ShardkitError
from shardkit.format import jsonvalues
from shardkit.format.manifest import MANIFEST_NAME, Manifest, load_manifest, manifest_url
from shardkit.format.snapshot.pin import fingerprint, latest, pin
from shardkit.storage import fs as storage

SELECTION_FORMAT = "shardkit-selection"
SELECTION_VERSION = 1
BITS_NAME = "selection.bits"


@dataclass(frozen=True)
class Selection:
    """A selection's manifest.

    Attributes:
        parent: the parent split's URL (absolute path or fsspec URL).
        parent_fingerprint: the parent's fingerprint as of ``generation``.
        generation: the parent's generation the selection was taken from.
        split: the parent's split name.
        samples: samples in the selection.
        stored: stored samples of the parent at ``generation`` (bits in the bits file).
        bits: ``{"name", "bytes", "sha256"}`` of the bits file.
        criteria: how it was taken (for people; never evaluated).
        shardkit_version: the writer's version.
        url: where the manifest was loaded from (not serialised).
    """

    parent: str
    parent_fingerprint: str
    generation: int
    split: str
    samples: int
    stored: int
    bits: dict[str, Any]
    criteria: dict[str, Any] = field(default_factory=dict)
    shardkit_version: str = ""
    url: str = field(default="", compare=False)

    def to_json(self) -> str:
        """The manifest's text."""
        d = {
            "format": SELECTION_FORMAT,
            "version": SELECTION_VERSION,
            "parent": self.parent,
            "parent_fingerprint": self.parent_fingerprint,
            "generation": self.generation,
            "split": self.split,
            "samples": self.samples,
            "stored": self.stored,
            "bits": self.bits,
            "criteria": self.criteria,
            "shardkit_version": self.shardkit_version,
        }
        return json.dumps(d, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, d: dict[str, Any], url: str) -> "Selection":
        """Parse a decoded selection manifest; :class:`ManifestError` naming ``url``."""
        if d.get("version") != SELECTION_VERSION:
            raise ManifestError(
                f"{url}: selection version {d.get('version')!r} is not supported by this shardkit "
                f"(reads version {SELECTION_VERSION}); upgrade shardkit or take the selection again"
            )
        try:
            s = cls(
                parent=jsonvalues.text(d["parent"]),
                parent_fingerprint=jsonvalues.text(d["parent_fingerprint"]),
                generation=jsonvalues.count(d["generation"]),
                split=jsonvalues.text(d["split"]),
                samples=jsonvalues.count(d["samples"]),
                stored=jsonvalues.count(d["stored"]),
                bits={
                    "name": jsonvalues.text(d["bits"]["name"]),
                    "bytes": jsonvalues.count(d["bits"]["bytes"]),
                    "sha256": jsonvalues.text(d["bits"]["sha256"]),
                },
                criteria=dict(d.get("criteria", {})),
                shardkit_version=str(d.get("shardkit_version", "")),
                url=url,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{url}: malformed selection manifest ({type(exc).__name__}: {exc})") from None
        if s.bits["name"] != BITS_NAME:
            raise ManifestError(f"{url}: the selection's bits file must be {BITS_NAME!r}, not {s.bits['name']!r}")
        return s

    @property
    def base_url(self) -> str:
        """The selection's folder."""
        return self.url.rsplit("/", 1)[0] if "://" in self.url else os.path.dirname(self.url) or "."

    def mask(self, data: bytes) -> np.ndarray:
        """The kept mask (one bool per stored sample) from the bits file's bytes, checked."""
        where = storage.join(self.base_url, BITS_NAME)
        if len(data) != self.bits["bytes"] or hashlib.sha256(data).hexdigest() != self.bits["sha256"]:
            raise ManifestError(
                f"{where}: size or sha256 differs from the selection's manifest; take the selection again"
            )
        if len(data) != (self.stored + 7) // 8:
            raise ManifestError(f"{where}: {len(data)} bytes for {self.stored} samples; take the selection again")
        mask = np.unpackbits(np.frombuffer(data, np.uint8), count=self.stored, bitorder="little").astype(bool)
        if int(mask.sum()) != self.samples:
            raise ManifestError(f"{where}: holds {int(mask.sum())} samples, the manifest says {self.samples}")
        return mask


def read_manifest(url: str, *, allow_unsafe_names: bool = False, **storage_options: Any) -> Union[Manifest, Selection]:
    """The manifest at ``url`` (a split directory, a selection folder, or the ``manifest.json`` of either)."""
    murl = manifest_url(url)
    try:
        text = storage.read_bytes(murl, **storage_options)
    except ShardkitError:
        return load_manifest(url, allow_unsafe_names=allow_unsafe_names, **storage_options)  # its messages
    try:
        d = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        d = None
    if isinstance(d, dict) and d.get("format") == SELECTION_FORMAT:
        return Selection.from_json(d, murl)
    return Manifest.from_json(text, url=murl, allow_unsafe_names=allow_unsafe_names)


def selection_bytes(mask: np.ndarray) -> bytes:
    """The bits file of ``mask``."""
    return np.packbits(np.asarray(mask, bool), bitorder="little").tobytes()


def write_selection(
    parent_url: str,
    mask: np.ndarray,
    out: str,
    *,
    generation: "int | None" = None,
    criteria: "dict[str, Any] | None" = None,
    **storage_options: Any,
) -> Selection:
    """Write the selection of ``parent_url``'s samples where ``mask`` is true (one bool per stored sample of the
    parent as of ``generation``, ``None``: the newest) into the folder ``out``; returns its manifest.

    Raises:
        ManifestError: the parent is itself a selection, or the mask does not cover its samples.
    """

    parent = read_manifest(parent_url, **storage_options)
    if isinstance(parent, Selection):
        raise ManifestError(f"{parent_url} is a selection; select from its parent split {parent.parent} instead")
    gen = latest(parent) if generation is None else generation
    pinned = pin(parent, gen)
    mask = np.asarray(mask, bool)
    if mask.shape != (pinned.num_samples,):
        raise ManifestError(
            f"{parent_url}: a selection mask of {mask.shape} for {pinned.num_samples} stored samples (generation {gen})"
        )
    data = selection_bytes(mask)
    murl = manifest_url(parent_url)
    absolute = os.path.abspath(storage.local_path(murl)) if storage.is_local(murl) else murl
    sel = Selection(
        parent=absolute.rsplit("/", 1)[0] if "://" in absolute else os.path.dirname(absolute),
        parent_fingerprint=fingerprint(pinned),
        generation=gen,
        split=parent.split,
        samples=int(mask.sum()),
        stored=len(mask),
        bits={"name": BITS_NAME, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
        criteria=dict(criteria or {}),
        shardkit_version=__version__,
        url=storage.join(out, MANIFEST_NAME),
    )
    storage.makedirs(out, **storage_options)
    storage.write_atomic(storage.join(out, BITS_NAME), data, **storage_options)
    storage.write_atomic(storage.join(out, MANIFEST_NAME), sel.to_json().encode("utf-8"), **storage_options)
    return sel


__all__ = ["BITS_NAME", "SELECTION_FORMAT", "Selection", "read_manifest", "selection_bytes", "write_selection"]
