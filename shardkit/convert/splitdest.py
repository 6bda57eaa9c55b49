"""The DEST checks of one split's conversion: whose split DEST holds, whether this job may write there, and
clearing what it may replace (a mixin of :class:`~shardkit.convert.splitjob.SplitJob`).

A split job resumes its own unfinished plan, refuses a different conversion or shard-named files shardkit did
not write (unless ``overwrite``), resumes or refuses an unfinished append, and before and after writing checks
that DEST's plan is still its own (another conversion started at the same time would otherwise lose its shards).
"""

from __future__ import annotations

from shardkit.convert import journal
from shardkit.convert.append import Base
from shardkit.convert.dest import clear_generation, clear_split, emptied_split_result, split_outputs
from shardkit.convert.options import SplitResult
from shardkit.convert.scan.source import SplitSource
from shardkit.errors import ConvertError
from shardkit.format.manifest import MANIFEST_NAME, SkippedFile, load_manifest
from shardkit.storage import fs as storage


class SplitDest:
    """The DEST checks of a split job: ``url`` is the split's folder, ``plan`` the job's plan (replaced by the
    plan found there when the job resumes it), ``base`` the split an append extends (``None``: a conversion)."""

    src: SplitSource
    url: str
    so: dict
    base: Base | None
    plan: journal.Plan
    skipped: list[SkippedFile]

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
