"""``shardkit info`` and ``shardkit verify`` as library calls.

Both take a split folder (holding ``manifest.json``) or a dataset root whose
sub-folders are splits, local or any fsspec URL. :func:`info` reads manifests
only; :func:`verify` reads every shard: presence, size and sha256 against the
manifest and, unless ``quick``, every sample as the loader reads it (the same
header walk and member rule, :mod:`shardkit.format`), plus what only a full
check can see: the ``.json`` member and its class name, key uniqueness across
the split, per-class counts, that every JPEG decodes, and that each shard's
sample index matches its tar and, where it holds per-sample checksums, every
sample's CRC32C (:mod:`shardkit.ops.verify_split`). A split folder with shards
or a conversion journal but no manifest is an incomplete conversion, and a problem.

Warnings (problems with ``strict``): shard or index files in a split folder that
its manifest does not list (:mod:`shardkit.ops.strays`), and a split whose
sample indexes hold no per-sample checksums (``shardkit index`` adds them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Optional

from shardkit.errors import ManifestError, ShardkitError
from shardkit.format.fields import DEFAULT_FIELDS
from shardkit.format.index import INDEX_FORMAT, READABLE_INDEX_FORMATS
from shardkit.format.manifest import MANIFEST_NAME, Manifest
from shardkit.format.members import IMAGE_EXT, LABEL_EXT, MAX_PIXELS, META_EXT
from shardkit.format.sample import RawSample, SampleRule
from shardkit.format.splits import Found, Incomplete, find_splits, load_manifests
from shardkit.format.tar import ShardReader, TarDamage
from shardkit.ops.strays import stray_files, stray_message
from shardkit.ops.verify_generations import generation_problems, generation_strays, is_selection, selection_info
from shardkit.ops.verify_split import Problem, SplitCheck, VerifyReport

#: the command that adds per-sample checksums to a dataset's sample indexes
INDEX_COMMAND = "shardkit index"


@dataclass
class SplitInfo:
    """Summary of one split, from its manifest."""

    split: str
    url: str
    classes: list[str]
    class_counts: list[int]
    shards: int
    samples: int
    bytes: int
    skipped: dict[str, int]
    options: dict[str, Any]
    sample_index: str = ""
    fields: list[str] = field(default_factory=lambda: list(DEFAULT_FIELDS))
    targets: list[str] = field(default_factory=list)

    @property
    def mean_sample_bytes(self) -> float:
        """Mean shard bytes per sample (image, label, metadata and tar headers)."""
        return self.bytes / self.samples if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``shardkit info --json``)."""
        return {
            "split": self.split,
            "url": self.url,
            "shards": self.shards,
            "samples": self.samples,
            "bytes": self.bytes,
            "mean_sample_bytes": round(self.mean_sample_bytes, 1),
            "classes": {c: n for c, n in zip(self.classes, self.class_counts)}
            if self.class_counts
            else {c: None for c in self.classes},
            "skipped": self.skipped,
            "options": self.options,
            "sample_index": self.sample_index,
            "fields": self.fields,
            "targets": self.targets,
        }


def split_info(m: Manifest) -> SplitInfo:
    """The summary of one split from its manifest."""
    return SplitInfo(
        split=m.split,
        url=m.base_url,
        classes=m.classes,
        class_counts=m.class_counts,
        shards=len(m.shards),
        samples=m.num_samples,
        bytes=m.num_bytes,
        skipped=dict(Counter(s.reason for s in m.skipped)),
        options=m.options,
        sample_index=m.sample_index,
        fields=list(m.fields),
        targets=list(m.targets),
    )


def info(url: str, **storage_options: Any) -> list[SplitInfo]:
    """Per-split summaries of the dataset at ``url`` (manifests only, no shard is read)."""
    return [split_info(m) for m in load_manifests(url, **storage_options)]


def iter_raw(f: IO[bytes], url: str = "<shard>", *, rule: Optional[SampleRule] = None) -> Iterator[RawSample]:
    """Each sample of a shard written by shardkit, its fields read by ``rule`` (default: image and label).

    Raises:
        ValueError: a sample is unusable or the tar is damaged (the message names it).
    """
    r = ShardReader(f, url, rule=rule)
    try:
        while (s := r.read(r.index)) is not None:
            if s.error:
                raise ValueError(f"{url}: sample {s.index} ({s.key}): {s.error}")
            yield s
    except TarDamage as exc:
        raise ValueError(str(exc)) from None


def iter_samples(f: IO[bytes], url: str = "<shard>") -> Iterator[tuple[str, dict[str, bytes]]]:
    """``(key, {extension: bytes})`` of each sample of a single-label shard written by shardkit (``jpg``, ``cls``, ``json``).

    Raises:
        ValueError: a sample is unusable or the tar is damaged (the message names it).
    """
    for s in iter_raw(f, url):
        yield s.key, {LABEL_EXT: b"%d" % s.label, IMAGE_EXT: s.jpeg or b"", META_EXT: s.meta_bytes}  # type: ignore[str-format]


def _relative(url: str, base: str) -> str:
    """``base`` relative to ``url`` with a trailing separator ('' if equal; ``base`` itself if not below)."""
    u, b = url.rstrip("/\\"), base.rstrip("/\\")
    if u.endswith(".json"):
        u = u.rsplit("/", 1)[0] if "/" in u else "."
    if b == u or b == ".":
        return ""
    for sep in ("/", "\\"):
        if b.startswith(u + sep):
            return b[len(u) + 1 :] + "/"
    return b + "/"


def split_warnings(m: Manifest, where: str, **storage_options: Any) -> list[Problem]:
    """What verify warns about in the split of ``m`` (``where``: its folder relative to the verified URL):
    shard or index files the manifest does not list, and sample indexes without per-sample checksums."""
    out = []
    strays = stray_files(m, **storage_options) + generation_strays(m, **storage_options)
    if strays:
        out.append(Problem(m.split, where or "./", "", stray_message(strays)))
    if m.shards and m.sample_index != INDEX_FORMAT and (not m.sample_index or m.sample_index in READABLE_INDEX_FORMATS):
        what = "no sample index, so no" if not m.sample_index else f"sample indexes ({m.sample_index}) without"
        out.append(
            Problem(
                m.split,
                where or "./",
                "",
                f"{what} per-sample checksums: the loader cannot check each sample's bytes; add them with "
                f"'{INDEX_COMMAND} {m.base_url}'",
            )
        )
    return out


def verify(
    url: str,
    *,
    quick: bool = False,
    quiet: bool = True,
    max_pixels: Optional[int] = None,
    strict: bool = False,
    **storage_options: Any,
) -> VerifyReport:
    """Check every shard of the dataset at ``url`` against its manifest.

    Args:
        url: split folder or dataset root, local or fsspec URL.
        quick: sizes, sha256 and index checksums only (no decoding).
        quiet: no progress bar.
        max_pixels: an image declaring more pixels is a problem, as the loader skips it; default: the
            loader's default (``shardkit.load(..., max_pixels=...)``).
        strict: warnings make the report not ``ok`` (they stay in ``warnings``).
        storage_options: fsspec options.

    Returns:
        a report whose ``problems`` name the path, key and what is wrong; an unfinished
        conversion (a split folder without manifest) is a problem naming the command that finishes it.
        Its ``warnings`` (:func:`split_warnings`) name stray files and sample indexes without checksums.
    """
    from tqdm.auto import tqdm

    if max_pixels is None:
        max_pixels = MAX_PIXELS  # the loader's default too
    if max_pixels < 1:
        raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
    try:
        found = find_splits(url, **storage_options)
    except ManifestError:
        if is_selection(url, **storage_options):  # only then: a split is never read twice
            return _verify_selection(url, quick, max_pixels, strict, dict(storage_options))
        raise
    report = VerifyReport(splits=len(found.manifests) + len(found.incomplete) + len(found.unreadable), strict=strict)
    for inc in found.unreadable:
        report.problems.append(Problem("", _relative(url, inc.url) + MANIFEST_NAME, "", inc.detail))
    for inc in found.incomplete:
        report.problems.append(Problem("", _relative(url, inc.url) or "./", "", inc.detail))
    total = sum(m.num_bytes for m in found.manifests)
    with tqdm(total=total, unit="B", unit_scale=True, desc="verify", disable=quiet, dynamic_ncols=True) as bar:
        for m in found.manifests:
            where = _relative(url, m.base_url)
            report.warnings += split_warnings(m, where, **storage_options)
            check = SplitCheck(m, where, quick, max_pixels, report, dict(storage_options))
            for i, s in enumerate(m.shards):
                try:
                    check.shard(i)
                except ShardkitError as exc:
                    check.unread = True
                    check.add(s.name, "", str(exc))
                report.shards += 1
                bar.update(s.bytes)
            check.finish()
            for name, msg in generation_problems(m, **storage_options):
                report.problems.append(Problem(m.split, where + name, "", msg))
    return report


def _verify_selection(url: str, quick: bool, max_pixels: int, strict: bool, so: dict[str, Any]) -> VerifyReport:
    """Verify a selection: its own files (resolving it checks its manifest, bits and parent's fingerprint), the
    parent's shards it reads, and the parent's tables and corrections."""
    report = VerifyReport(splits=1, strict=strict)
    try:
        sel = selection_info(url, **so)
    except ShardkitError as exc:
        report.problems.append(Problem("", MANIFEST_NAME, "", str(exc)))
        return report
    m = sel.manifest
    check = SplitCheck(m, m.base_url.rstrip("/") + "/", quick, max_pixels, report, so)
    for i in sel.shards_read:  # not finish(): the class counts are the whole split's
        try:
            check.shard(i)
        except ShardkitError as exc:
            check.add(m.shards[i].name, "", str(exc))
        report.shards += 1
    for name, msg in generation_problems(m, **so):
        report.problems.append(Problem(m.split, check.where + name, "", msg))
    return report


__all__ = [
    "Found",
    "Incomplete",
    "Problem",
    "SplitInfo",
    "VerifyReport",
    "find_splits",
    "info",
    "split_info",
    "iter_raw",
    "iter_samples",
    "load_manifests",
    "split_warnings",
    "verify",
]
