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
* :func:`alias_moved_modules`: the module paths of shardkit 0.1 before its layers
  became folders keep importing, with a DeprecationWarning.

Importing this module does not import torch; the functions that need it import it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Iterable, Iterator
from typing import Any


def mark_batch_dynamic(tensors: Iterable[Any]) -> None:
    """Hint ``torch.compile`` that dimension 0 (the batch) of each tensor varies between calls.

    A no-op for tensors without dimensions and on a torch without the API.
    """
    import torch

    try:
        mark = torch._dynamo.maybe_mark_dynamic  # the one compat shim
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


#: module paths of shardkit 0.1 -> where the module lives now
MOVED_MODULES = {
    "shardkit.cropresize": "shardkit.loader.decode.cropresize",
    "shardkit.demo_options": "shardkit.demo.spec",
    "shardkit.devicedecode": "shardkit.loader.decode.device",
    "shardkit.doctor": "shardkit.loader.doctor",
    "shardkit.inspect": "shardkit.format.verify",
    "shardkit.jpegbackend": "shardkit.loader.decode.backend",
    "shardkit.lightning": "shardkit.integrations.lightning",
    "shardkit.manifest": "shardkit.format.manifest",
    "shardkit.mix": "shardkit.plan",
    "shardkit.position": "shardkit.plan.position",
    "shardkit.prefetch": "shardkit.loader.prefetch",
    "shardkit.sampledata": "shardkit.demo.sampledata",
    "shardkit.threads": "shardkit.compat",
    "shardkit.world": "shardkit.plan.world",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves an old module path as the module that now holds its code (the same module object)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new = MOVED_MODULES[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the alias's: put it back below
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = module.__spec__.loader_state  # already executed under its new name


def alias_moved_modules() -> None:
    """Let ``import shardkit.<old path>`` keep working (once per process; the package's ``__init__`` calls it)."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())
