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
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


def mark_batch_dynamic(tensors: Iterable[Tensor]) -> None:
    """Hint ``torch.compile`` that dimension 0 (the batch) of each tensor varies between calls.

    A no-op for tensors without dimensions and on a torch without the API.
    """
    try:
        mark = torch._dynamo.maybe_mark_dynamic  # the one compat shim
    except AttributeError:  # pragma: no cover - an older or newer torch
        return
    for t in tensors:
        if isinstance(t, Tensor) and t.ndim > 0:
            mark(t, 0)
