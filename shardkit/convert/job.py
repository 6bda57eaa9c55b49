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

Sources: :func:`~shardkit.convert.scan.discover` turns any kind of SRC
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

import os
import time
from collections.abc import Iterable
from typing import Any

from shardkit.convert import shards as plan
from shardkit.convert.append import Base, appending, merged_classes, relabelled
from shardkit.convert.dest import check_empty_split, check_flat, check_overlap, dest_lock, empty_split_result
from shardkit.convert.encoder import Encoder, check_main_guard, start_pool
from shardkit.convert.merge import finalize_split
from shardkit.convert.options import ConvertConfig, ConvertResult, SplitResult
from shardkit.convert.scan import discover
from shardkit.convert.scan.folders import NOT_CANDIDATES
from shardkit.convert.scan.source import ScannedSource
from shardkit.convert.splitjob import SplitJob
from shardkit.convert.targets import target_spec
from shardkit.errors import ConvertError
from shardkit.storage import fs as storage


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
            ``datasets.Dataset``/``DatasetDict`` (see :func:`shardkit.convert.scan.discover`).
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
    workers = _workers(workers, num_tasks, task_index)
    with start_pool(workers) as pool:  # first: its start-up overlaps discovery
        source = _discover(src, dest, options, so)
        empty = [empty_split_result(s, dest, options) for s in source.splits if not s.files]
        if len(empty) == len(source.splits):  # decided before anything is written
            raise _nothing_to_convert(source.root, empty)
        encoder = Encoder(source.reader, options.image, pool, workers, target_spec(source))
        version = encoder.version()
        bases = appending(dest, source, options, so) if options.append else {}
        jobs = _split_jobs(src, dest, source, options, so, version, bases)
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
            results += _run_jobs(
                jobs, encoder, num_tasks, task_index, quiet, source.reader.root or str(source.root), so
            )
    if num_tasks == 1 and not any(r.written for r in results):
        if fresh_dest and storage.list_dir(dest, **so) == ([], []):  # DEST was made by this run and holds nothing
            storage.remove(dest, recursive=True, **so)
        raise _nothing_to_convert(source.root, sorted(results, key=lambda r: r.split))
    results.sort(key=lambda r: r.split)
    return ConvertResult(splits=results, seconds=time.monotonic() - t0, notes=list(source.notes))


def _workers(workers: int | None, num_tasks: int, task_index: int) -> int:
    """The encoding processes to start (``None``: one per core this process may use), after checking the
    task numbers and, for a pool, that a script guards its call with ``if __name__ == "__main__":``."""
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if workers < 1:
        raise ValueError("workers must be at least 1")
    plan.task_shards(0, num_tasks, task_index)  # validates
    if workers > 1:
        check_main_guard()
    return workers


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


def _split_jobs(
    src: Any, dest: str, source: ScannedSource, options: ConvertConfig, so: dict, version: str, bases: dict[str, Base]
) -> list[SplitJob]:
    """A :class:`SplitJob` per split of ``source`` with a file (an append's relabelled to its split's classes)."""
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
    return jobs


def _nothing_to_convert(root: object, splits: Iterable[SplitResult]) -> ConvertError:
    """The error for a source none of whose ``splits`` has a sample: each split and why it is empty."""
    return ConvertError(
        f"{root}: no split has a sample to convert: "
        + "; ".join(f"{r.split} ({r.empty})" for r in splits)
        + "; nothing written"
    )


def _run_jobs(
    jobs: list[SplitJob], encoder: Encoder, num_tasks: int, task_index: int, quiet: bool, root: str, so: dict
) -> list[SplitResult]:
    """Run each split job's shards of this task; with one task, finish each split (its manifest) or drop it when
    none of its items could be read (relative paths read below ``root``)."""
    results = []
    for job in jobs:
        job.check_owner(0)
        owned = plan.task_shards(job.plan.num_planned, num_tasks, task_index)
        res = job.run(encoder, owned, quiet)
        job.check_owner(res.shards_written)
        if num_tasks == 1 and not job.samples and job.base is None:  # every item skipped: not written
            res = job.drop(res, root)
        elif num_tasks == 1:
            res.manifest = finalize_split(job.url, **so)
        results.append(res)
    return results
