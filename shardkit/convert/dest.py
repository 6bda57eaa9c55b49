"""Guards on DEST before a conversion writes to it: no overlap with SRC, one writer per task.

* :func:`check_overlap`: a local DEST inside SRC (or SRC inside DEST) is
  refused. Discovering DEST's shards as a class or split on the next run
  would relabel the data, so this is refused rather than guessed around.
  Tars given by name may hold DEST below them, but not lie inside DEST
  (``--overwrite`` would delete them).
* :func:`check_flat`: a DEST holding a conversion directly (a ``manifest.json``
  or a conversion journal in DEST itself: the flat layout older shardkit wrote
  for one-split sources) is refused, or removed with ``overwrite``; every
  conversion now writes ``DEST/<split>/``.
* :func:`split_outputs` / :func:`clear_split`: a split's output files are its shards and sample indexes in
  its folder and in every folder shaped like a prefix directory (:mod:`shardkit.format.prefixes`), whatever
  ``--prefixes`` wrote them: so a file shardkit did not write is refused there too, and ``--overwrite`` with
  another ``--prefixes`` leaves no stale shard behind.
* :func:`dest_lock`: while a conversion task runs, it holds an exclusive
  ``flock`` on ``DEST/.shardkit-task<I>.lock``, a file holding its pid and
  host. A second conversion of the same task index (a rerun started while the
  first still runs) is refused with the holder's pid and host. The kernel
  drops the lock when its process dies, so a lock file left by a killed run is
  stale by construction and simply taken over. Tasks of one multi-task
  conversion (different ``--task-index``) run side by side as designed.
  Object stores have no locks: there the rule is "one run per task index at a
  time", which a scheduler's job array gives (docs/guides/convert.md: "Many machines").
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ConvertConfig, SplitResult
from shardkit.errors import ConvertError
from shardkit.format.generations import is_corrections_name
from shardkit.format.index import INDEX_SUFFIX
from shardkit.format.manifest import SkippedFile
from shardkit.format.prefixes import is_prefix_dir
from shardkit.format.tables import is_table_name
from shardkit.storage import fs as storage

if TYPE_CHECKING:
    from shardkit.convert.scan.source import SplitSource


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_overlap(src: str, dest: str, *, dest_in_src: bool = True) -> None:
    """:class:`ConvertError` if ``dest`` is ``src``, inside it (unless not ``dest_in_src``: for sources that are
    listed, not walked), or contains it (local paths only)."""
    if not storage.is_local(dest):
        return
    s, d = os.path.realpath(src), os.path.realpath(storage.local_path(dest))
    if dest_in_src and _inside(d, s):
        raise ConvertError(
            f"{dest}: DEST is inside SRC {src} (its shards would be read as input on the next run); choose a DEST outside SRC"
        )
    if _inside(s, d):
        raise ConvertError(f"{src}: SRC is inside DEST {dest}; choose a DEST that does not contain SRC")


def check_flat(dest: str, overwrite: bool, storage_options: dict) -> None:
    """Refuse (or with ``overwrite`` remove) a conversion written directly in ``dest`` (see module docstring)."""
    from shardkit.convert import journal
    from shardkit.format.manifest import MANIFEST_NAME

    so = storage_options
    manifest, plan_json = storage.join(dest, MANIFEST_NAME), journal.journal_url(dest, journal.PLAN_NAME)
    has_manifest, has_plan = storage.exists(manifest, **so), storage.exists(plan_json, **so)
    if not (has_manifest or has_plan):
        return
    if not overwrite:
        what = MANIFEST_NAME if has_manifest else f"{journal.JOURNAL_DIR}/{journal.PLAN_NAME}"
        raise ConvertError(
            f"{dest}: DEST holds a conversion in the old flat layout ({what} directly in DEST); conversions now write "
            "DEST/<split>/: choose another DEST, or pass --overwrite to replace it (the old dataset still loads from DEST)"
        )
    split = _flat_split(dest, has_plan, so)
    storage.remove(journal.journal_url(dest), recursive=True, **so)
    storage.remove(manifest, **so)
    for name in storage.list_dir(dest, **so)[1]:  # its shards and their sample indexes, as SplitJob names them
        if name.startswith(f"{split}-") and name.endswith((".tar", INDEX_SUFFIX)):
            storage.remove(storage.join(dest, name), **so)


def is_split_output(split: str, name: str) -> bool:
    """Whether file ``name`` in the folder of ``split`` (or in one of its prefix directories) is named like its
    output: a shard, its sample index, or a key or per-sample table."""
    return (
        (name.startswith(f"{split}-") and name.endswith((".tar", INDEX_SUFFIX)))
        or is_table_name(split, name)
        or is_corrections_name(split, name)
    )


def split_outputs(url: str, split: str, storage_options: dict, *, temporary: bool = False) -> list[str]:
    """The files in the folder ``url`` of ``split`` named like its output, relative to ``url``: in the folder
    itself and in every folder shaped like a prefix directory (``ac72/train-000000.tar``, whatever ``--prefixes``
    wrote them); with ``temporary`` also the temporary files of an interrupted write (``.train-...``)."""

    def ours(name: str) -> bool:
        return is_split_output(split, name) or (temporary and name.startswith(f".{split}-"))

    dirs, files = storage.list_dir(url, **storage_options)
    out = [n for n in files if ours(n)]
    for d in dirs:
        if is_prefix_dir(d):
            out += [f"{d}/{n}" for n in storage.list_dir(storage.join(url, d), **storage_options)[1] if ours(n)]
    return out


def clear_split(url: str, split: str, storage_options: dict) -> None:
    """Remove the conversion of ``split`` in its folder ``url``: journal, manifest, shards, indexes, temporary
    files, in the folder and in its prefix directories (which are removed once empty)."""
    from shardkit.convert import journal
    from shardkit.format.manifest import MANIFEST_NAME

    so = storage_options
    storage.remove(journal.journal_url(url), recursive=True, **so)
    storage.remove(storage.join(url, MANIFEST_NAME), **so)
    for name in split_outputs(url, split, so, temporary=True):
        storage.remove(storage.join(url, *name.split("/")), **so)
    tidy_prefix_dirs(url, so, work=True)


def clear_generation(url: str, stem: str, storage_options: dict) -> None:
    """Remove what an unfinished append wrote for the generation whose names start with ``stem``
    (:func:`~shardkit.convert.journal.generation_stem`): its shards, indexes, tables, corrections file and journal
    files; the finished generations' files and the manifest stay."""
    from shardkit.convert import journal

    so = storage_options
    names = split_outputs(url, stem, so, temporary=True)
    names += [n for n in storage.list_dir(url, **so)[1] if n.startswith(f"{stem}.")]  # its tables, corrections
    for name in names:
        storage.remove(storage.join(url, *name.split("/")), **so)
    if storage.exists(journal.journal_url(url), **so):
        for n in storage.list_dir(journal.journal_url(url), **so)[1]:
            if n.startswith((f"{stem}-", f".{stem}-")):
                storage.remove(journal.journal_url(url, n), **so)


def tidy_prefix_dirs(url: str, storage_options: dict, *, work: bool = False) -> None:
    """Remove the empty work folders (``<prefix dir>/_shardkit/``, left by local writes) of the prefix directories
    of the split folder ``url`` (with ``work``: whatever they hold), then the prefix directories left empty.
    Local folders only: on an object store a folder is a key prefix, gone with its last object."""
    from shardkit.convert import journal

    if not storage.is_local(url):
        return
    so = storage_options
    for d in storage.list_dir(url, **so)[0]:
        if not is_prefix_dir(d):
            continue
        pdir = storage.join(url, d)
        wdir = journal.journal_url(pdir)
        if work or storage.list_dir(wdir, **so) == ([], []):
            storage.remove(wdir, recursive=True, **so)
        if storage.list_dir(pdir, **so) == ([], []):
            storage.remove(pdir, recursive=True, **so)


def check_empty_split(url: str, split: str, empty: str, overwrite: bool, storage_options: dict) -> None:
    """Refuse (or with ``overwrite`` remove) an earlier conversion in the folder ``url`` of a split that has no
    sample now (``empty`` says why)."""
    from shardkit.convert import journal
    from shardkit.format.manifest import MANIFEST_NAME

    so = storage_options
    if not (
        storage.exists(storage.join(url, MANIFEST_NAME), **so)
        or storage.exists(journal.journal_url(url, journal.PLAN_NAME), **so)
    ):
        return
    if not overwrite:
        raise ConvertError(
            f"{url}: holds an earlier conversion of split {split}, which has no sample now ({empty}); "
            "pass --overwrite to remove it, or choose another DEST"
        )
    clear_split(url, split, so)


def _flat_split(dest: str, has_plan: bool, so: dict) -> str:
    """The split name of the flat conversion in ``dest`` (from its plan, else its manifest)."""
    from shardkit.convert import journal
    from shardkit.errors import ShardkitError
    from shardkit.format.manifest import load_manifest

    try:
        p = journal.read_plan(dest, **so) if has_plan else None
        return p.split if p is not None else load_manifest(dest, **so).split
    except ShardkitError as exc:
        raise ConvertError(
            f"{dest}: cannot read the flat conversion in DEST to replace it ({exc}); remove it by hand"
        ) from None


def lock_name(task_index: int) -> str:
    """File name of the lock of task ``task_index`` in DEST."""
    return f".shardkit-task{task_index}.lock"


def _holder(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return f"pid {d['pid']}, host {d['host']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid ?, host ?"


@contextlib.contextmanager
def dest_lock(dest: str, task_index: int = 0) -> Iterator[None]:
    """Hold task ``task_index``'s lock on a local ``dest`` (no-op for object storage); see module docstring.

    Raises:
        ConvertError: another live process holds it (naming its pid and host).
    """
    if not storage.is_local(dest):
        yield
        return
    import fcntl

    d = storage.local_path(dest)
    storage.makedirs(d)
    path = os.path.join(d, lock_name(task_index))
    for _ in range(10):  # the holder may unlink the file between our open and flock: retry on the new file
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConvertError(
                f"{dest}: another conversion ({_holder(path)}) is writing DEST (task {task_index}); "
                "wait for it to finish or stop it, then rerun"
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    else:  # pragma: no cover - ten lost races in a row
        raise ConvertError(f"{dest}: cannot take the conversion lock {path}; rerun")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode("utf-8"))
        yield
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)


def empty_split_result(s: SplitSource, dest: str, options: ConvertConfig) -> SplitResult:
    """The result of split ``s``, which has no sample: not written, with its skips and why it is empty."""
    res = SplitResult(split=s.name, url=storage.join(dest, s.name), written=False)
    res.skipped_files = sorted((SkippedFile(p, r.value, d) for p, r, d in s.skipped), key=lambda f: f.path)
    res.add_skipped(res.skipped_files)
    if res.skipped:
        res.empty = f"{res.skipped} skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(res.skipped_reasons.items()))
    elif options.val_fraction:
        res.empty = f"no input: --val-fraction {options.val_fraction} rounds each class's share to 0; raise it"
    else:
        res.empty = "no input"
    return res


def emptied_split_result(split: str, url: str, skipped: list[SkippedFile], root: str) -> SplitResult:
    """The result of ``split`` (folder ``url``), whose every item was skipped (``skipped``) when read: not written;
    why it is empty names the first skipped file and, for missing files, the folder they were looked for in (``root``)."""
    out = SplitResult(split=split, url=url, written=False)
    out.skipped_files = sorted(skipped, key=lambda f: f.path)
    out.add_skipped(out.skipped_files)
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(out.skipped_reasons.items()))
    out.empty = f"{out.skipped} skipped: {reasons}" if out.skipped else "no input"
    first = next((f for f in out.skipped_files if f.reason == SkipReason.MISSING_FILE.value), None)
    if first is not None:
        out.empty += f"; e.g. {first.detail or first.path} (relative paths are read below {root}: is --root right?)"
    elif out.skipped_files:
        f = out.skipped_files[0]
        out.empty += f"; e.g. {f.path}: {f.detail}"
    return out
