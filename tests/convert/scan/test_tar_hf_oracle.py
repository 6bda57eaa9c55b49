"""Differential oracles for the tar and Hugging Face sources.

Hypothesis generates inputs; a deliberately simple reference written here (a plain ``tarfile`` loop, a plain
loop over a dataset's rows) decides, per input, "one sample of class NAME with colour C" or "skipped (reason)",
or that the whole source is refused. shardkit converts the same input (workers=1, tiny images); the shards are
read back with plain ``tarfile`` and every input must be exactly one sample with the reference's class name and
pixels (mean colour within a JPEG tolerance), or in ``skipped`` with the reference's reason; nothing else.

Every image is a solid colour from :data:`PALETTE`, unique per input, so its pixels say which input it came
from. Converted splits are found through the returned ``ConvertResult`` (``splits[i].url`` by ``.split``).

The reference's rules, as the README and the modules' docstrings state them:

* tar members: ``dir/stem.ext`` is field ``ext`` (lower case) of sample ``dir/stem``; a name without a dot in its
  base name, with an empty stem or starting with ``__`` belongs to no sample; an absolute or ``..`` name makes
  its sample ``bad_name``; consecutive members with one key are one sample, a repeated field starts a new one;
  a key seen before in the tar is ``duplicate_path`` (``key (again)``, ``key (again 2)``...);
  then no image: ``missing_file``; an unparsable ``.json``: ``bad_metadata``; no / empty / ``[]`` / ``null``
  label: ``no_label``; a list, float, bool, object, or a negative index: ``bad_label``; an image that is not one:
  ``not_an_image``.
* labels: all indices -> classes ``"0"``..``"max"``; all names -> sorted names; both -> refused.
* HF: ClassLabel (-1: ``no_label``), int and string columns as above; float/bool columns and lists that are not
  empty are refused; ClassLabel splits must agree; a string split's names join the ClassLabel's (new names after
  them, sorted; a digit string that is not a name is refused); an int split next to a ClassLabel split is refused;
  a row without an image is ``missing_file``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.convert.scan.hf import scan_hf
from shardkit.errors import ConvertError

#: 64 solid colours, 70 apart on each channel: a JPEG of one is within a few levels of it
PALETTE = [((i % 4) * 70 + 20, ((i // 4) % 4) * 70 + 20, ((i // 16) % 4) * 70 + 20) for i in range(64)]
TOLERANCE = 20
#: what the oracles compared, over a run (``pytest -s`` prints it: the input counts in the notes)
TALLY: Counter = Counter()
IMG = EncodeConfig(short_side=8)
_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
#: no shrinking unless asked (SHARDKIT_ORACLE_SHRINK=1): the inputs are small enough to read unshrunk, and the mutant
#: gate (tools/mutants.py) needs the first failure fast, not minimal
_PHASES = (
    tuple(Phase) if os.environ.get("SHARDKIT_ORACLE_SHRINK") == "1" else (Phase.explicit, Phase.reuse, Phase.generate)
)
#: the same examples on every run (the gate's verdicts must not depend on luck); SHARDKIT_ORACLE_RANDOM=1 explores anew
_DERANDOMIZE = os.environ.get("SHARDKIT_ORACLE_RANDOM") != "1"
TAR_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=_HEALTH,
    phases=_PHASES,
    report_multiple_bugs=False,
    derandomize=_DERANDOMIZE,
    database=None if _DERANDOMIZE else settings.default.database,
)
HF_SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=_HEALTH,
    phases=_PHASES,
    report_multiple_bugs=False,
    derandomize=_DERANDOMIZE,
    database=None if _DERANDOMIZE else settings.default.database,
)


def _image(colour_id: int, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (10, 8), PALETTE[colour_id]).save(buf, fmt)
    return buf.getvalue()


def _colour_of(jpeg: bytes) -> int:
    """The palette id nearest to the image's mean colour (asserted within :data:`TOLERANCE`)."""
    mean = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"), dtype=np.float64).mean(axis=(0, 1))
    dist = [float(np.abs(mean - np.array(c)).max()) for c in PALETTE]
    best = int(np.argmin(dist))
    assert dist[best] <= TOLERANCE, f"mean colour {mean} is no palette colour"
    return best


def _read_converted(result) -> dict[str, dict[str, Any]]:
    """``{split: {"classes": [...], "samples": {path: (class name, colour id)}, "skipped": {path: reason}}}``, read
    with plain json and tarfile from the split folders the result names."""
    out = {}
    for s in result.splits:
        if not s.written:  # a split with no sample: not written, reported with its skips
            assert s.converted == 0 and not os.path.exists(s.url), s.url
            out[s.split] = {"classes": None, "samples": {}, "skipped": {f.path: f.reason for f in s.skipped_files}}
            continue
        with open(os.path.join(s.url, "manifest.json")) as f:
            m = json.load(f)
        samples: dict[str, tuple[str, int]] = {}
        for shard in m["shards"]:
            with tarfile.open(os.path.join(s.url, shard["name"])) as tf:
                got: dict[str, dict[str, bytes]] = {}
                for mem in tf.getmembers():
                    key, ext = mem.name.split(".", 1)
                    assert ext not in got.setdefault(key, {}), f"{mem.name} twice"
                    got[key][ext] = tf.extractfile(mem).read()
            for key, g in got.items():
                assert sorted(g) == ["cls", "jpg", "json"], key
                meta = json.loads(g["json"])
                name = m["classes"][int(g["cls"])]
                assert meta["class"] == name
                assert meta["path"] not in samples, f"{meta['path']} is two samples"
                samples[meta["path"]] = (name, _colour_of(g["jpg"]))
        skipped = {}
        for k in m["skipped"]:
            assert k["path"] not in skipped and k["path"] not in samples, f"{k['path']} accounted twice"
            skipped[k["path"]] = k["reason"]
        out[s.split] = {"classes": m["classes"], "samples": samples, "skipped": skipped}
    return out


# ------------------------------------------------------------------------------------------------ labels

#: raw label text -> what it is: ("index", n), ("name", s), or a skip reason
_TEXT = {
    "cat": ("name", "cat"),
    "dog": ("name", "dog"),
    " emu ": ("name", "emu"),
    "0": ("index", 0),
    "1": ("index", 1),
    "2": ("index", 2),
    " 3\n": ("index", 3),
    "-1": "bad_label",
    "2.5": "bad_label",
    "true": "bad_label",
    "False": "bad_label",
    "[0,1]": "bad_label",
    "[]": "no_label",
    "": "no_label",
    "null": "no_label",
    "1e3": "bad_label",
    '{"a": 1}': "bad_label",
}
NAMES, INDICES = ["cat", "dog", " emu "], ["0", "1", "2", " 3\n", "-1"]
ODD = ["2.5", "true", "False", "[0,1]", "[]", "", "null", "1e3", '{"a": 1}', "-1"]


def _ref_value(v: Any) -> Any:
    """A JSON label value by the reference's table (ints are indices; other non-strings are bad; None / [] none)."""
    if v is None or v == []:
        return "no_label"
    if isinstance(v, bool) or isinstance(v, (float, list, dict)):
        return "bad_label"
    if isinstance(v, int):
        return ("index", v) if v >= 0 else "bad_label"
    return _TEXT[v]


def _one_based(labelled: list[tuple]) -> bool:
    """Only integer labels, none of them 0 (1-based labels would add an empty class ``"0"``): ``--label-type auto``
    refuses these in one line (the source helper's ``read_labels``), which :func:`_convert_or_one_based_refusal` accepts."""
    return bool(labelled) and all(t[0] == "index" for t in labelled) and min(t[1] for t in labelled) > 0


def _convert_or_one_based_refusal(ref: dict, *args, **kw):
    """``convert(*args, **kw)``, or ``None`` when the reference saw 1-based labels and shardkit refused them in one line."""
    try:
        return convert(*args, **kw)
    except ConvertError as exc:
        if not ref.get("one_based") or "\n" in str(exc) or "not 0" not in str(exc):
            raise
        return None


def _ref_classes(labelled: list[tuple]) -> list[str] | None:
    """Classes of the labelled values, or ``None`` when names and indices are mixed (refused)."""
    kinds = {t[0] for t in labelled}
    if kinds == {"index", "name"}:
        return None
    if kinds == {"index"}:
        return [str(i) for i in range(max(t[1] for t in labelled) + 1)]
    return sorted({t[1] for t in labelled})


def _name_of(t: tuple) -> str:
    return str(t[1])


# ------------------------------------------------------------------------------------------------ tars

_KEYS = ["a", "b", "c", "d/e", "f", "g/h/i"]
_ODD_NAMES = ["README", "__key__.txt", ".hidden.jpg", "../up.jpg", "/abs/x.cls", "d/e.seg.png", "a.txt", "a.b.c.JPEG"]
_ODD_JSON = [2.5, True, [0, 1], [], None, {"x": 1}]


@st.composite
def tar_inputs(draw):
    """``(mode, tars)``: mode is "cls", "lab" or "class" (the label's member/field); tars are lists of
    ``(member name, kind, value)``: kind "image" (value: (colour id, format)), "garbage", "cls" (text), "json" (object
    or the text of a broken one), "other".

    A tar is a run of sample blocks (a key and some of its fields in any order; keys repeat, adjacent or not),
    with members outside the rule sprinkled in and, rarely, a label of the other kind (names next to indices)."""
    mode = draw(st.sampled_from(["cls", "lab", "class"]))
    pool = draw(st.sampled_from([NAMES, INDICES]))
    other = INDICES if pool is NAMES else NAMES
    odd = ODD if mode == "cls" else ODD + _ODD_JSON
    good = pool if mode == "cls" else pool + ([0, 1, 2, -1] if pool is INDICES else [])

    def label():  # mostly the pool's; odd values; rarely the other kind (a mix refuses the whole source)
        r = draw(st.integers(0, 39))
        return draw(st.sampled_from(other if r == 0 else odd if r < 10 else good))

    colour = iter(range(64))
    tars = []
    for _ in range(draw(st.integers(1, 2))):
        members = []
        for block in range(draw(st.integers(0, 6))):
            # a fresh key mostly; a key from a small pool (so repeated, adjacent or not) otherwise
            key = (
                draw(st.sampled_from(_KEYS))
                if draw(st.integers(0, 2)) == 0
                else f"k{block}" + draw(st.sampled_from(["", "/x"]))
            )
            fields = draw(
                st.lists(
                    st.sampled_from(["jpg", "jpg", "JPG", "png", "garbage", "cls", "json", "txt"]),
                    min_size=1,
                    max_size=5,
                    unique=draw(st.booleans()),
                )
            )  # not unique: repeated fields
            if draw(st.integers(0, 3)):  # most blocks are whole samples: an image and a label
                fields += [f for f in (["jpg", "cls" if mode == "cls" else "json"]) if f not in fields]
            for kind in draw(st.permutations(fields)):
                if kind in ("jpg", "JPG", "png"):
                    members.append((f"{key}.{kind}", "image", (next(colour), "PNG" if kind == "png" else "JPEG")))
                elif kind == "garbage":
                    members.append((f"{key}.jpg", "garbage", None))
                elif kind == "cls":
                    members.append((f"{key}.cls", "cls", label() if mode == "cls" else draw(st.sampled_from(pool))))
                elif kind == "json":
                    if draw(st.integers(0, 9)) == 0:
                        members.append((f"{key}.json", "json", '{"broken": '))
                    else:
                        obj: dict[str, Any] = {"caption": key}
                        if mode != "cls" and draw(st.integers(0, 5)):
                            obj[mode] = label()
                        members.append((f"{key}.json", "json", obj))
                else:
                    members.append((f"{key}.txt", "other", None))
            if draw(st.integers(0, 4)) == 0:
                members.append((draw(st.sampled_from(_ODD_NAMES)), "other", None))
        tars.append(members)
    return mode, tars


def _member_bytes(kind: str, value: Any) -> bytes:
    if kind == "image":
        return _image(*value)
    if kind == "garbage":
        return b"not an image at all"
    if kind == "cls":
        return value.encode()
    if kind == "json":
        return (value if isinstance(value, str) else json.dumps(value)).encode()
    return b"foreign"


def _write_tars(folder: str, tars: list) -> str:
    os.makedirs(folder)
    for t, members in enumerate(tars):
        with tarfile.open(os.path.join(folder, f"t{t}.tar"), "w") as tf:
            for name, kind, value in members:
                data = _member_bytes(kind, value)
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return os.path.join(folder, f"t{{0..{len(tars) - 1}}}.tar") if len(tars) > 1 else os.path.join(folder, "t0.tar")


def reference_tars(folder: str, mode: str) -> dict[str, Any]:
    """The deliberately simple reference: a plain tarfile loop over the written tars.

    Returns ``{"error": True}`` or ``{"classes", "samples": {path: (class name, colour id)}, "skipped": {path: reason}}``.
    """
    groups = []  # (identity, {ext: member data}, unsafe)
    for tname in sorted(f for f in os.listdir(folder) if f.endswith(".tar")):
        with tarfile.open(os.path.join(folder, tname)) as tf:
            seen: dict[str, int] = {}
            current: dict | None = None
            for mem in tf.getmembers():
                name = mem.name
                base = name.split("/")[-1]
                unsafe = name.startswith("/") or ".." in name.split("/")
                if not unsafe and ("." not in base or base.startswith(".") or base.startswith("__")):
                    continue  # belongs to no sample
                key = name[: len(name) - len(base)] + base.split(".")[0]
                ext = base.split(".", 1)[1].lower()
                if current is None or current["key"] != key or ext in current["fields"]:
                    n = seen.get(key, -1) + 1
                    seen[key] = n
                    current = {"key": key, "fields": {}, "again": n, "unsafe": False, "tar": tname}
                    groups.append(current)
                current["fields"][ext] = tf.extractfile(mem).read()
                current["unsafe"] |= unsafe
    samples: dict[str, tuple] = {}
    skipped: dict[str, str] = {}
    for g in groups:
        ident = f"{g['tar']}/{g['key']}" + (
            "" if not g["again"] else " (again)" if g["again"] == 1 else f" (again {g['again']})"
        )
        f = g["fields"]
        if g["unsafe"] or g["again"]:
            skipped[ident] = "bad_name" if g["unsafe"] else "duplicate_path"
            continue
        image = next((f[e] for e in ("jpg", "jpeg", "png", "webp") if e in f), None)
        meta: Any = {}
        broken = False
        if "json" in f:
            try:
                meta = json.loads(f["json"])
            except ValueError:
                broken = True
        if mode == "cls":
            label = _TEXT[f["cls"].decode()] if "cls" in f else "no_label"
        else:
            label = _ref_value(meta.get(mode)) if isinstance(meta, dict) else "no_label"
        if image is None:
            skipped[ident] = "missing_file"
        elif broken:
            skipped[ident] = "bad_metadata"
        elif isinstance(label, str):
            skipped[ident] = label
        else:
            samples[ident] = (label, image)
    if not samples:
        return {"error": True}
    classes = _ref_classes([label for label, _ in samples.values()])
    if classes is None:
        return {"error": True}
    out = {}
    for ident, (label, image) in samples.items():
        try:
            colour = _colour_of(image)
        except Exception:  # noqa: BLE001 - not an image: PIL cannot open it
            skipped[ident] = "not_an_image"
            continue
        out[ident] = (_name_of(label), colour)
    return {
        "classes": classes,
        "samples": out,
        "skipped": skipped,
        "one_based": _one_based([t for t, _ in samples.values()]),
    }


@TAR_SETTINGS
@given(data=tar_inputs())
# a repeated field starts a new sample: x.jpg(red) x.cls(0) x.jpg(blue); and a garbage image, a -1 among names, a .json "class" label
@example(
    data=(
        "cls",
        [
            [
                ("x.jpg", "image", (48, "JPEG")),
                ("x.cls", "cls", "0"),
                ("x.jpg", "image", (3, "JPEG")),
                ("y.jpg", "garbage", None),
                ("y.cls", "cls", "1"),
                ("z.png", "image", (5, "PNG")),
                ("z.cls", "cls", "1"),
            ]
        ],
    )
)
@example(
    data=(
        "cls",
        [
            [
                ("a.jpg", "image", (1, "JPEG")),
                ("a.cls", "cls", "cat"),
                ("b.jpg", "image", (2, "JPEG")),
                ("b.cls", "cls", "-1"),
                ("c.jpg", "image", (7, "JPEG")),
                ("c.cls", "cls", "2.5"),
            ]
        ],
    )
)
@example(
    data=(
        "class",
        [
            [
                ("a.jpg", "image", (1, "JPEG")),
                ("a.json", "json", {"class": "dog"}),
                ("b.jpg", "image", (9, "JPEG")),
                ("b.json", "json", {"class": True}),
                ("a.jpg", "image", (4, "JPEG")),
            ]
        ],
    )
)
def test_tar_source_matches_the_reference(tmp_path_factory, data):
    mode, tars = data
    tmp = tmp_path_factory.mktemp("tars")
    pattern = _write_tars(str(tmp / "in"), tars)
    ref = reference_tars(str(tmp / "in"), mode)
    TALLY.update({"tar examples": 1, "tars": len(tars), "tar members": sum(map(len, tars))})
    event(
        "tars: refused" if ref.get("error") else "tars: no image decodes" if not ref["samples"] else "tars: converted"
    )
    opts = ConvertConfig(image=IMG, shard_size=3, source=ScanConfig(label_json_field=None if mode == "cls" else mode))
    if ref.get("error"):  # refused by the source itself, in one line, before anything is written
        from shardkit.convert.scan.tars import scan_tars

        with pytest.raises(ConvertError) as e:
            scan_tars(pattern, opts.source)
        assert "\n" not in str(e.value)
        return
    result = _convert_or_one_based_refusal(ref, pattern, str(tmp / "out"), opts, workers=1, quiet=True)
    if result is None:
        return
    got = _read_converted(result)
    assert list(got) == ["train"]
    (split,) = got.values()
    if ref["samples"]:  # with none (every image failed to decode) the split may still be written, holding its skips
        assert split["classes"] == ref["classes"]
    assert split["samples"] == ref["samples"]
    assert split["skipped"] == ref["skipped"]
    TALLY.update(
        {
            "tar samples": len(ref["samples"]),
            **{f"tar skipped {r}": n for r, n in Counter(ref["skipped"].values()).items()},
        }
    )


# ------------------------------------------------------------------------------------------------ Hugging Face

CL_NAMES = ["zebra", "ant", "moth"]


@st.composite
def hf_inputs(draw):
    """``(splits, as_dict, binary)``: splits maps a split name to ``(feature kind, labels, images)``; an image is a
    colour id or None (no image)."""
    colour = iter(range(64))
    n_splits = draw(st.integers(1, 2))
    out = {}
    for name in ["train", "test"][:n_splits]:
        kinds = ["classlabel"] * 4 + ["classlabel_other", "int", "int", "str", "str", "str", "odd", "odd"]
        pick = draw(st.integers(0, 2)) if out else 2  # a second split: like the first, an odd one, or any
        kind = out["train"][0] if pick == 0 else "odd" if pick == 1 else draw(st.sampled_from(kinds))
        kind = draw(st.sampled_from(["float", "bool", "list"])) if kind == "odd" else kind
        values = {
            "classlabel": st.one_of(st.integers(-1, 2), st.none()),
            "classlabel_other": st.integers(-1, 2),
            "int": st.one_of(st.integers(-1, 3), st.none()),
            "str": st.one_of(
                *[st.sampled_from(["ant", "zebra", "bee", " moth "])] * 4,
                st.sampled_from(["", None, "[0, 1]", "2.5", "True", "[]"]),
                st.just("0") if draw(st.integers(0, 4)) == 0 else st.nothing(),
            ),
            "float": st.floats(0, 3, allow_nan=False),
            "bool": st.booleans(),
            "list": st.one_of(st.just([]), st.lists(st.integers(0, 2), max_size=2)),
        }[kind]
        rows = draw(st.integers(1, 6))
        labels = [draw(values) for _ in range(rows)]
        images = [next(colour) if draw(st.integers(0, 6)) else None for _ in range(rows)]
        out[name] = (kind, labels, images)
    return out, n_splits > 1 or draw(st.booleans()), draw(st.booleans())


def _hf_feature(datasets, kind: str):
    return {
        "classlabel": datasets.ClassLabel(names=CL_NAMES),
        "classlabel_other": datasets.ClassLabel(names=CL_NAMES[::-1]),
        "int": datasets.Value("int64"),
        "str": datasets.Value("string"),
        "float": datasets.Value("float32"),
        "bool": datasets.Value("bool"),
        "list": datasets.List(datasets.Value("int64")),
    }[kind]


def _hf_dataset(datasets, splits: dict, as_dict: bool, binary: bool):
    parts = {}
    for name, (kind, labels, images) in splits.items():
        pngs = [_image(c, "PNG") if c is not None else None for c in images]
        col = pngs if binary else [{"bytes": b, "path": None} if b else None for b in pngs]
        feats = datasets.Features(
            {
                "image": datasets.Value("binary") if binary else datasets.Image(),
                "label": _hf_feature(datasets, kind),
                "caption": datasets.Value("string"),
            }
        )
        parts[name] = datasets.Dataset.from_dict(
            {"image": col, "label": labels, "caption": [f"c{i}" for i in range(len(labels))]}, features=feats
        )
    return datasets.DatasetDict(parts) if as_dict else parts["train"]


def reference_hf(splits: dict) -> dict[str, Any]:
    """The deliberately simple reference: a plain loop over each split's rows (see the module docstring)."""
    kinds = {name: kind for name, (kind, _, _) in splits.items()}
    if any(k in ("float", "bool") for k in kinds.values()):
        return {"error": True}
    if any(k == "list" and any(labels) for k, (_, labels, _) in zip(kinds.values(), splits.values())):
        return {"error": True}
    cl = [k for k in kinds.values() if k.startswith("classlabel")]
    if len(set(cl)) > 1 or (cl and "int" in kinds.values()):
        return {"error": True}
    cl_names = (CL_NAMES if cl[0] == "classlabel" else CL_NAMES[::-1]) if cl else None
    one_based = False
    labelled: dict[str, dict[str, tuple]] = {}
    skipped: dict[str, dict[str, str]] = {}
    for name, (kind, labels, _images) in splits.items():
        labelled[name], skipped[name] = {}, {}
        for i, v in enumerate(labels):
            row = f"row-{i:08d}"
            if kind.startswith("classlabel"):
                t = "no_label" if v is None or v == -1 else ("cl", v)
            elif kind == "list":
                t = "no_label"
            else:
                t = (
                    {
                        " moth ": ("name", "moth"),
                        "ant": ("name", "ant"),
                        "zebra": ("name", "zebra"),
                        "bee": ("name", "bee"),
                        "0": ("index", 0),
                        "[0, 1]": "bad_label",
                        "2.5": "bad_label",
                        "True": "bad_label",
                        "[]": "no_label",
                        "": "no_label",
                    }.get(v, "no_label")
                    if not isinstance(v, int)
                    else (("index", v) if v >= 0 else "bad_label")
                )
            if isinstance(t, str):
                skipped[name][row] = t
            else:
                labelled[name][row] = t
    everything = [t for rows in labelled.values() for t in rows.values()]
    if cl_names is not None:
        extra = sorted({t[1] for t in everything if t[0] == "name"} - set(cl_names))
        if any(t[0] == "index" for t in everything):  # a digit string next to a ClassLabel
            return {"error": True}
        classes = cl_names + extra
        named = {
            name: {row: (cl_names[t[1]] if t[0] == "cl" else t[1]) for row, t in rows.items()}
            for name, rows in labelled.items()
        }
    else:
        classes = _ref_classes(everything) if everything else []
        if classes is None:
            return {"error": True}
        one_based = _one_based(everything)
        named = {name: {row: str(t[1]) for row, t in rows.items()} for name, rows in labelled.items()}
    out: dict[str, Any] = {}
    for name, (_kind, _labels, images) in splits.items():
        samples = {}
        for row, cname in named[name].items():
            colour = images[int(row[4:])]
            if colour is None:
                skipped[name][row] = "missing_file"
            else:
                samples[row] = (cname, colour)
        out[name] = {"samples": samples, "skipped": dict(skipped[name])}
    if not any(named.values()):
        return {"error": True}  # no split has a labelled row: refused at the scan
    return {"classes": classes, "splits": out, "scan": named, "one_based": one_based}


@HF_SETTINGS
@given(data=hf_inputs())
# a Hub-like test split of -1 next to train; a float split next to a ClassLabel one; ClassLabels in two orders
@example(data=({"train": ("classlabel", [0, 1, -1], [0, 1, 2]), "test": ("classlabel", [-1, -1], [3, 4])}, True, False))
@example(data=({"train": ("classlabel", [0, 2], [0, 1]), "test": ("float", [0.0, 1.5], [2, 3])}, True, True))
@example(data=({"train": ("classlabel", [0, 2], [0, 1]), "test": ("classlabel_other", [1], [2])}, True, False))
@example(
    data=(
        {
            "train": ("classlabel", [0, None, 2], [0, 1, None]),
            "test": ("str", ["ant", "bee", "[]", "2.5"], [2, 3, 4, 5]),
        },
        True,
        False,
    )
)
def test_hf_source_matches_the_reference(tmp_path_factory, data):
    datasets = pytest.importorskip("datasets")
    splits, as_dict, binary = data
    if not as_dict:
        splits = {"train": splits["train"]}
    ds = _hf_dataset(datasets, splits, as_dict, binary)
    ref = reference_hf(splits)
    TALLY.update(
        {
            "hf examples": 1,
            "hf splits": len(splits),
            "hf rows": sum(len(v[1]) for v in splits.values()),
            **{f"hf {kind} splits": 1 for kind, _, _ in splits.values()},
        }
    )
    dest = str(tmp_path_factory.mktemp("hf") / "out")
    opts = ConvertConfig(image=IMG, shard_size=3)
    if ref.get("error"):
        event("hf: refused")
        with pytest.raises(ConvertError) as e:  # by the source itself, in one line, before anything is written
            scan_hf(ds, ScanConfig())
        assert "\n" not in str(e.value)
        return

    try:
        source = scan_hf(ds, ScanConfig())
    except ConvertError as exc:
        assert ref["one_based"] and "not 0" in str(exc) and "\n" not in str(exc), exc
        return  # the scan level holds every split, an empty one too
    assert source.classes == ref["classes"]
    for s in source.splits:
        want = ref["splits"][s.name]
        assert {f.relpath: source.classes[f.label] for f in s.files} == ref["scan"][s.name]
        assert {p: r.value for p, r, _ in s.skipped} == {
            r: why for r, why in want["skipped"].items() if why != "missing_file"
        }
    TALLY.update({"hf scanned splits": len(source.splits)})
    event(
        "hf: converted, a split without samples"
        if any(not s["samples"] for s in ref["splits"].values())
        else "hf: converted"
    )
    if not any(w["samples"] for w in ref["splits"].values()):  # every row's image missing when read
        with pytest.raises(ConvertError, match="no split has a sample") as e:
            convert(ds, dest, opts, workers=1, quiet=True)
        assert "\n" not in str(e.value) and not os.path.exists(dest)
        return
    got = _read_converted(_convert_or_one_based_refusal(ref, ds, dest, opts, workers=1, quiet=True))
    assert sorted(got) == sorted(ref["splits"])
    for name, want in ref["splits"].items():
        if want["samples"]:
            assert got[name]["classes"] == ref["classes"]
        assert got[name]["samples"] == want["samples"]
        assert got[name]["skipped"] == want["skipped"]
        TALLY.update({"hf samples": len(want["samples"]), "hf skipped rows": len(want["skipped"])})


@pytest.fixture(scope="module", autouse=True)
def _print_tally():
    yield
    if TALLY:
        print("\noracle input counts: " + ", ".join(f"{k}: {v}" for k, v in sorted(TALLY.items())))
