"""``convert --append DEST --remove FILE --relabel FILE`` against the same edits applied to the samples by hand.

The reference takes what a reader got before (key -> class name, image, path), removes the keys (a path: every
sample with that path) and renames the classes in plain Python; ``resolve()`` after the corrections must give
exactly that, and pinning an earlier generation must give what was there before.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.convert.corrections import correct
from shardkit.errors import ConvertError
from shardkit.format.manifest import load_manifest
from tests.support.data import write_source
from tests.support.living_reader import as_read, files_state

OPTS = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=2, seed=1)
A = [("ant", "001.png", 1), ("bee", "001.png", 2), ("ant", "002.png", 3), ("bee", "003.png", 4)]
B = [("ant", "001.png", 5), ("cat", "004.png", 6), ("bee", "005.png", 7)]  # ant/001.png again, another image


def _dataset(tmp: pathlib.Path) -> str:
    dest = str(tmp / "d")
    convert(write_source(str(tmp / "a"), A), dest, OPTS, workers=1, quiet=True)
    convert(write_source(str(tmp / "b"), B), dest, ConvertConfig(image=EncodeConfig(short_side=16), append=True),
            workers=1, quiet=True)  # fmt: skip
    return os.path.join(dest, "train")


def _view(samples: list[dict]) -> dict[str, tuple[str, int, str]]:
    return {s["key"]: (s["class"], s["id"], s["path"]) for s in samples}


def _write(path: pathlib.Path, lines: list[str]) -> str:
    path.write_text("".join(f"{x}\n" for x in lines))
    return str(path)


_EDITS = st.lists(
    st.tuples(st.sampled_from(["key", "path", "relabel"]), st.integers(0, 6), st.sampled_from(["ant", "cat", "eel"])),
    min_size=1,
    max_size=6,
)


@settings(phases=[Phase.explicit, Phase.generate], max_examples=4, deadline=None)
@given(rounds=st.lists(_EDITS, min_size=1, max_size=2))
@example(rounds=[[("path", 0, "ant")]])  # ant/001.png: two samples, both removed
@example(rounds=[[("relabel", 1, "eel"), ("key", 5, "ant")], [("relabel", 2, "cat")]])  # a new class; two rounds
@example(rounds=[[("relabel", 6, "ant")], [("key", 6, "ant")]])  # relabelled, then removed later
@example(rounds=[[("relabel", 1, "ant"), ("relabel", 1, "cat")]])  # one key twice: the last row wins
def test_removals_and_relabels_equal_the_same_edits_by_hand(rounds):
    with tempfile.TemporaryDirectory() as tmp:
        _edits_oracle(pathlib.Path(tmp), rounds)


def _edits_oracle(tmp: pathlib.Path, rounds: list) -> None:
    split = _dataset(tmp)
    want = _view(as_read(split))
    keys = sorted(want)
    history = [dict(want)]
    before = files_state(split)
    for r, edits in enumerate(rounds):
        removes, relabels = [], []
        for kind, n, cls in edits:
            key = keys[n % len(keys)]
            if kind == "key":
                removes.append(key)
                want.pop(key, None)
            elif kind == "path":
                path = history[0][key][2]
                removes.append(path)
                for k in [k for k, v in history[0].items() if v[2] == path]:
                    want.pop(k, None)
            else:
                relabels.append(f"{key},{cls}")
        last = {}
        for row in relabels:  # the last row of a key wins; a removed key stays removed
            k, cls = row.split(",")
            last[k] = cls
        for k, cls in last.items():
            if k in want:
                want[k] = (cls, *want[k][1:])
        correct(
            split,
            remove=_write(tmp / f"rm{r}", removes) if removes else None,
            relabel=_write(tmp / f"rl{r}", relabels) if relabels else None,
        )
        assert _view(as_read(split)) == want
        history.append(dict(want))
    m = load_manifest(split)
    assert len(m.generations) == 2 + len(rounds) and m.version == 4
    for g in range(1, len(m.generations)):  # every earlier generation reads as it was
        assert _view(as_read(split, generation=g)) == history[g - 1]
    assert m.classes[:3] == ["ant", "bee", "cat"]
    after = files_state(split)
    assert all(after[n] == v for n, v in before.items() if n != "manifest.json")


def test_bad_lines_are_refused_naming_file_and_line(tmp_path, capsys):
    split = _dataset(tmp_path)
    before = files_state(split)
    bad = _write(tmp_path / "rm", ["00000001", "ghost/009.png"])
    with pytest.raises(ConvertError, match=r"rm:2: 'ghost/009.png' is neither a key nor an original path"):
        correct(split, remove=bad)
    with pytest.raises(ConvertError, match=r"rl:1: key '99999999' is not a sample"):
        correct(split, relabel=_write(tmp_path / "rl", ["99999999,ant"]))
    with pytest.raises(ConvertError, match=r"rl2:1: 'x' is not a 'key,class' row"):
        correct(split, relabel=_write(tmp_path / "rl2", ["x"]))
    assert files_state(split) == before
    dest = os.path.dirname(split)
    rc = main(["convert", "--append", dest, "--remove", bad])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "rm:2:" in err and "\n" not in err
    (tmp_path / "sel").mkdir()
    (tmp_path / "sel" / "manifest.json").write_text(json.dumps({"format": "shardkit-selection"}))
    rc = main(["convert", "--append", str(tmp_path / "sel"), "--remove", bad])
    assert rc != 0 and "is a selection" in capsys.readouterr().err


def test_the_cli_records_once_and_says_what_a_path_removed(tmp_path, capsys):
    split = _dataset(tmp_path)
    rm = _write(tmp_path / "rm", ["ant/001.png"])
    rl = _write(tmp_path / "rl", ["00000001,eel"])
    assert main(["convert", "--append", os.path.dirname(split), "--remove", rm, "--relabel", rl]) == 0
    out = capsys.readouterr().out
    assert "names 2 samples" in out and "generation 2: removed 2, relabeled 1; classes added: eel" in out
    assert main(["convert", "--append", os.path.dirname(split), "--remove", rm, "--relabel", rl]) == 0
    assert "already records these corrections" in capsys.readouterr().out
    m = load_manifest(split)
    assert len(m.generations) == 3 and m.classes[-1] == "eel"
    assert m.generations[2].corrections is not None and m.generations[2].corrections.removed == 2


def test_an_append_after_corrections_keeps_them_and_continues_the_keys(tmp_path):
    """week 1, week 2, a correction, week 3: the removed samples stay removed, the relabel stays, the new
    samples' keys come after every earlier key (a removed key is never reused)."""
    split = _dataset(tmp_path)
    correct(split, remove=_write(tmp_path / "rm", ["00000004"]), relabel=_write(tmp_path / "rl", ["00000000,eel"]))
    want = _view(as_read(split))
    c = write_source(str(tmp_path / "c"), [("dog", "009.png", 9)])
    convert(c, os.path.dirname(split), ConvertConfig(image=EncodeConfig(short_side=16), append=True),
            workers=1, quiet=True)  # fmt: skip
    got = _view(as_read(split))
    new = {k: v for k, v in got.items() if k not in want}
    assert {k: got[k] for k in want} == want and list(new.values()) == [("dog", 9, "dog/009.png")]
    assert int(next(iter(new))) == 7  # after keys 0..6 of weeks 1 and 2, removed 00000004 included
    m = load_manifest(split)
    assert m.version == 4 and len(m.generations) == 4 and m.classes[-1] == "dog"
