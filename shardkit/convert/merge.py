"""Assemble a split's manifest from its journal: the last step of a conversion.

A single-task ``convert`` calls :func:`finalize_split` itself; after a
multi-task conversion ``shardkit merge DEST`` does it once every task is
done. Finalising checks that every planned shard has a record and that every
recorded shard is present with its recorded size, packs the overflow samples
(see :mod:`shardkit.convert.shards`) into the shards numbered after the planned
ones (spread over the prefix directories by their number, like planned shards),
writes the split's key table and per-sample table (:mod:`shardkit.format.tables`, from the rows the journal
kept: :mod:`shardkit.convert.tablesout`) and writes ``manifest.json`` last. It is idempotent: running it again rewrites
the same bytes.

An append's plan (``generation`` > 0) is finalised into the split's existing manifest instead: the split must still
be the one the append was planned on (its fingerprint), the generation's tables are its own
(``<split>-g<N>.keys``), and :func:`~shardkit.convert.append.appended_manifest` adds the generation after the
earlier shards; a second merge finds the generation there and changes nothing; an append that found nothing new
leaves the split as it was and removes its plan.
"""

from __future__ import annotations

import functools
import io
import json
from typing import Any

from shardkit import __version__
from shardkit.convert import journal
from shardkit.convert import shards as plan
from shardkit.convert.append import appended_manifest
from shardkit.convert.dest import clear_generation, tidy_prefix_dirs
from shardkit.convert.skips import SkipReason
from shardkit.convert.tablesout import split_rows
from shardkit.errors import ConvertError
from shardkit.format import INDEX_FORMAT, EncodedSample, index_url, write_tar
from shardkit.format.manifest import Manifest, ShardInfo, load_manifest, manifest_url
from shardkit.format.prefixes import prefix_of
from shardkit.format.sample import SampleRule
from shardkit.format.snapshot.pin import fingerprint
from shardkit.format.tablebuild import write_tables
from shardkit.storage import fs as storage

_SHOW = 10


def _missing_message(url: str, what: str, names: list[str]) -> str:
    shown = ", ".join(names[:_SHOW]) + (f" and {len(names) - _SHOW} more" if len(names) > _SHOW else "")
    return f"{url}: {len(names)} {what}: {shown}"


def read_samples(data: bytes, rule: SampleRule | None = None) -> list[EncodedSample]:
    """The samples of a shard written by :func:`shardkit.format.write_shard`, in order, with the fields of ``rule``
    (default: image and label)."""
    from shardkit.ops.verify import iter_raw

    return [
        EncodedSample(
            s.key,
            s.jpeg or b"",
            s.label,
            json.loads(s.meta_bytes),
            s.labels,
            s.target,
            s.text,
            s.objects,
            s.mask,
            s.instances,
        )
        for s in iter_raw(io.BytesIO(data), rule=rule)
    ]


def finalize_split(split_url: str, **storage_options: Any) -> Manifest:
    """Check the journal of ``split_url``, write the overflow shards and the manifest; return the manifest.

    Raises:
        ConvertError: no conversion there, or planned shards not converted yet (listed).
    """
    p = journal.read_plan(split_url, **storage_options)
    if p is None or not p.num_planned:
        raise ConvertError(
            f"{split_url}: nothing to merge (no {journal.JOURNAL_DIR}/{journal.PLAN_NAME}); run 'shardkit convert' first"
        )
    if p.generation:
        done = appended_already(split_url, p, storage_options)
        if done is not None:
            return done
    records = [journal.read_record(split_url, p.stem, j, **storage_options) for j in range(p.num_planned)]
    _check_records(split_url, p, records, storage_options)
    if not any(r.samples for r in records if r) and p.generation:  # an append with nothing new: the split stays
        clear_generation(split_url, p.stem, storage_options)
        storage.remove(journal.journal_url(split_url, journal.PLAN_NAME), **storage_options)
        return load_manifest(split_url, **storage_options)
    if not any(r.samples for r in records if r):
        files = sorted(p.skipped + [s for r in records if r for s in r.skipped], key=lambda s: s.path)
        first = next((f for f in files if f.reason == "missing_file"), files[0] if files else None)
        raise ConvertError(
            f"{split_url}: split {p.split} has no sample: its {len(files)} items were all skipped"
            + (f" (e.g. {first.path}: {first.detail})" if first else "")
            + "; nothing merged: fix the source (is --root right?) and convert again with --overwrite"
        )
    shards = [r.shard_info() for r in records if r and r.shard]
    overflow, overflow_keys = _write_overflow(split_url, p, records, shards, storage_options)
    counts = [sum(col) for col in zip(*(r.class_counts for r in records if r))] if records else []
    skipped = sorted(p.skipped + [s for r in records if r for s in r.skipped], key=lambda s: s.path)
    options = {
        **p.options,
        "samples_per_shard": p.samples_per_shard,
        "encoder": p.encoder,
        "input_sha256": p.input_sha256,
        "fingerprint": p.fingerprint,
        **({"overlap": p.overlap} if p.overlap else {}),
    }
    listed = _listed(split_url, {prefix_of(s.name) for s in shards if s is not None}, storage_options)
    indexed = all(index_url(s.name) in listed for s in shards if s is not None)  # an older shardkit's have none
    rows = split_rows(split_url, p.stem, [r for r in records if r], overflow, overflow_keys, storage_options)
    # the tables before the manifest that names them
    tables = write_tables(split_url, p.split, rows, p.generation, **storage_options)
    m = Manifest(
        split=p.split,
        classes=list(p.classes),
        shards=[s for s in shards if s is not None],
        options=options,
        class_counts=counts,
        skipped=skipped,
        shardkit_version=__version__,
        sample_index=INDEX_FORMAT if indexed else "",
        fields=list(p.fields),
        targets=list(p.targets),
        keypoint_names=list(p.keypoint_names),
        flip_pairs=[list(x) for x in p.flip_pairs],
        annotations=annotations_of(p, records),
        tables=tables,
    )
    if p.generation:
        m = appended_manifest(
            _base_manifest(split_url, p, storage_options),
            m,
            generation=p.generation,
            duplicates=sum(s.reason == SkipReason.ALREADY_IN_SPLIT.value for s in skipped),
        )
    m.validate()
    m.url = manifest_url(split_url)
    storage.put_bytes(m.url, m.to_json().encode("utf-8"), **storage_options)  # like save_manifest, crash-litter free
    if p.prefixes > 1:
        tidy_prefix_dirs(split_url, storage_options)  # the empty work folders local writes left in them
    return m


def _check_records(
    split_url: str, p: journal.Plan, records: list[journal.ShardRecord | None], storage_options: dict
) -> None:
    """Refuse to merge unless every planned shard was written by this plan's conversion with its fields and
    keypoints, and every shard file (and overflow file) is there with its recorded size; the message lists them."""
    other = next((r for r in records if r is not None and (r.fields, r.targets) != (p.fields, p.targets)), None)
    if other is not None:
        raise ConvertError(
            f"{split_url}: planned shard {other.index} stores fields {other.fields} (targets {other.targets}) but the plan "
            f"says {p.fields} (targets {p.targets}); every task must run with the same options: rerun that task"
        )
    other = next((r for r in records if r is not None and r.keypoint_names != p.keypoint_names), None)
    if other is not None:
        raise ConvertError(
            f"{split_url}: planned shard {other.index} stores keypoints {other.keypoint_names} but the plan says "
            f"{p.keypoint_names}; every task must run with the same options: rerun that task"
        )
    foreign = [
        journal.shard_path(p.stem, j, p.prefixes) for j, r in enumerate(records) if r and r.fingerprint != p.fingerprint
    ]
    if foreign:
        others = sorted({r.fingerprint[:12] for r in records if r and r.fingerprint != p.fingerprint})
        raise ConvertError(
            _missing_message(
                split_url, f"of {p.num_planned} planned shards were written by another conversion", foreign
            )
            + f" ({', '.join(others)}), not by the one that owns DEST ({p.fingerprint[:12]}, SRC {p.src or '(not recorded)'}, "
            "whose plan this folder holds): two conversions ran into one DEST; rerun every task of the one you want "
            "with --overwrite (or into another DEST), then merge again"
        )
    missing = [journal.shard_path(p.stem, j, p.prefixes) for j, r in enumerate(records) if r is None]
    if missing:
        raise ConvertError(
            _missing_message(split_url, f"of {p.num_planned} planned shards are not converted yet", missing)
            + "; planned shard j belongs to task j % num_tasks: rerun those tasks, then merge again"
        )
    lost = []
    for r in records:
        assert r is not None
        if r.shard and storage.size_of(storage.join(split_url, r.shard.name), **storage_options) != r.shard.bytes:
            lost.append(r.shard.name)
        if (
            r.overflow
            and storage.size_of(journal.journal_url(split_url, r.overflow.name), **storage_options) != r.overflow.bytes
        ):
            lost.append(f"{journal.JOURNAL_DIR}/{r.overflow.name}")
    if lost:
        raise ConvertError(
            _missing_message(split_url, "shard files are missing or have the wrong size", lost)
            + "; rerun the conversion (it redoes exactly these)"
        )


def _write_overflow(
    split_url: str,
    p: journal.Plan,
    records: list[journal.ShardRecord | None],
    shards: list[ShardInfo | None],
    storage_options: dict,
) -> tuple[list[EncodedSample], list[list[str]]]:
    """Pack the samples the planned shards could not hold into shards after the planned ones (appended to
    ``shards``); the overflow samples and each new shard's keys."""
    overflow: list[EncodedSample] = []
    rule = SampleRule(tuple(p.fields), len(p.classes) or None, len(p.targets) or None, len(p.keypoint_names))
    for r in records:
        if r and r.overflow:
            overflow += read_samples(
                storage.read_bytes(journal.journal_url(split_url, r.overflow.name), **storage_options), rule
            )
    overflow_keys: list[list[str]] = []
    sizes = [plan.tar_size(s) for s in overflow]
    shard_size, shard_bytes = p.options.get("shard_size"), p.options.get("shard_bytes")
    for g, (a, b) in enumerate(plan.pack(sizes, shard_size, shard_bytes)):
        name = journal.shard_path(p.stem, p.num_planned + g, p.prefixes)  # spread by its index, like a planned one
        batch = overflow[a:b]
        overflow_keys.append([s.key for s in batch])
        w = storage.publish(storage.join(split_url, name), functools.partial(write_tar, batch), **storage_options)
        if w.index is not None:
            storage.put_bytes(index_url(storage.join(split_url, name)), w.index.to_bytes(), **storage_options)
        shards.append(ShardInfo(name=name, samples=w.samples, bytes=w.bytes, sha256=w.sha256))
    return overflow, overflow_keys


def appended_already(split_url: str, p: journal.Plan, storage_options: dict) -> "Manifest | None":
    """The split's manifest if it already holds the generation plan ``p`` appends (a second merge), else ``None``."""
    m = load_manifest(split_url, **storage_options)
    gens = m.generations
    if len(gens) > p.generation and gens[p.generation].options.get("fingerprint") == p.fingerprint:
        return m
    return None


def _base_manifest(split_url: str, p: journal.Plan, storage_options: dict) -> Manifest:
    """The manifest plan ``p`` appends to, checked to be the one it was planned on."""
    m = load_manifest(split_url, **storage_options)
    if fingerprint(m) != p.base:
        raise ConvertError(
            f"{split_url}: the split changed since this append was planned (another append or a correction finished "
            "first); run the append command again with --overwrite to plan it on the split as it is now"
        )
    return m


def _listed(split_url: str, dirs: set[str], storage_options: dict) -> frozenset[str]:
    """The files in ``split_url`` and its sub-folders ``dirs`` (``""``: the folder itself), as paths relative to it."""
    out: set[str] = set()
    for d in sorted(dirs):
        files = storage.list_dir(storage.join(split_url, d) if d else split_url, **storage_options)[1]
        out.update(f"{d}/{n}" if d else n for n in files)
    return frozenset(out)


def annotations_of(p: journal.Plan, records: "list[journal.ShardRecord | None]") -> dict[str, int]:
    """The split's annotation counts: the source's (``p.annotations``) with every record's encode-time moves
    (:func:`shardkit.convert.targets.settle`); ``{}`` for a source without annotations."""
    from shardkit.convert.targets import settle

    if not p.annotations:
        return {}
    moved: dict[str, int] = {}
    for r in records:
        for k, n in (r.annotations if r is not None else {}).items():
            moved[k] = moved.get(k, 0) + n
    return settle(p.annotations, moved)


def split_urls(dest: str, **storage_options: Any) -> list[str]:
    """The split folders of a dataset: ``dest`` itself if it holds a conversion, else its sub-folders that do."""
    if storage.exists(journal.journal_url(dest, journal.PLAN_NAME), **storage_options):
        return [dest]
    dirs, _ = storage.list_dir(dest, **storage_options)
    return [
        storage.join(dest, d)
        for d in dirs
        if storage.exists(journal.journal_url(storage.join(dest, d), journal.PLAN_NAME), **storage_options)
    ]


def merge(dest: str, **storage_options: Any) -> list[Manifest]:
    """Finish a multi-task conversion: check every split under ``dest`` and write the manifests.

    Raises:
        ConvertError: nothing converted under ``dest``, or shards missing (listed with their task rule).
    """
    urls = split_urls(dest, **storage_options)
    if not urls:
        raise ConvertError(
            f"{dest}: no conversion found (no {journal.JOURNAL_DIR}/{journal.PLAN_NAME} here or in its sub-folders)"
        )
    return [finalize_split(u, **storage_options) for u in urls]
