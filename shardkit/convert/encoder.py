"""Encode items in order: in this process, or in a process pool whose forkserver imports torch once.

:func:`encode_chunk` is the unit of work (a chunk of :data:`CHUNK` items, read and
re-encoded by :func:`~shardkit.convert.imageproc.process`); :class:`Encoder` runs
chunks here or in the pool of :func:`start_pool` and yields their outcomes in
submission order with a bounded number in flight, so the number of workers
changes speed and nothing else.

Start-up: the pool's forkserver starts first and imports torch (~0.85 s, the one
import of a conversion) while the main process discovers SRC; the main process of a
pool conversion never imports torch. Workers ignore Ctrl-C (the main process stops
the pool and keeps finished shards); a worker that dies is a :class:`ConvertError`
saying how to resume.

A main process killed outright (SIGKILL, out of memory) leaves no process behind: each
worker watches a pipe whose only write end the main process holds, and exits when it
reads end-of-file (:func:`_exit_when_main_dies`). A worker's parent is the forkserver,
not the main process, so neither ``os.getppid()`` nor ``PR_SET_PDEATHSIG`` would see
that death. Once the workers are gone, the forkserver and the resource tracker, whose
last other clients they were, read end-of-file on their own pipes and exit too.

Scripts: forkserver and spawn workers import the caller's ``__main__`` script, so a
script that calls ``convert`` outside ``if __name__ == "__main__":`` would run the
conversion again in every worker (multiprocessing then kills the worker, which used
to read as "a worker died"). :func:`check_main_guard` finds that case before the pool
starts, from the frame of the script's top level and the statement it is executing.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import multiprocessing
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext

from shardkit.convert import shards as plan
from shardkit.convert.imageproc import EncodeConfig, Encoded, SkipImage, SkipReason, encoder_version, one_core, process
from shardkit.convert.scan.source import MissingFile, Reader
from shardkit.convert.targets import TargetOutcome, TargetSpec, encode_targets
from shardkit.errors import ConvertError
from shardkit.private_apis import unguarded_main_line

#: images per unit of work sent to a worker process
CHUNK = 16
_WINDOW_PER_WORKER = 4


@dataclass(frozen=True)
class Outcome:
    """Result of encoding one item: ``encoded`` (and its ``targets``, in a detection or segmentation
    conversion) or a skip ``reason``."""

    encoded: Encoded | None
    reason: str = ""
    detail: str = ""
    targets: TargetOutcome | None = None
    source_sha256: str = ""  #: sha256 of the source file's bytes (the per-sample table's ``source_sha256``)


def encode_chunk(
    reader: Reader, items: Sequence[plan.Item], image: EncodeConfig, targets: TargetSpec | None = None
) -> list[Outcome]:
    """Encode ``items`` with torch on one thread (worker entry point; top-level so spawn can import it);
    with ``targets``, each item's objects and mask too (:func:`~shardkit.convert.targets.encode_targets`)."""
    out = []
    with one_core():
        for it in items:
            try:
                data = reader.read(it.relpath, it.ref)
            except MissingFile as exc:
                out.append(Outcome(None, SkipReason.MISSING_FILE.value, f"{exc}: no such file"))
                continue
            except OSError as exc:
                out.append(Outcome(None, SkipReason.UNREADABLE.value, str(exc.strerror or exc)))
                continue
            try:
                enc = process(data, image)
                moved = None
                if targets is not None:
                    moved = encode_targets(it, reader, (enc.width, enc.height), enc.out_size, targets)
                out.append(Outcome(enc, targets=moved, source_sha256=hashlib.sha256(data).hexdigest()))
            except SkipImage as exc:
                out.append(Outcome(None, exc.reason.value, exc.detail))
    return out


def check_main_guard(api: str = "shardkit.convert.convert") -> None:
    """:class:`ConvertError` if worker processes would re-run the caller: a ``__main__`` script calling ``api``
    at its top level outside ``if __name__ == "__main__":`` (see module docstring)."""

    if getattr(multiprocessing.current_process(), "_inheriting", False):  # this is a worker importing that script
        raise ConvertError(
            f"{api} called while a worker process imports the main script; "
            'put the call under if __name__ == "__main__": (or pass workers=1)'
        )
    where = unguarded_main_line()
    if where is not None:
        path, line = where
        raise ConvertError(
            f"{path}: line {line} runs {api} with worker processes outside "
            f'if __name__ == "__main__": (each worker imports the script and would run it again); '
            "put the call under that guard, or pass workers=1"
        )


#: exit status of a worker that ends because the main process died
MAIN_DIED_EXIT = 70


def _exit_when_main_dies(main_alive: Connection) -> None:
    """Block until ``main_alive`` reads end-of-file (the main process, the one holder of its write end, is gone),
    then end this worker at once: nothing it could still do would reach a shard."""
    try:
        while True:
            main_alive.recv_bytes()  # nothing is ever sent: this returns only by raising
    except (EOFError, OSError):
        pass
    os._exit(MAIN_DIED_EXIT)


def _init_worker(main_alive: Connection | None = None) -> None:
    """Workers leave Ctrl-C to the main process (which stops the pool and keeps finished shards), and, given
    the read end ``main_alive`` of a pipe only the main process writes to, exit when the main process dies."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if main_alive is not None:
        threading.Thread(
            target=_exit_when_main_dies, args=(main_alive,), name="shardkit-main-watch", daemon=True
        ).start()


#: what the forkserver imports once, before forking workers (torch: ~1 s, so that no worker pays it)
_PRELOAD = [__name__, "torch", "torch.nn.functional", "simplejpeg"]


@contextlib.contextmanager
def start_pool(workers: int) -> Iterator[Executor | None]:
    """The encoding process pool for ``workers > 1`` (``None`` otherwise), started now.

    With forkserver the server process starts importing :data:`_PRELOAD` at once,
    so its ~1 s torch import overlaps whatever the caller does next (discovery);
    the main process itself never imports torch. Workers are forked on first use;
    on exit, work not started yet is cancelled. Every worker exits when the main
    process dies, however it dies (see the module docstring).
    """
    if workers <= 1:
        yield None
        return
    from concurrent.futures import ProcessPoolExecutor

    if "forkserver" in multiprocessing.get_all_start_methods():
        from multiprocessing import forkserver

        ctx: BaseContext = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        forkserver.ensure_running()  # returns at once; the server imports in the background
    else:
        ctx = multiprocessing.get_context("spawn")
    main_alive, main_alive_w = ctx.Pipe(duplex=False)  # workers get the read end; only this process writes
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(main_alive,))
    try:
        yield pool
    finally:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            main_alive.close()
            main_alive_w.close()


_WORKER_DIED = (
    "an encoding worker process died (killed, or out of memory?); finished shards are kept: "
    "rerun the same command to resume, with fewer --workers if memory is short"
)


class Encoder:
    """Encodes chunks of items in order: in this process (no ``pool``) or in the process pool of :func:`start_pool`."""

    def __init__(
        self,
        reader: Reader,
        image: EncodeConfig,
        pool: Executor | None,
        workers: int = 1,
        targets: TargetSpec | None = None,
    ):
        self.reader, self.image, self.pool, self.workers = reader, image, pool, workers
        self.targets = targets

    def version(self) -> str:
        """:func:`~shardkit.convert.imageproc.encoder_version` of the processes that encode (a pool worker, or this one)."""
        if self.pool is None:
            return encoder_version()
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self.pool.submit(encoder_version).result()
        except BrokenProcessPool:
            raise ConvertError(_WORKER_DIED) from None

    def map(self, chunks: Iterable[Sequence[plan.Item]]) -> Iterator[list[Outcome]]:
        """Outcomes of each chunk, in the order of ``chunks``, with a bounded number in flight."""
        if self.pool is None:
            for c in chunks:
                yield encode_chunk(self.reader, c, self.image, self.targets)
            return
        from concurrent.futures.process import BrokenProcessPool

        window: collections.deque = collections.deque()
        try:
            for c in chunks:
                window.append(self.pool.submit(encode_chunk, self.reader, list(c), self.image, self.targets))
                if len(window) >= self.workers * _WINDOW_PER_WORKER:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        except BrokenProcessPool:
            raise ConvertError(_WORKER_DIED) from None
