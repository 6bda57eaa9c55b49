"""Torch intra-op thread limits, as one context manager for the loader, its bench and the converter.

Per-image resizes are tiny: torch's intra-op threads only add overhead (10x on a
busy machine), and the parallelism of both the loader and the converter is one
process per core. Importing this module does not import torch; :func:`one_thread`
imports it when entered.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


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
