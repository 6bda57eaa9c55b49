"""Guards for the converter's older, pure parts, against simple references.

* byte planning: the writer's own output is the reference for ``tar_size`` and for the byte cap;
* the resume journal: damaged records are redone (``None``), foreign plans refused, and the plan's
  identity covers everything that changes the output;
* ``--copy`` keeps a source JPEG's bytes only when they are what a conversion would show upright.

The mutant gate (``tests/mutants/convert_core.py``) plants the bugs these tests must catch.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from shardkit.convert import imageproc as ip
from shardkit.convert import journal
from shardkit.convert import shards as cplan
from shardkit.errors import ConvertError
from shardkit.format import EncodedSample, write_tar
from tests.support.data import jpeg_bytes

_SIZES = st.one_of(st.integers(0, 5000), st.integers(0, 10).map(lambda k: 512 * k))


def _written(samples: list[EncodedSample]) -> int:
    buf = io.BytesIO()
    write_tar(samples, buf)
    return len(buf.getvalue())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_SIZES, st.integers(0, 10**9)), min_size=1, max_size=12), st.integers(10_240, 60_000))
@example([(0, 0)] * 5, 10_240)  # four samples are exactly 10,240 bytes: with the end blocks they are not
@example([(512, 1)] * 3, 60_000)  # payloads of whole blocks; three samples fill one 10,240-byte record exactly
def test_byte_cap_is_the_longest_prefix_the_writer_keeps_under_it(rows, cap):
    """``tar_size`` is what the writer writes per sample, and ``split_at_cap`` keeps the longest prefix whose
    written shard is within the cap (at least one sample): checked by writing the shards."""
    samples = [
        EncodedSample(f"{i:08d}", bytes(n), label, {"path": f"c/{i}.jpg", "class": "c"})
        for i, (n, label) in enumerate(rows)
    ]
    sizes = [cplan.tar_size(s) for s in samples]
    for k in range(1, len(samples) + 1):
        assert _written(samples[:k]) == cplan.shard_bytes_for(sum(sizes[:k]))
    k = cplan.split_at_cap(sizes, cap)
    assert k >= 1
    assert k == 1 or _written(samples[:k]) <= cap
    assert k == len(samples) or _written(samples[: k + 1]) > cap


def _plan(**over) -> journal.Plan:
    p = journal.Plan(
        split="train",
        options={"seed": 7, "source": {"path_col": "path"}},
        classes=["a", "b"],
        encoder="pillow-1",
        input_sha256="0" * 64,
        num_items=10,
        samples_per_shard=4,
        num_planned=3,
        key_width=8,
    )
    return replace(p, **over)


def test_the_plans_identity_covers_options_classes_encoder_and_input():
    """A rerun resumes only the same conversion: any identity field changed changes the fingerprint; derived
    numbers (samples per shard, planned shards) do not."""
    base = _plan().fingerprint
    for change in (
        dict(split="val"),
        dict(options={"seed": 8, "source": {"path_col": "path"}}),
        dict(classes=["b", "a"]),
        dict(encoder="pillow-2"),
        dict(input_sha256="1" * 64),
    ):
        assert _plan(**change).fingerprint != base, change
    assert _plan(samples_per_shard=5, num_planned=2).fingerprint == base


def test_a_plan_of_another_format_or_version_is_refused():
    good = json.loads(_plan().to_json())
    assert journal.Plan.from_json(json.dumps(good).encode(), "p.json") == _plan()
    for bad in ({**good, "version": 2}, {**good, "format": "other"}, {k: v for k, v in good.items() if k != "classes"}):
        with pytest.raises(ConvertError, match="p.json: unreadable conversion plan"):
            journal.Plan.from_json(json.dumps(bad).encode(), "p.json")


def test_a_damaged_shard_record_is_redone_not_a_crash():
    """A record cut short, missing a field or of the wrong shape is ``None`` (its shard is redone)."""
    rec = journal.ShardRecord("f" * 64, 3, journal.Part("train-000003.tar", 4, 10240, "0" * 64), None, [2, 2], [], 999)
    text = rec.to_json()
    assert journal.ShardRecord.from_json(text) == rec
    d = json.loads(text)
    for bad in (
        text[: len(text) // 2],
        json.dumps({k: v for k, v in d.items() if k != "skipped"}).encode(),
        json.dumps({**d, "shard": {"name": "x"}}).encode(),
        json.dumps([1, 2]).encode(),
        b"\xff",
    ):
        assert journal.ShardRecord.from_json(bad) is None, bad


def test_copy_keeps_only_upright_rgb_jpegs_within_the_pixel_limit():
    """``--copy`` keeps the source bytes of an upright RGB JPEG; a rotated one (EXIF), a PNG and one over
    ``max_pixels`` are converted (or skipped) as usual, so what the loader shows is upright."""
    upright = jpeg_bytes(1, 2, (40, 30))
    opts = ip.EncodeConfig(short_side=16, copy=True)
    assert ip.process(upright, opts).jpeg == upright
    ex = Image.Exif()
    ex[0x0112] = 6  # rotate 90
    buf = io.BytesIO()
    Image.open(io.BytesIO(upright)).save(buf, "JPEG", exif=ex.tobytes())
    rotated = ip.process(buf.getvalue(), opts)
    assert rotated.jpeg != buf.getvalue() and (rotated.width, rotated.height) == (30, 40)
    assert Image.open(io.BytesIO(rotated.jpeg)).size == (16, 21)
    png = io.BytesIO()
    Image.open(io.BytesIO(upright)).save(png, "PNG")
    assert ip.process(png.getvalue(), opts).jpeg[:2] == b"\xff\xd8"
    with pytest.raises(ip.SkipImage):
        ip.process(upright, replace(opts, max_pixels=100))
