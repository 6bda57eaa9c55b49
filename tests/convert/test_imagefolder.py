"""`shardkit convert` on an ImageFolder full of odd files: every file accounted for, read back two ways."""

from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.demo.sampledata import make_image
from shardkit.format import KEY_PATTERN
from shardkit.format.manifest import load_manifest

SHORT = 64
MAX_PIXELS = 1_500_000


def _img(label: int, seed: int, size=(40, 30)) -> Image.Image:
    return Image.fromarray(make_image(label, seed, size))


def _save(root, rel, im: Image.Image | None = None, data: bytes | None = None, **kw) -> str:
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if data is not None:
        with open(path, "wb") as f:
            f.write(data)
    else:
        im.save(path, **kw)
    return rel


def make_odd_imagefolder(root: str) -> tuple[list[str], dict[str, str]]:
    """100 classes x 1-2 tiny images plus odd files; returns (class names, {relpath: expected skip reason})."""
    classes = [f"c{i:03d}" for i in range(98)] + ["class with space", "ünïcödé"]
    for i, c in enumerate(classes):
        for j in range(1 + i % 2):
            _save(root, f"{c}/img_{j}.jpg", _img(i, j), quality=90)
    a, b, u = classes[1], classes[2], classes[99]
    skips = {}
    rgb = _img(3, 7, (48, 32))
    _save(root, f"{a}/cmyk.jpg", rgb.convert("CMYK"), quality=90)
    rgba = rgb.convert("RGBA")
    alpha = np.array(rgba)
    alpha[:, :16, 3] = 0  # left third transparent
    _save(root, f"{a}/alpha.png", Image.fromarray(alpha))
    _save(root, f"{a}/gray.png", rgb.convert("L"))
    pal = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    _save(root, f"{a}/palette.png", pal, transparency=0)
    g16 = (np.asarray(rgb.convert("L"), np.uint16) * 257).astype(np.uint16)
    _save(root, f"{a}/gray16.png", Image.fromarray(g16))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    _save(root, f"{b}/exif_rotated.jpg", _img(2, 1, (60, 30)), exif=exif, quality=90)
    _save(root, f"{b}/progressive.jpg", _img(2, 2, (48, 40)), progressive=True, quality=90)
    _save(root, f"{b}/large.jpg", _img(2, 3, (1000, 800)), quality=90)  # draft path (shrinks > 8x)
    _save(root, f"{b}/UPPER.JPG", _img(2, 4), quality=90)
    _save(root, f"{b}/Photo.PNG", _img(2, 5))
    _save(root, f"{b}/sub folder/nested.jpeg", _img(2, 6), quality=90)
    _save(root, f"{b}/pic.webp", _img(2, 7), quality=90)
    _save(root, f"{b}/pic.bmp", _img(2, 8))
    _save(root, f"{b}/pic.tif", _img(2, 9))
    _save(root, f"{u}/名前 with space.jpg", _img(99, 3), quality=90)
    buf = io.BytesIO()
    _img(2, 10, (80, 60)).save(buf, "JPEG", quality=90)
    skips[_save(root, f"{b}/truncated.jpg", data=buf.getvalue()[: len(buf.getvalue()) // 2])] = "corrupt"
    skips[_save(root, f"{b}/empty.jpg", data=b"")] = "empty"
    skips[_save(root, f"{b}/notes.txt", data=b"hello")] = "not_an_image"
    skips[_save(root, f"{b}/fake.jpg", data=b"this is not a jpeg at all")] = "not_an_image"
    skips[_save(root, f"{b}/huge.png", Image.new("L", (1300, 1200)))] = "too_many_pixels"
    skips[_save(root, "README.txt", data=b"about this dataset")] = "not_in_class_folder"
    os.symlink(os.path.join(root, "does-not-exist.jpg"), os.path.join(root, b, "broken_link.jpg"))
    skips[f"{b}/broken_link.jpg"] = "unreadable"
    return classes, skips


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("odd") / "src")
    classes, skips = make_odd_imagefolder(root)
    dest = str(tmp_path_factory.mktemp("out") / "ds")
    opts = ConvertConfig(image=EncodeConfig(short_side=SHORT, max_pixels=MAX_PIXELS), shard_size=16, seed=3)
    result = convert(root, dest, opts, workers=1, quiet=True)
    return root, result.splits[0].url, classes, skips, result


def _all_files(root: str) -> list[str]:
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/") for f in files]
    return sorted(out)


def _read_tar(path: str) -> dict[str, dict[str, bytes]]:
    samples: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            samples.setdefault(key, {})[ext] = tf.extractfile(m).read()
    return samples


def test_every_file_accounted_for(odd):
    import torchvision

    root, dest, classes, skips, result = odd
    m = load_manifest(dest)
    assert m.classes == sorted(classes)
    assert {c: i for i, c in enumerate(m.classes)} == torchvision.datasets.ImageFolder(root).class_to_idx
    skipped = {s.path: s.reason for s in m.skipped}
    assert skipped == skips
    paths = []
    for i in range(len(m.shards)):
        paths += [json.loads(g["json"])["path"] for g in _read_tar(m.shard_url(i)).values()]
    assert len(paths) == len(set(paths))
    assert sorted(paths + list(skipped)) == _all_files(root)
    assert m.num_samples == len(paths) == result.converted and result.skipped == len(skips)
    assert sum(m.class_counts) == m.num_samples


def test_tarfile_readback(odd):
    root, dest, classes, skips, _ = odd
    m = load_manifest(dest)
    index = {c: i for i, c in enumerate(m.classes)}
    labels_per_shard = []
    by_path = {}
    for i, s in enumerate(m.shards):
        samples = _read_tar(m.shard_url(i))
        assert len(samples) == s.samples <= 16
        labels_per_shard.append({int(g["cls"]) for g in samples.values()})
        for key, g in samples.items():
            assert KEY_PATTERN.match(key) and "." not in key
            meta = json.loads(g["json"])
            label = int(g["cls"])
            assert label == index[meta["path"].split("/")[0]] and meta["class"] == m.classes[label]
            im = Image.open(io.BytesIO(g["jpg"]))
            assert im.format == "JPEG" and im.mode == "RGB" and not im.info.get("progressive")
            w, h = im.size
            assert min(w, h) <= SHORT and w <= meta["width"] and h <= meta["height"]
            by_path[meta["path"]] = (im, meta)
    assert sum(len(ls) > 1 for ls in labels_per_shard) == len(m.shards)  # shuffled: every shard mixes classes
    im, meta = by_path["c002/exif_rotated.jpg"]
    assert (meta["width"], meta["height"]) == (30, 60) and im.size == (30, 60)  # orientation applied
    im, meta = by_path["c002/large.jpg"]
    assert (meta["width"], meta["height"]) == (1000, 800) and im.size == (80, 64)
    im, _ = by_path["c001/alpha.png"]
    assert np.asarray(im)[:, :12].mean() > 245  # transparent area composited onto white
    gray8 = np.asarray(by_path["c001/gray.png"][0], np.float32)
    gray16 = np.asarray(by_path["c001/gray16.png"][0], np.float32)
    assert abs(gray16.mean() - gray8.mean()) < 3  # 16-bit scaled to 8 bits, not clipped to white
    cmyk = np.asarray(by_path["c001/cmyk.jpg"][0], np.float32)
    assert 30 < cmyk.mean() < 225 and cmyk.std() > 5
    for p in (
        "c002/UPPER.JPG",
        "c002/Photo.PNG",
        "c002/sub folder/nested.jpeg",
        "c002/pic.webp",
        "c002/pic.bmp",
        "c002/pic.tif",
        "c002/progressive.jpg",
        "c001/palette.png",
        "ünïcödé/名前 with space.jpg",
    ):
        assert p in by_path, p


def test_webdataset_readback(odd):
    import webdataset as wds

    _, dest, _, _, _ = odd
    m = load_manifest(dest)
    tar_view = {}
    for i in range(len(m.shards)):
        tar_view.update({k: int(g["cls"]) for k, g in _read_tar(m.shard_url(i)).items()})
    urls = [m.shard_url(i) for i in range(len(m.shards))]
    seen = [(s["__key__"], int(s["cls"])) for s in wds.WebDataset(urls, shardshuffle=False)]
    assert len(seen) == len(tar_view) == m.num_samples
    assert dict(seen) == tar_view


def test_strict_refuses_any_skip(tmp_path, odd):
    from shardkit.errors import ConvertError

    root = odd[0]
    with pytest.raises(ConvertError, match="--strict"):
        convert(root, str(tmp_path / "strict"), ConvertConfig(strict=True, shard_size=16), workers=1, quiet=True)
    assert not os.path.exists(tmp_path / "strict" / "train" / "manifest.json")


def test_no_shuffle_keeps_sorted_order_and_keys(tmp_path, odd):
    root = odd[0]
    opts = ConvertConfig(image=EncodeConfig(short_side=16, max_pixels=MAX_PIXELS), shuffle=False, shard_size=1000)
    m = convert(root, str(tmp_path / "ordered"), opts, workers=1, quiet=True).splits[0].manifest
    samples = _read_tar(m.shard_url(0))
    keys = list(samples)
    paths = [json.loads(g["json"])["path"] for g in samples.values()]
    assert keys == sorted(keys) and paths == sorted(paths)
    assert all(min(Image.open(io.BytesIO(g["jpg"])).size) <= 16 for g in samples.values())


def test_main_process_of_a_pool_conversion_never_imports_torch(tmp_path):
    """Start-up: torch (~1 s) is imported once, in the pool's forkserver, not again in the main process."""
    from shardkit.demo.sampledata import make_imagefolder
    from tests.support.probes import run_fresh

    src = make_imagefolder(str(tmp_path / "src"), num_classes=2, per_class=3)
    code = (
        "import json, sys\n"
        "from shardkit.convert import ConvertConfig, EncodeConfig, convert\n"
        "r = convert(sys.argv[1], sys.argv[2], ConvertConfig(image=EncodeConfig(short_side=16)), workers=2, quiet=True)\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'n': r.splits[0].converted, 'enc': r.splits[0].manifest.options['encoder']}))\n"
    )
    out = run_fresh(code, src, str(tmp_path / "out"))
    assert out["n"] == 6 and not out["torch"]
    from shardkit.convert.imageproc import encoder_version

    assert out["enc"] == encoder_version()  # the workers' encoder, as this process would name it
