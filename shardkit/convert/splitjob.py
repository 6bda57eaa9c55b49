"""One split's conversion job: its plan (the pilot, samples per shard, the input fingerprint), the encoding of
its planned shards in submission order and their tars, sample tables and journal records.

See :mod:`shardkit.convert.job` for determinism, resume, scale-out, prefixes and append; the DEST checks of a
split are :class:`~shardkit.convert.splitdest.SplitDest`.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Iterator, Sequence

from shardkit.convert import journal
from shardkit.convert import shards as plan
from shardkit.convert.append import Base, duplicate
from shardkit.convert.encoder import CHUNK, Encoder, Outcome
from shardkit.convert.imageproc import Encoded
from shardkit.convert.options import ConvertConfig, SplitResult
from shardkit.convert.scan.source import SourceFile, SplitSource
from shardkit.convert.splitdest import SplitDest
from shardkit.convert.tablesout import write_rows
from shardkit.convert.targets import (
    IMAGE_SKIPPED,
    TargetOutcome,
    has_targets,
    sample_classes,
    target_fingerprint,
)
from shardkit.errors import ConvertError
from shardkit.format import EncodedSample, index_url, write_tar
from shardkit.format.fields import DEFAULT_FIELDS
from shardkit.format.manifest import SkippedFile
from shardkit.format.tables import sample_row
from shardkit.storage import fs as storage


def _sample(
    item: plan.Item,
    enc: Encoded,
    classes: list[str],
    width: int,
    targets: TargetOutcome | None = None,
    offset: int = 0,
) -> EncodedSample:
    meta = {
        **(item.meta or {}),
        "path": item.relpath,
        **({"class": classes[item.label]} if item.label is not None else {}),
        "width": enc.width,
        "height": enc.height,
    }
    t = targets or TargetOutcome()  # no targets: every target member None
    return EncodedSample(
        plan.make_key(offset + item.index, width), enc.jpeg, item.label, meta, item.labels, item.target, item.text,
        objects=t.objects, mask=t.mask, instances=t.instances,
    )  # fmt: skip


def _listed(f: SourceFile) -> list:
    """What the input fingerprint records of an item (its other fields only where it has them: old plans keep their hash)."""
    extra = {k: v for k, v in (("labels", f.labels), ("target", f.target), ("text", f.text)) if v is not None}
    if has_targets(f):
        extra.update(target_fingerprint(f))
    return [f.relpath, f.label, f.size] + ([dict(f.meta)] if f.meta else []) + ([extra] if extra else [])


def _write_part(url: str, name: str, samples: Iterable[EncodedSample], storage_options: dict) -> journal.Part:
    w = storage.publish(url, lambda f: write_tar(samples, f), **storage_options)
    if w.index is not None and url.endswith(".tar"):  # a shard's sample index, before its journal record
        storage.put_bytes(index_url(url), w.index.to_bytes(), **storage_options)
    return journal.Part(name=name, samples=w.samples, bytes=w.bytes, sha256=w.sha256)


def _part_ok(url: str, part: journal.Part | None, storage_options: dict) -> bool:
    if part is None:
        return True
    if storage.size_of(url, **storage_options) != part.bytes:
        return False
    return storage.sha256_of(url, **storage_options) == (part.bytes, part.sha256)


class SplitJob(SplitDest):
    """Conversion of one split to ``url`` (see :mod:`shardkit.convert.job`)."""

    def __init__(
        self,
        src: SplitSource,
        classes: list[str],
        url: str,
        options: ConvertConfig,
        storage_options: dict,
        encoder: str,
        fields: Sequence[str] = DEFAULT_FIELDS,
        targets: Sequence[str] = (),
        keypoint_names: Sequence[str] = (),
        flip_pairs: Sequence[Sequence[int]] = (),
        src_name: str = "",
        base: Base | None = None,
    ):
        self.src, self.classes, self.url, self.options = src, classes, url, options
        self.base = base  # the split this job appends a generation to (``None``: a conversion)
        self.so = storage_options
        self.items = plan.order(src.files, options.seed, options.shuffle)
        self.cache: dict[int, Outcome] = {}  # pilot outcomes by key index, reused when their shard is encoded
        self.samples = 0  # samples in the shards :meth:`run` wrote or kept
        self.skipped: list[SkippedFile] = []  # the files :meth:`run` found skipped (discovery, its shards)
        listing = [_listed(f) for f in src.files]
        skipped = [SkippedFile(p, r.value, d) for p, r, d in src.skipped]
        self.plan = journal.Plan(
            split=src.name,
            options=options.recorded(),
            classes=classes,
            encoder=encoder,
            input_sha256=journal.json_sha256([listing, [[s.path, s.reason] for s in skipped]]),
            num_items=len(self.items),
            samples_per_shard=0,
            num_planned=0,
            key_width=plan.key_width((base.key_offset if base else 0) + len(self.items)),
            skipped=skipped,
            fields=list(fields),
            targets=list(targets),
            keypoint_names=list(keypoint_names),
            flip_pairs=[list(p) for p in flip_pairs],
            annotations=dict(sorted(src.annotations.items())),
            src=src_name,
            overlap=journal.OVERLAP_RULE if "mask" in fields and any(f.segments is not None for f in src.files) else "",
            generation=base.generation if base else 0,
            key_offset=base.key_offset if base else 0,
            base=base.fingerprint if base else "",
        )

    def ensure_plan(self, encoder: Encoder, task_index: int) -> None:
        """Run the pilot (if the plan is new) and write ``plan.json``."""
        if self.plan.num_planned:
            return
        o = self.options
        sizes: list[int] = []
        if o.shard_bytes is not None:
            pilot = [self.items[p] for p in plan.pilot_positions(len(self.items))]
            for it, (out,) in zip(pilot, encoder.map([[it] for it in pilot])):
                self.cache[it.index] = out
                if out.encoded is not None:
                    sizes.append(
                        plan.tar_size(
                            _sample(
                                it, out.encoded, self.classes, self.plan.key_width, out.targets, self.plan.key_offset
                            )
                        )
                    )
        n = plan.samples_per_shard(len(self.items), o.shard_size, o.shard_bytes, sizes)
        self.plan.samples_per_shard = n
        self.plan.num_planned = len(plan.shard_ranges(len(self.items), n))
        storage.makedirs(journal.journal_url(self.url), **self.so)
        storage.put_bytes(
            journal.journal_url(self.url, journal.PLAN_NAME), self.plan.to_json(), tag=f"task{task_index}", **self.so
        )

    def finished(self, j: int) -> journal.ShardRecord | None:
        """The record of planned shard ``j`` if it and its files check out, else ``None``."""
        rec = journal.read_record(self.url, self.plan.stem, j, **self.so)
        if rec is None or rec.fingerprint != self.plan.fingerprint or rec.index != j:
            return None
        shard_ok = _part_ok(
            storage.join(self.url, journal.shard_path(self.plan.stem, j, self.plan.prefixes)), rec.shard, self.so
        )
        over_ok = _part_ok(
            journal.journal_url(self.url, journal.overflow_name(self.plan.stem, j)), rec.overflow, self.so
        )
        return rec if shard_ok and over_ok else None

    def finish_shard(self, j: int, items: Sequence[plan.Item], outcomes: Iterable[Outcome]) -> journal.ShardRecord:
        """Write planned shard ``j`` (and its overflow) from its items' outcomes, then its record.

        ``outcomes`` (one per item, in order) may arrive while the shard is written: samples go into
        the tar as they come, so the main process writes (and hashes) while the workers encode.
        """
        skipped: list[SkippedFile] = []
        over: list[EncodedSample] = []
        counts = [0] * len(self.classes)
        moved: dict[str, int] = {}  # annotations moved out of "kept" while encoding
        cap = plan.CapSplit(self.options.shard_bytes)
        rows: list[dict] = []  # the per-sample table's rows of the shard's samples, then of its overflow's
        over_rows: list[dict] = []

        def fitting() -> Iterator[EncodedSample]:
            for it, out in zip(items, outcomes):
                if out.encoded is None:
                    skipped.append(SkippedFile(it.relpath, out.reason, out.detail))
                    if it.objects is not None and len(it.objects):
                        moved[IMAGE_SKIPPED] = moved.get(IMAGE_SKIPPED, 0) + len(it.objects)
                    if self.options.strict:
                        raise ConvertError(f"{it.relpath}: skipped ({out.reason}: {out.detail}) and --strict is set")
                    continue
                known = self.base.hashes.get(out.source_sha256) if self.base and out.source_sha256 else None
                if known is not None:  # already in the split: skipped and counted, never stored twice
                    skipped.append(duplicate(it.relpath, known))
                    continue
                s = _sample(it, out.encoded, self.classes, self.plan.key_width, out.targets, self.plan.key_offset)
                row = sample_row(s.key, s.meta, out.source_sha256)
                if out.targets is not None:
                    for r, n in out.targets.moved.items():
                        moved[r] = moved.get(r, 0) + n
                for c in sample_classes(it, out.targets):
                    counts[c] += 1
                if cap.fits(plan.tar_size(s)):
                    rows.append(row)
                    yield s
                else:
                    over_rows.append(row)
                    over.append(s)

        stem = self.plan.stem
        name, oname = journal.shard_path(stem, j, self.plan.prefixes), journal.overflow_name(stem, j)
        samples = fitting()
        first = next(samples, None)  # no tar at all for a shard whose every item is skipped
        shard = (
            _write_part(storage.join(self.url, name), name, itertools.chain([first], samples), self.so)
            if first is not None
            else None
        )
        overflow = _write_part(journal.journal_url(self.url, oname), oname, over, self.so) if over else None
        write_rows(self.url, stem, j, rows, over_rows, self.so)  # before the record that vouches for it
        rec = journal.ShardRecord(
            fingerprint=self.plan.fingerprint,
            index=j,
            shard=shard,
            overflow=overflow,
            class_counts=counts,
            skipped=skipped,
            bytes_in=sum(it.size for it in items),
            fields=list(self.plan.fields),
            targets=list(self.plan.targets),
            keypoint_names=list(self.plan.keypoint_names),
            annotations=dict(sorted(moved.items())),
        )
        storage.put_bytes(journal.journal_url(self.url, journal.record_name(stem, j)), rec.to_json(), **self.so)
        return rec

    def run(self, encoder: Encoder, owned: list[int], quiet: bool) -> SplitResult:
        """Convert the planned shards in ``owned`` that are not finished yet."""
        from tqdm.auto import tqdm

        ranges = plan.shard_ranges(len(self.items), self.plan.samples_per_shard)
        result = SplitResult(split=self.src.name, url=self.url)
        result.add_skipped(self.plan.skipped)
        self.skipped = list(self.plan.skipped)
        todo = []
        for j in owned:
            rec = self.finished(j)
            if rec is None:
                todo.append(j)
            else:
                result.shards_resumed += 1
                result.add_skipped(rec.skipped)
                self.skipped += rec.skipped
                self.samples += rec.samples
        total = sum(ranges[j][1] - ranges[j][0] for j in owned)
        done = total - sum(ranges[j][1] - ranges[j][0] for j in todo)
        needs = {j: [it for it in self.items[slice(*ranges[j])] if it.index not in self.cache] for j in todo}

        def chunks() -> Iterator[list[plan.Item]]:
            for j in todo:
                for c in range(0, len(needs[j]), CHUNK):
                    yield needs[j][c : c + CHUNK]

        # the bar counts every input of the split (a skipped one too) at its encoding rate; the summary's rate is the whole run's
        with tqdm(total=total, initial=done, unit="img", desc=self.src.name, disable=quiet, dynamic_ncols=True) as bar:
            results = encoder.map(chunks())
            fresh: collections.deque[Outcome] = collections.deque()

            def outcomes(items: Sequence[plan.Item]) -> Iterator[Outcome]:
                for it in items:  # pilot outcomes from the cache, the others from the pool, in order
                    if it.index in self.cache:
                        out = self.cache.pop(it.index)
                    else:
                        if not fresh:
                            fresh.extend(next(results))
                        out = fresh.popleft()
                    bar.update(1)  # before the yield: the consumer (zip) stops after the last item, never resuming us
                    yield out

            for j in todo:
                items = self.items[slice(*ranges[j])]
                rec = self.finish_shard(j, items, outcomes(items))
                result.shards_written += 1
                result.converted += rec.samples
                self.samples += rec.samples
                result.add_skipped(rec.skipped)
                self.skipped += rec.skipped
                result.bytes_in += rec.bytes_in
                result.bytes_out += (rec.shard.bytes if rec.shard else 0) + (rec.overflow.bytes if rec.overflow else 0)
        return result
