"""Run a conversion: plan every split, encode planned shards in a process pool, write them, journal them.

Determinism: a planned shard is a pure function of the sorted source list and
the options (:mod:`shardkit.convert.shards`). Workers only encode chunks of
:data:`CHUNK` images; the main process receives the chunks in submission order
and streams each planned shard into its tar as they arrive, so ``--workers``
changes speed and nothing else.

Start-up: the encoding pool (:mod:`shardkit.convert.encoder`) starts before
discovery and imports torch once while the main process discovers SRC. Every
split's plan is written before any shard.

Resume: each planned shard is written to a temporary name and renamed (or
uploaded in one piece), then recorded in the journal
(:mod:`shardkit.convert.journal`). A rerun keeps the shards whose record and
checksum match and redoes the rest; the manifest is written last, by the
single task or by ``shardkit merge``.

Scale-out: task ``i`` of ``K`` converts planned shards ``j % K == i``; every
task computes the same plan (the pilot is deterministic too).

Sources: :func:`~shardkit.convert.scan.discover.discover` turns any kind of SRC
into splits of items and a picklable reader (:mod:`shardkit.convert.scan.source`);
nothing here depends on the kind. Before writing, DEST is checked against SRC
and locked for this task (:mod:`shardkit.convert.dest`).

Prefixes: with ``ConvertConfig.prefixes`` N > 1, planned shard ``j`` is written as
:func:`~shardkit.convert.journal.shard_path` names it, ``<dir j % N>/<split>-<j>.tar``, its sample index
next to it; the record, and so the manifest, holds that name (overflow shards: :mod:`shardkit.convert.merge`).

Append (``ConvertConfig.append``): each split DEST holds gets a new generation (:mod:`shardkit.convert.append`):
the plan carries the generation, the first key number and the fingerprint of the split it extends; its shards,
records and rows are named with the generation's stem (``train-g000001-...``), so nothing of an earlier
generation is overwritten; an image already in the split is skipped as ``already_in_split``; the merge adds the
generation to the split's manifest (:mod:`shardkit.convert.merge`).

Layout: one rule, every split goes to ``DEST/<split>/`` (a plain ImageFolder to
``DEST/train/``), whatever the source (``ScannedSource.nested`` is not consulted). A DEST
holding a conversion directly (``manifest.json`` in DEST: the flat layout older
shardkit wrote for one-split sources) still loads, but converting into it again is
refused unless ``overwrite`` (which removes it).
"""

from __future__ import annotations

import collections
import itertools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from shardkit.convert import journal
from shardkit.convert import shards as plan
from shardkit.convert.append import Base, appending, duplicate, merged_classes, relabelled
from shardkit.convert.dest import (
    check_empty_split,
    check_flat,
    check_overlap,
    clear_generation,
    clear_split,
    dest_lock,
    emptied_split_result,
    empty_split_result,
    split_outputs,
)
from shardkit.convert.encoder import CHUNK, Encoder, Outcome, check_main_guard, start_pool
from shardkit.convert.imageproc import Encoded
from shardkit.convert.merge import finalize_split
from shardkit.convert.options import ConvertConfig, ConvertResult, SplitResult
from shardkit.convert.scan.discover import NOT_CANDIDATES, ScannedSource, discover
from shardkit.convert.scan.source import SourceFile, SplitSource
from shardkit.convert.tablesout import write_rows
from shardkit.convert.targets import (
    IMAGE_SKIPPED,
    TargetOutcome,
    has_targets,
    sample_classes,
    target_fingerprint,
    target_spec,
)
from shardkit.errors import ConvertError
from shardkit.format import EncodedSample, index_url, write_tar
from shardkit.format.fields import DEFAULT_FIELDS
from shardkit.format.manifest import MANIFEST_NAME, SkippedFile, load_manifest
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


class SplitJob:
    """Conversion of one split to ``url`` (see module docstring)."""

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

    def check_dest(self, overwrite: bool) -> None:
        """Refuse a DEST holding a different conversion or shard-named files shardkit did not write (or clear them with ``overwrite``)."""
        if self.base is not None:
            return self._check_append(overwrite)
        if not overwrite and storage.exists(storage.join(self.url, MANIFEST_NAME), **self.so):
            gens = load_manifest(self.url, **self.so).generations
            if len(gens) > 1:
                raise ConvertError(
                    f"{self.url} holds generations 0..{len(gens) - 1} of split {self.src.name}; converting into it "
                    "again would drop the appended ones: pass --append to add a generation, --overwrite to replace "
                    "the split, or choose another DEST"
                )
        existing = journal.read_plan(self.url, **self.so)
        old, ours = existing, existing is not None
        if existing is None and storage.exists(storage.join(self.url, MANIFEST_NAME), **self.so):
            m = load_manifest(self.url, **self.so)
            old = journal.Plan(
                split=m.split,
                options=m.options,
                classes=m.classes,
                encoder=m.options.get("encoder", ""),
                input_sha256=m.options.get("input_sha256", ""),
                num_items=-1,
                samples_per_shard=0,
                num_planned=0,
                key_width=0,
                fields=list(m.fields),
                targets=list(m.targets),
                keypoint_names=list(m.keypoint_names),
                flip_pairs=[list(p) for p in m.flip_pairs],
                overlap=m.options.get("overlap", ""),
            )
            if m.options.get("fingerprint") == self.plan.fingerprint:
                old, ours = None, True
        elif existing is not None and existing.fingerprint == self.plan.fingerprint:
            old = None
        if old is not None and not overwrite:
            raise ConvertError(
                f"{self.url} already holds a different conversion ({'; '.join(journal.differences(old, self.plan))}); "
                "pass --overwrite to replace it, or choose another DEST"
            )
        if not ours and old is None and not overwrite:
            foreign = self._shard_files()
            if foreign:
                raise ConvertError(
                    f"{storage.join(self.url, foreign[0])}: a file named like a shard of this conversion that shardkit did not "
                    f"write ({len(foreign)} such files in DEST); pass --overwrite to replace them, or choose another DEST"
                )
        if old is not None or (existing is None and overwrite):
            self._clear()
        elif existing is not None:
            self.plan = existing

    def _check_append(self, overwrite: bool) -> None:
        """An append's DEST check: resume this append's own unfinished generation; refuse (or with ``overwrite``
        discard) an unfinished append of other sources or options; never touch a finished generation."""
        existing = journal.read_plan(self.url, **self.so)
        if existing is not None and existing.fingerprint == self.plan.fingerprint:
            self.plan = existing
            return
        unfinished = existing is not None and existing.generation >= self.plan.generation
        stem = self.plan.stem
        if unfinished and not overwrite:
            assert existing is not None
            raise ConvertError(
                f"{self.url}: an unfinished append (generation {existing.generation}, SRC {existing.src or '(not recorded)'}) "
                f"is here and differs ({'; '.join(journal.differences(existing, self.plan))}): rerun that command to "
                "finish it, or pass --overwrite to discard it (the finished generations stay)"
            )
        foreign = split_outputs(self.url, stem, self.so)
        if foreign and not unfinished and not overwrite:
            raise ConvertError(
                f"{storage.join(self.url, foreign[0])}: a file named like a shard of generation "
                f"{self.plan.generation}, which the manifest does not list ({len(foreign)} such files); pass "
                "--overwrite to replace them, or remove them"
            )
        clear_generation(self.url, stem, self.so)

    def _shard_files(self) -> list[str]:
        return split_outputs(self.url, self.src.name, self.so)

    def _clear(self) -> None:
        clear_split(self.url, self.src.name, self.so)

    def check_owner(self, wrote: int) -> None:
        """:class:`ConvertError` if DEST's plan is no longer this conversion's (another conversion, started at the
        same time with other sources or options, wrote its own): the shards this task wrote (``wrote``) would never
        be merged. The message names the conversion that owns DEST and what to rerun."""
        now = journal.read_plan(self.url, **self.so)
        if now is not None and now.fingerprint == self.plan.fingerprint:
            return
        owner = (
            "no conversion plan is there now"
            if now is None
            else f"it now holds conversion {now.fingerprint[:12]} of SRC {now.src or '(not recorded)'}, which differs: "
            + "; ".join(journal.differences(self.plan, now))
        )
        raise ConvertError(
            f"{self.url}: another conversion took DEST while this task ran ({owner}); this task's "
            f"{wrote} shards (conversion {self.plan.fingerprint[:12]} of SRC {self.plan.src}) will not be merged: "
            "run the tasks of one conversion only: rerun every task of the one you want with --overwrite, "
            "or convert into another DEST"
        )

    def drop(self, result: SplitResult, root: str) -> SplitResult:
        """Remove what :meth:`run` wrote for a split none of whose items could be read (relative paths read below
        ``root``); its result, not written."""
        clear_split(self.url, self.src.name, self.so)
        if storage.is_local(self.url) and storage.list_dir(self.url, **self.so) == ([], []):
            storage.remove(self.url, recursive=True, **self.so)
        return emptied_split_result(result.split, result.url, self.skipped, root)

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


def convert(
    src: Any,
    dest: str,
    options: ConvertConfig | None = None,
    *,
    workers: int | None = None,
    num_tasks: int = 1,
    task_index: int = 0,
    overwrite: bool = False,
    quiet: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> ConvertResult:
    """Convert ``src`` into WebDataset shards under ``dest``.

    Args:
        src: a local folder of class folders (or of split folders, or any folder with
            ``options.source.label_regex``); a ``.csv``/``.tsv``/``.jsonl`` listing (path or
            URL); WebDataset tars (a ``.tar`` path, URL or brace pattern); ``"hf:PATH"`` or a
            ``datasets.Dataset``/``DatasetDict`` (see :func:`shardkit.convert.scan.discover.discover`).
        dest: local path or fsspec URL; every split goes to ``dest/<split>/`` (a plain ImageFolder:
            ``dest/train/``, see ``options.split``).
        options: what to produce (:class:`ConvertConfig`); the same options
            and input always give byte-identical output.
        workers: encoding processes (default: all cores); changes speed only.
        num_tasks: split the work over this many independent tasks (machines).
        task_index: which task this is, ``0 <= task_index < num_tasks``; with
            more than one task no manifest is written: run :func:`shardkit.convert.merge`.
        overwrite: replace a different conversion found at ``dest``.
        quiet: no progress bar.
        storage_options: fsspec options for ``dest`` (credentials, endpoint).

    Returns:
        what was done per split (manifests when complete), sorted by split name; a split with no
        sample is not written and comes back with ``written=False``, its skips and why it is empty.

    Raises:
        ConvertError: bad SRC, no split with a sample (nothing is written), DEST holding another
            conversion (or an older flat one), a skip under ``strict``, a script calling this with
            ``workers > 1`` outside ``if __name__ == "__main__":``.
        StorageError: DEST cannot be written (the work done so far is kept and a rerun resumes).
    """
    t0 = time.monotonic()
    options = options or ConvertConfig()
    so = dict(storage_options or {})
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if workers < 1:
        raise ValueError("workers must be at least 1")
    plan.task_shards(0, num_tasks, task_index)  # validates
    if workers > 1:
        check_main_guard()
    with start_pool(workers) as pool:  # first: its start-up overlaps discovery
        source = _discover(src, dest, options, so)
        empty = [empty_split_result(s, dest, options) for s in source.splits if not s.files]
        if len(empty) == len(source.splits):  # decided before anything is written
            raise ConvertError(
                f"{source.root}: no split has a sample to convert: "
                + "; ".join(f"{e.split} ({e.empty})" for e in empty)
                + "; nothing written"
            )
        encoder = Encoder(source.reader, options.image, pool, workers, target_spec(source))
        version = encoder.version()
        bases = appending(dest, source, options, so) if options.append else {}
        jobs = []
        for s in source.splits:
            if not s.files:
                continue
            base = bases.get(s.name)
            classes = merged_classes(base.manifest.classes, source.classes) if base else source.classes
            jobs.append(
                SplitJob(
                    relabelled(s, source.classes, classes) if base else s,
                    classes,
                    storage.join(dest, s.name),
                    options,
                    so,
                    version,
                    source.fields,
                    source.targets,
                    source.keypoint_names,
                    source.flip_pairs,
                    src if isinstance(src, str) else str(source.root),
                    base,
                )
            )
        results = list(empty)
        fresh_dest = storage.is_local(dest) and not storage.exists(dest, **so)
        with dest_lock(dest, task_index):
            check_flat(dest, overwrite, so)
            for e in empty if not options.append else []:  # an append leaves a split it has nothing for
                check_empty_split(e.url, e.split, e.empty, overwrite, so)
            for job in jobs:
                job.check_dest(overwrite)
            for job in jobs:  # every split's plan.json before any shard: `shardkit verify` then sees splits not begun
                job.ensure_plan(encoder, task_index)
            for job in jobs:
                job.check_owner(0)
                owned = plan.task_shards(job.plan.num_planned, num_tasks, task_index)
                res = job.run(encoder, owned, quiet)
                job.check_owner(res.shards_written)
                if num_tasks == 1 and not job.samples and job.base is None:  # every item skipped: not written
                    res = job.drop(res, source.reader.root or str(source.root))
                elif num_tasks == 1:
                    res.manifest = finalize_split(job.url, **so)
                results.append(res)
    if num_tasks == 1 and not any(r.written for r in results):
        if fresh_dest and storage.list_dir(dest, **so) == ([], []):  # DEST was made by this run and holds nothing
            storage.remove(dest, recursive=True, **so)
        raise ConvertError(
            f"{source.root}: no split has a sample to convert: "
            + "; ".join(f"{r.split} ({r.empty})" for r in sorted(results, key=lambda r: r.split))
            + "; nothing written"
        )
    results.sort(key=lambda r: r.split)
    return ConvertResult(splits=results, seconds=time.monotonic() - t0, notes=list(source.notes))


def _discover(src: Any, dest: str, options: ConvertConfig, so: dict) -> ScannedSource:
    """:func:`discover` ``src``, refusing a DEST that overlaps it and, with ``strict``, any file skipped at discovery."""
    source = discover(src, options, **so)
    if source.local_dir is not None:
        check_overlap(source.local_dir, dest, dest_in_src=source.walked)
    for s in source.splits:
        failed = [(p, r, d) for p, r, d in s.skipped if r not in NOT_CANDIDATES]
        if options.strict and failed:
            p, r, d = failed[0]
            raise ConvertError(f"{p}: skipped ({r.value}: {d}) and --strict is set")
    return source
