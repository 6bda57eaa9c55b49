"""A mixture's labels name the right class: an oracle from the pixels.

Each generated source lists its own classes (overlapping, permuted, disjoint, the same set in
another order); every sample is a solid colour that encodes its true class *name*, and its
``.cls`` is the index of that name in its own source's list. Through the real loader, with
``labels="merged"`` every sample's ``loader.classes[label]`` must be its true name, and with
``labels="per_source"`` ``"i/name"`` of its own source ``i``. The reference is the colour,
independent of the label tables.
"""

from __future__ import annotations

import io
import itertools

import numpy as np
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit
from shardkit import Source
from tests.support.data import image_bytes, tar_bytes, write_raw_dataset

NAMES = ("bird", "cat", "dog", "fish", "frog")
COLOUR = {n: (40 + 45 * i, 230 - 45 * i, (97 * i) % 256) for i, n in enumerate(NAMES)}
_JPEG: dict[str, bytes] = {}


def jpeg(name: str) -> bytes:
    if name not in _JPEG:
        _JPEG[name] = image_bytes(Image.new("RGB", (20, 20), COLOUR[name]), quality=95)
    return _JPEG[name]


def true_name(image) -> str:
    """The class name a decoded image's colour encodes (nearest palette colour)."""
    mean = image.float().mean((1, 2)).numpy()
    return min(NAMES, key=lambda n: float(np.sum((mean - np.array(COLOUR[n])) ** 2)))


def write_source(root: str, i: int, classes: list[str]) -> str:
    """Source ``i``: two samples of each of its classes, ``.cls`` the index in ``classes``."""
    members = []
    for j, (_c, name) in enumerate(itertools.product(range(2), classes)):
        key = f"s{i}_{j:03d}"  # unique per source: identical sources would be 'the same split'
        members += [(f"{key}.jpg", jpeg(name)), (f"{key}.cls", str(classes.index(name)).encode())]
    return write_raw_dataset(f"{root}/src{i}", [(tar_bytes(members), 2 * len(classes))], list(classes))


class_lists = st.lists(
    st.permutations(NAMES).flatmap(lambda p: st.integers(1, len(p)).map(lambda k: list(p[:k]))), min_size=2, max_size=3
)


def _check(root, lists, mode):
    sources = [Source(write_source(root, i, cl), repeat=1) for i, cl in enumerate(lists)]
    loader = shardkit.load(
        sources,
        labels=mode,
        batch_size=4,
        size=16,
        num_workers=0,
        pin_memory=False,
        preset="eval",
        with_keys=True,
        with_source=True,
    )
    n = 0
    for images, labels, keys, src in loader:
        for image, label, key, s in zip(images, labels.tolist(), keys, src.tolist()):
            name = true_name(image)
            want = name if mode == "merged" else f"{s}/{name}"
            assert loader.classes[label] == want, f"{mode}: {key} of source {s} ({lists[s]}) is {name}"
            n += 1
    assert n == sum(2 * len(cl) for cl in lists)  # every sample, once
    loader.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(lists=[["cat", "dog"], ["dog", "cat"]])  # the same class set in another order
@example(lists=[["cat", "dog", "bird"], ["bird", "cat", "dog"], ["dog", "bird", "cat"]])
@example(lists=[["cat"], ["dog", "fish"]])  # disjoint
@given(lists=class_lists)
def test_merged_labels_name_the_true_class(tmp_path_factory, lists):
    _check(str(tmp_path_factory.mktemp("merged")), lists, "merged")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(lists=[["cat", "dog"], ["dog", "cat"]])
@example(lists=[["cat", "dog"], ["cat", "dog"]])  # the same classes in the same order: still apart
@given(lists=class_lists)
def test_per_source_labels_name_the_true_class_of_their_source(tmp_path_factory, lists):
    _check(str(tmp_path_factory.mktemp("per-source")), lists, "per_source")


def test_the_colour_oracle_tells_every_class_apart():
    """The reference itself: each palette colour decodes back to its own name."""
    decoded = {
        n: true_name(torch.from_numpy(np.asarray(Image.open(io.BytesIO(jpeg(n))))).permute(2, 0, 1)) for n in NAMES
    }
    assert decoded == {n: n for n in NAMES}
