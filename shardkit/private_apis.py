"""The one place shardkit touches torch APIs that are not public and stable.

Keep every use of a private (underscore) torch API here, each with a fallback, so
that a torch upgrade that moves it breaks one small function, not the library.

* :func:`mark_batch_dynamic`: ``torch._dynamo.maybe_mark_dynamic`` on dimension 0,
  so a ``torch.compile``-d function traces the batch size as a symbol at its first
  call (one graph for every batch size) instead of specialising on it and
  recompiling for every new size until torch's recompile limit, after which it
  silently runs eagerly. (``torch.compile(dynamic=True)`` would also make every
  other dimension symbolic, image sizes included; ``maybe_`` rather than
  ``mark_dynamic`` because ``mark_dynamic`` raises when a batch of 1 specialises.)
* :func:`one_thread`: torch's intra-op thread limit as one context manager for the
  loader, its bench and the converter. Per-image resizes are tiny: intra-op threads
  only add overhead (10x on a busy machine), and the parallelism of both the loader
  and the converter is one process per core.
* :func:`dataloader_iterator`, :func:`shutdown_dataloader`, :func:`worker_processes`: a
  ``DataLoader``'s live iterator (``_iterator``), stopping its workers now
  (``_shutdown_workers``; persistent ones too) and its worker processes (``_workers``), for
  :mod:`shardkit.loader.pool` and :mod:`shardkit.loader.worker_death`.
* :func:`watchdog_killed`: the pids and signal in the text of the error torch's SIGCHLD
  watchdog raises when it reaps a killed worker (a message, not an API).
* :func:`upsample_bilinear_aa_kernel`: torch's uint8 antialiased bilinear kernel
  (``torch._C._nn._upsample_bilinear2d_aa``), which can write into a batch row; None where a torch lacks it
  (the caller falls back to ``F.interpolate``).
* :func:`unguarded_main_line`: where the ``__main__`` script runs the caller outside
  ``if __name__ == "__main__":`` (multiprocessing's spawn and forkserver start methods
  import that script in every worker, which would run the call again): the one rule the
  converter's pool and the loader's workers check before starting processes.

Importing this module does not import torch; the functions that need it import it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional


def _outside_main_guard(path: str, line: int) -> bool:
    """True if ``line`` of the script ``path`` lies in a top-level statement that is not ``if __name__ ...``."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return False  # cannot tell: leave it to multiprocessing
    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            guarded = isinstance(node, ast.If) and any(
                isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test)
            )
            return not guarded
    return False


def unguarded_main_line(depth: int = 1) -> Optional[tuple[str, int]]:
    """``(script, line)`` when the frame ``depth`` levels above this call runs, through a statement at the
    top level of the ``__main__`` script, outside ``if __name__ == "__main__":``; None when it does not (or
    when there is no such script: interactive, ``-c``, a package's ``__main__``, which workers do not re-run)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", "") or ""
    if main is None or not path or name == "__main__" or name.endswith(".__main__"):
        return None
    frame = sys._getframe(depth + 1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is not None and _outside_main_guard(path, frame.f_lineno):
        return path, frame.f_lineno
    return None


def mark_batch_dynamic(tensors: Iterable[Any]) -> None:
    """Hint ``torch.compile`` that dimension 0 (the batch) of each tensor varies between calls.

    A no-op for tensors without dimensions and on a torch without the API.
    """
    import torch

    try:
        mark = torch._dynamo.maybe_mark_dynamic  # private: see the module docstring
    except AttributeError:  # pragma: no cover - an older or newer torch
        return
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.ndim > 0:
            mark(t, 0)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch ops single-threaded inside the block; the previous count is restored on exit (also on errors)."""
    import torch

    before = torch.get_num_threads()
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)


def dataloader_iterator(dl: Any) -> Any:
    """The live iterator of a ``DataLoader`` with persistent workers or an iteration in progress (``None``: none)."""
    return getattr(dl, "_iterator", None)


def shutdown_dataloader(dl: Any) -> None:
    """Stop a ``DataLoader``'s worker processes now (persistent ones too) and forget its iterator."""
    it = dataloader_iterator(dl)
    if it is None:
        return
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    dl._iterator = None


def worker_processes(it: Any) -> list[Any]:
    """The worker processes (``pid``, ``exitcode``) of a ``DataLoader`` iterator (empty without workers)."""
    return list(getattr(it, "_workers", None) or [])


def watchdog_killed(exc: BaseException) -> Optional[tuple[str, str]]:
    """``(pids, signal description)`` from the error torch's SIGCHLD watchdog raises for killed workers
    ("DataLoader worker (pid(s) 21, 22) is killed by signal: Killed."); ``None`` for any other error."""
    m = re.search(r"DataLoader worker \(pids?\(?s?\)? ([\d, ]+)\) is killed by signal: (.+?)\.", str(exc))
    return None if m is None else (m.group(1), m.group(2).strip())


@functools.cache
def upsample_bilinear_aa_kernel() -> Optional[Callable]:
    """torch's uint8 antialiased bilinear kernel with an ``out=`` argument, or None where this torch lacks it.

    It is the kernel ``F.interpolate(mode="bilinear", antialias=True)`` dispatches to, called
    directly because only it can write into a batch row: through ``F.interpolate`` (a new tensor,
    then a copy; crop views take its slower route) decode + crop/resize measured 6 % (train) and
    10 % (eval) slower. ``tests/loader/decode/test_worker.py::test_resize_kernel_equals_public_interpolate``
    checks it against ``F.interpolate`` byte for byte, and the fallback is that public call.
    """
    import torch

    return getattr(getattr(torch._C, "_nn", None), "_upsample_bilinear2d_aa", None)
