"""One resume checker for the loader and mixture tests (in the spirit of torchdata's save/load test helper,
``test/nodes/utils.py``).

:func:`check_resume` takes a loader factory, runs an uninterrupted epoch on every rank, runs the same epoch again
and saves the state after ``after`` batches, resumes fresh loaders from that state (on the same topology, or on
another one: ``resume_world_size``, ``resume``) and asserts what a resume promises:

* same topology: on every rank the batches before the save followed by the resumed batches are the uninterrupted
  epoch, batch for batch (keys and labels; pixels with ``pixels=True``);
* another topology: the state is the same on every rank, every resumed rank gets the same number of batches, no
  key is delivered twice over the epoch, every key carries the label the uninterrupted run gives it and, with
  ``complete=True``, the keys are exactly the uninterrupted run's.

The state goes through ``json.dumps``/``json.loads`` first, as a checkpoint of plain values would. The returned
:class:`Resumed` keeps every batch, the states and the resumed loaders for the checks a test adds.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

#: ``make(rank=..., world_size=...)`` -> a loader whose batches are ``(images, labels, keys)``
Factory = Callable[..., Any]


@dataclass
class Batch:
    """One batch as the checks see it: keys and labels as lists, the images (cloned) when pixels are compared."""

    keys: list[str]
    labels: list[int]
    images: torch.Tensor | None = None


def take(batch: tuple, pixels: bool) -> Batch:
    """A loader batch ``(images, labels, keys)`` as a :class:`Batch`."""
    images, labels, keys = batch
    return Batch(
        list(keys), labels.tolist() if hasattr(labels, "tolist") else list(labels), images.clone() if pixels else None
    )


def epoch(loader: Any, pixels: bool = False) -> list[Batch]:
    """Every batch of one pass over ``loader``."""
    return [take(b, pixels) for b in loader]


@dataclass
class Resumed:
    """What :func:`check_resume` ran: per rank of the saving topology the uninterrupted ``reference`` epoch,
    the ``head`` batches before the save and the saved ``states``; per rank of the resumed topology the
    ``rest`` of the epoch and the resumed ``loaders``; the ``reference_loaders`` and ``loaders`` are left open
    (for their stats and their next epoch)."""

    reference: list[list[Batch]]
    head: list[list[Batch]]
    states: list[dict]
    rest: list[list[Batch]]
    loaders: list[Any]
    reference_loaders: list[Any]

    def keys(self) -> list[str]:
        """Every key delivered over the interrupted epoch: the heads, then the rests, rank by rank."""
        return [k for part in (*self.head, *self.rest) for b in part for k in b.keys]


def _same(got: list[Batch], want: list[Batch], pixels: bool, what: str) -> None:
    assert [b.keys for b in got] == [b.keys for b in want], f"{what}: other keys or batches than the uninterrupted run"
    assert [b.labels for b in got] == [b.labels for b in want], f"{what}: other labels than the uninterrupted run"
    if pixels:
        bad = [
            i
            for i, (g, w) in enumerate(zip(got, want))
            if g.images is None or w.images is None or not torch.equal(g.images, w.images)
        ]
        assert not bad, f"{what}: other pixels than the uninterrupted run in batches {bad}"


def check_resume(
    make: Factory,
    *,
    after: int,
    world_size: int = 1,
    resume_world_size: int | None = None,
    resume: Factory | None = None,
    start: Callable[[Any], None] | None = None,
    pixels: bool = False,
    complete: bool = True,
) -> Resumed:
    """Save after ``after`` batches on each of ``world_size`` ranks, resume and check (see the module docstring).

    ``make(rank=r, world_size=w)`` builds a loader; ``resume`` (default ``make``) builds the resumed ones, on
    ``resume_world_size`` ranks (default ``world_size``); ``start(loader)`` runs before a fresh (not a resumed)
    loader is iterated, e.g. ``lambda l: l.set_epoch(3)``.
    """
    resume = make if resume is None else resume
    new_world = world_size if resume_world_size is None else resume_world_size
    reference, head, states, reference_loaders = [], [], [], []
    for rank in range(world_size):
        ref = make(rank=rank, world_size=world_size)
        if start is not None:
            start(ref)
        reference.append(epoch(ref, pixels))
        reference_loaders.append(ref)
        loader = make(rank=rank, world_size=world_size)
        if start is not None:
            start(loader)
        it = iter(loader)
        head.append([take(next(it), pixels) for _ in range(after)])
        states.append(json.loads(json.dumps(loader.state_dict())))
        del it
        if hasattr(loader, "close"):
            loader.close()
    rest, loaders = [], []
    for rank in range(new_world):
        loader = resume(rank=rank, world_size=new_world)
        loader.load_state_dict(states[rank % world_size])
        rest.append(epoch(loader, pixels))
        loaders.append(loader)
    out = Resumed(reference, head, states, rest, loaders, reference_loaders)
    if new_world == world_size and resume_world_size is None:
        for rank in range(world_size):
            _same(
                head[rank] + rest[rank],
                reference[rank],
                pixels,
                f"rank {rank} of {world_size} resumed after {after} batches",
            )
        return out
    assert all(s == states[0] for s in states), "the saved state differs between ranks"
    assert len({len(r) for r in rest}) == 1, (
        f"unequal batch counts over the {new_world} resumed ranks: {[len(r) for r in rest]}"
    )
    twice = [k for k, n in Counter(out.keys()).items() if n > 1]
    assert not twice, f"delivered twice after resuming on {new_world} ranks: {twice[:5]}"
    labels = {k: lab for part in reference for b in part for k, lab in zip(b.keys, b.labels)}
    got = {k: lab for part in (*head, *rest) for b in part for k, lab in zip(b.keys, b.labels)}
    assert all(labels.get(k) == lab for k, lab in got.items()), "a key with another label (or unknown) after resuming"
    if complete:
        assert sorted(got) == sorted(labels), (
            f"resuming {world_size} -> {new_world} ranks did not cover exactly the epoch"
        )
    return out
