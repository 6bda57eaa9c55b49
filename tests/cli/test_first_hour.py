"""A new user's first hour: the README's Quick start as written, ``sample-data --format coco|voc|yolo|masks``
and the command it prints, and where the demo and the examples say they wrote their files."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.cli import main
from shardkit.demo.scenes import CLASSES, scene
from tests.support.repo import ROOT

README = os.path.join(ROOT, "README.md")


# --- sample-data --format: the source, the printed command, the converted targets -----------------------------


def _converted(dest: str) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Every sample below ``dest`` read with plain ``tarfile`` and ``json``: ``(classes, {source path: members})``."""
    out: dict[str, dict[str, Any]] = {}
    classes: list[str] = []
    for split in sorted(os.listdir(dest)):
        folder = os.path.join(dest, split)
        with open(os.path.join(folder, "manifest.json")) as f:
            classes = json.load(f)["classes"]
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".tar"):
                continue
            with tarfile.open(os.path.join(folder, name)) as t:
                members: dict[str, dict[str, bytes]] = {}
                for m in t.getmembers():
                    key, ext = m.name.split(".", 1)
                    members.setdefault(key, {})[ext] = t.extractfile(m).read()  # type: ignore[union-attr]
            for parts in members.values():
                out[json.loads(parts["json"])["path"]] = parts
    return classes, out


def _scene_of(path: str) -> int:
    """The scene index in a sample's source path (``images/000007.jpg`` -> 7)."""
    m = re.fullmatch(r"(?:.*/)?(\d{6})\.jpg", path)
    assert m, path
    return int(m.group(1))


FORMATS = ["coco", "voc", "yolo", "masks"]


@settings(
    phases=[Phase.explicit, Phase.generate],
    max_examples=2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@example(seed=0, width=160, height=120, images=5)
@example(seed=7, width=41, height=97, images=3)  # odd sides: YOLO centres at half pixels, a portrait image
@given(seed=st.integers(0, 10**6), width=st.integers(32, 240), height=st.integers(32, 240), images=st.integers(1, 6))
@pytest.mark.parametrize("fmt", FORMATS)
def test_sample_data_source_converts_to_the_scenes(
    tmp_path: Any, capsys: Any, fmt: str, seed: int, width: int, height: int, images: int
) -> None:
    """Each format written, its printed command run as printed: every image a sample, every box (class by name,
    pixel edges) and every mask pixel equal to the scene generator's ground truth."""
    root = tmp_path / f"{fmt}-{seed}-{width}x{height}-{images}"
    src = str(root / "src")
    size = f"{width}x{height}"
    assert (
        main(["sample-data", src, "--format", fmt, "--images", str(images), "--seed", str(seed), "--size", size]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("next: shardkit convert "), lines
    argv = shlex.split(lines[-1][len("next: ") :])
    assert argv[:2] == ["shardkit", "convert"], argv
    assert main([*argv[1:], "--quiet"]) == 0
    capsys.readouterr()
    dest = src + "-shards"
    assert sorted(os.listdir(dest)) == ["train"]
    classes, samples = _converted(dest)
    assert sorted(_scene_of(p) for p in samples) == list(range(images))
    from PIL import Image

    for path, parts in samples.items():
        s = scene(seed, _scene_of(path), (width, height))
        image = Image.open(io.BytesIO(parts["jpg"]))
        assert image.size == (width, height), path  # never upscaled, small enough not to be resized
        want = sorted((CLASSES[c], *b) for b, c in zip(s.objects.boxes.tolist(), s.objects.labels.tolist()))
        if fmt == "masks":
            assert "objects.json" not in parts
        else:
            objs = json.loads(parts["objects.json"])
            got = sorted((classes[c], *b) for b, c in zip(objs["boxes"], objs["labels"]))
            assert [g[0] for g in got] == [w[0] for w in want], path
            assert np.allclose([g[1:] for g in got], [w[1:] for w in want], atol=1e-3, rtol=0), (path, got, want)
        if fmt in ("coco", "masks"):
            mask = np.asarray(Image.open(io.BytesIO(parts["mask.png"])))
            names = np.array(classes)[mask]  # class names per pixel, compared by name
            assert (names == np.array(CLASSES)[s.mask]).all(), path
        else:
            assert "mask.png" not in parts


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--format", "coco", "--per-class", "3"], "--per-class: only for --format imagefolder"),
        (["--format", "yolo", "--classes", "2"], "--classes: only for --format imagefolder"),
        (["--images", "3"], "--images: only for --format coco|voc|yolo|masks"),
        (["--format", "voc", "--size", "20x40"], "--size must be at least 32x32"),
    ],
)
def test_sample_data_options_of_another_format_are_one_line_errors(
    tmp_path: Any, capsys: Any, argv: list[str], message: str
) -> None:
    assert main(["sample-data", str(tmp_path / "d"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "d").exists()


def test_sample_data_refuses_a_folder_that_holds_files(tmp_path: Any, capsys: Any) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("")
    assert main(["sample-data", str(tmp_path / "d"), "--format", "masks"]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err


# --- the README's Quick start, as written ------------------------------------------------------------------------


def quick_start_lines(readme: str) -> list[list[str]]:
    """The commands of the first ``bash`` block under "Quick start: convert, then load", comments dropped."""
    section = readme.split("## Quick start: convert, then load", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [argv for argv in (shlex.split(line, comments=True) for line in block.splitlines()) if argv]


def _setup_torch_pins(readme: str) -> list[str]:
    """The ``torch==``/``torchvision==`` pins of the README's set-up commands."""
    return sorted(set(re.findall(r"\btorch(?:vision)?==[\w.]+", readme.split("## Quick start", 1)[0])))


@pytest.mark.slow
def test_quick_start_as_written_ends_with_a_bench_result(tmp_path: Any) -> None:
    """Every ``shardkit`` line of the Quick start runs as written (in a fresh folder); the install line installs
    the clone with the set-up's torch pins; ``bench`` prints a steady-state result and a verdict, not "too small";
    the training line names the split the conversion wrote and arguments its script accepts."""
    import runpy

    with open(README) as f:
        readme = f.read()
    lines = quick_start_lines(readme)
    kinds = [argv[0] for argv in lines]
    assert kinds[0] == "pip" and kinds[-1] == "torchrun" and set(kinds[1:-1]) == {"shardkit"}, kinds
    install = lines[0]
    assert install[:2] == ["pip", "install"] and "-e" in install and ".[s3]" in install, install
    assert sorted(a for a in install if "==" in a) == _setup_torch_pins(readme)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = ""
    for argv in lines[1:-1]:
        r = subprocess.run(
            [sys.executable, "-m", "shardkit", *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert r.returncode == 0, (argv, r.stderr[-2000:])
        out = r.stdout
    assert lines[-2][1] == "bench", lines[-2]
    assert "too small" not in out, out
    assert re.search(r"^best: \d+ ± \d+ img/s with \d+ workers", out, re.M), out
    assert re.search(r"^verdict \(--(step-ms|model)", out, re.M), out
    train = lines[-1]
    script = os.path.join(ROOT, train[train.index("--nproc-per-node") + 2])
    args = runpy.run_path(script, run_name="quick_start")["parse_args"](
        train[train.index(script[len(ROOT) + 1 :]) + 1 :]
    )
    assert os.path.isfile(os.path.join(tmp_path, args.data, "manifest.json")), args.data


# --- the demo and the examples say where their files are and what to run next ------------------------------------


def test_demo_ends_with_where_its_files_are_and_what_to_run_next(tmp_path: Any, capsys: Any) -> None:
    """A small demo through the CLI: its last lines name folders that hold what they say, and the commands they
    suggest run (``shardkit`` ones here; the training script's arguments are parsed by the script)."""
    import runpy

    work = str(tmp_path / "demo")
    argv = ["demo", "--workdir", work, "--classes", "2", "--per-class", "8", "--epochs", "1", "--image-size", "32"]
    assert main([*argv, "--batch-size", "8", "--workers", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    wrote = [line for line in out if line.startswith("wrote: ")]
    assert len(wrote) == 1 and out.index(wrote[0]) > [i for i, x in enumerate(out) if x.startswith("done on ")][0]
    images, shards = re.fullmatch(
        r"wrote: sample images in (\S+) \(train/, val/\), shards in (\S+) .*", wrote[0]
    ).groups()  # type: ignore[union-attr]
    for split in ("train", "val"):
        assert os.listdir(os.path.join(images, split)) and os.path.isfile(os.path.join(shards, split, "manifest.json"))
    steps = [line[len("next: ") :].split("  (")[0] for line in out if line.startswith("next: ")]
    commands = [shlex.split(s) for s in steps if s.startswith(("shardkit ", "torchrun "))]
    assert [c[0] for c in commands] == ["shardkit", "torchrun"], steps
    assert main(commands[0][1:]) == 0
    script = commands[1][commands[1].index("--nproc-per-node") + 2]
    args = runpy.run_path(os.path.join(ROOT, script), run_name="demo_next")["parse_args"](
        commands[1][commands[1].index(script) + 1 :]
    )
    assert os.path.isfile(os.path.join(args.data, "manifest.json"))


def test_catdog_example_defaults_to_its_own_folder_apart_from_the_quick_start() -> None:
    """The example's default work folder is none of the paths the Quick start writes (a second run of either would
    otherwise convert into the other's shards)."""
    import runpy

    with open(README) as f:
        lines = quick_start_lines(f.read())
    written = {argv[2] for argv in lines if argv[:2] == ["shardkit", "sample-data"]}
    written |= {argv[3] for argv in lines if argv[:2] == ["shardkit", "convert"]}
    assert written == {"catdog", "catdog-shards"}, written
    parse = runpy.run_path(os.path.join(ROOT, "examples", "train_catdog.py"), run_name="catdog")["parse_args"]
    for argv in (["--demo-data"], ["--src", "catdog"]):
        args = parse(argv)
        for path in (args.workdir, args.shards):
            assert all(
                os.path.commonpath([os.path.abspath(path), os.path.abspath(w)]) != os.path.abspath(w)
                and os.path.commonpath([os.path.abspath(path), os.path.abspath(w)]) != os.path.abspath(path)
                for w in written
            ), (path, written)


def _bash_blocks(text: str) -> list[list[list[str]]]:
    """Every ``bash`` block of a Markdown text as its command lines (comments dropped)."""
    return [
        [argv for argv in (shlex.split(line, comments=True) for line in block.split("```", 1)[0].splitlines()) if argv]
        for block in text.split("```bash\n")[1:]
    ]


def test_docs_index_quick_start_is_the_readmes() -> None:
    with open(README) as f:
        readme = quick_start_lines(f.read())
    with open(os.path.join(ROOT, "docs", "index.md")) as f:
        index = f.read().split("## Quick start\n", 1)[1]
    assert _bash_blocks(index)[0] == readme


def test_detection_guide_starts_from_sample_data_and_the_command_it_prints(
    tmp_path: Any, capsys: Any, monkeypatch: Any
) -> None:
    """The guide's first block: ``sample-data`` as written prints the guide's next line, which converts it."""
    with open(os.path.join(ROOT, "docs", "guides", "detection.md")) as f:
        first = _bash_blocks(f.read().split("## 1. Convert", 1)[1])[0]
    assert first[0][:2] == ["shardkit", "sample-data"] and first[1][:2] == ["shardkit", "convert"], first
    monkeypatch.chdir(tmp_path)
    assert main(first[0][1:]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "next: " + shlex.join(first[1])
    assert main([*first[1][1:], "--quiet"]) == 0
