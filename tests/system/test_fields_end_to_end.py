"""End to end: a CSV listing with multi-label tags, float targets and captions, through ``shardkit convert`` and back
out of ``shardkit.load(fields=...)``.

The convert side and the loader side each have their own oracle; this one checks that the two halves agree. Each row
names a distinct solid-colour image, so a yielded row is tied to its source row by its colour alone (not by a key the
two halves could both get wrong), and the expected values are computed from the CSV cells by a deliberately simple
reference: tags split at ";", stripped, empty ones dropped, a set; targets as floats; the caption as written.
"""

from __future__ import annotations

import csv
import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from tests.support.source_reference import image_id, write_image

TAGS = ["cat", "dog", "emu", "owl"]
CAPTIONS = ["a photo", "two, words", "ünïcode 名", 'say "hi"', ""]
N = 12


@st.composite
def rows(draw) -> list[dict]:
    out = []
    for i in range(draw(st.integers(3, N))):
        tags = draw(
            st.lists(st.sampled_from(TAGS), min_size=int(i == 0), max_size=3)
        )  # (a class space of 0 is refused)
        out.append(
            {
                "path": f"f{i}.jpg",
                "tags": ";".join(tags) + draw(st.sampled_from(["", ";", " ; "])),
                "a": repr(draw(st.floats(-1e6, 1e6, allow_nan=False, width=32))),
                "b": str(draw(st.integers(-5, 5))),
                "caption": draw(st.sampled_from(CAPTIONS)) + str(i),
            }
        )
    return out


def reference(row: dict) -> tuple[set[str], list[float], str]:
    tags = {t.strip() for t in row["tags"].split(";") if t.strip()}
    return tags, [float(row["a"]), float(row["b"])], row["caption"]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("e2e_images"))
    for i in range(N):
        write_image(os.path.join(root, f"f{i}.jpg"), i, size=(40, 32))
    return root


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure names its example as generated
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=rows(), num_workers=st.sampled_from([0, 2]), batch_size=st.integers(1, 5))
def test_listing_fields_come_out_of_the_loader_as_written(images, tmp_path_factory, rows, num_workers, batch_size):
    tmp = str(tmp_path_factory.mktemp("e2e"))
    listing = os.path.join(tmp, "list.csv")
    with open(listing, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    dest = os.path.join(tmp, "ds")
    scan = ScanConfig(label_col="tags", label_sep=";", target_cols=("a", "b"), text_col="caption", root=images)
    convert(listing, dest, ConvertConfig(source=scan, image=EncodeConfig(short_side=16), shard_size=4))
    fields = ("image", "labels", "target", "text", "key")
    loader = shardkit.load(
        os.path.join(dest, "train"), fields=fields, batch_size=batch_size, num_workers=num_workers, size=8, seed=3
    )
    classes = loader.classes
    seen = []
    for batch in loader:
        assert tuple(batch) == fields
        assert batch["labels"].dtype == torch.uint8 and batch["target"].dtype == torch.float32
        for r in range(len(batch["key"])):
            i = image_id(tuple(batch["image"][r].float().mean(dim=(1, 2)).tolist()))
            assert i is not None and i < len(rows), "a row shows no source image's colour"
            tags, target, caption = reference(rows[i])
            assert {classes[c] for c in batch["labels"][r].nonzero().flatten().tolist()} == tags, f"tags of row {i}"
            assert batch["target"][r].tolist() == pytest.approx(target, rel=1e-6, abs=1e-6), f"target of row {i}"
            assert batch["text"][r] == caption, f"caption of row {i}"
            seen.append(i)
    assert sorted(seen) == list(range(len(rows))), "every row exactly once"
