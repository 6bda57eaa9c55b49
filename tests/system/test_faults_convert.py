"""Conversion killed (SIGKILL, several times, at varying points) and conversion on a full disk.

Guarantees: after any number of kills, a rerun gives shards and manifest byte-identical to an
uninterrupted run, with every source file accounted for (converted or listed as skipped); killing
the main process alone of a ``--workers N`` conversion leaves none of its processes running
(encoders, forkserver, resource tracker); a full disk is one clear error (exit status 2), leaves
no incomplete shard visible, and a rerun after freeing space completes with the same bytes.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from shardkit.demo.sampledata import make_imagefolder
from shardkit.format.manifest import load_manifest
from tests.support.data import tree_digests
from tests.support.probes import children, wait_for

ARGS = ["--short-side", "48", "--shard-size", "8", "--workers", "1", "--quiet", "--seed", "3"]


def shards_and_manifest(root: str) -> dict[str, str]:
    """The deliverable: shards and manifest (the resume journal under _shardkit/ is bookkeeping)."""
    return {k: v for k, v in tree_digests(root).items() if not k.startswith("_shardkit")}


def _convert(src: str, dest: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "shardkit", "convert", src, dest, *ARGS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,
    )


def _tars(dest: str) -> int:
    try:
        return sum(1 for f in os.listdir(dest) if f.endswith(".tar"))
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = make_imagefolder(str(tmp_path_factory.mktemp("src") / "if"), num_classes=4, per_class=100, seed=1)
    a, b = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))[:2]
    with open(os.path.join(root, a, "zz_broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8 not really a jpeg")
    open(os.path.join(root, b, "zz_empty.jpg"), "wb").close()
    return root


@pytest.fixture(scope="module")
def clean(src, tmp_path_factory):
    dest = str(tmp_path_factory.mktemp("clean") / "out")
    p = _convert(src, dest)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return os.path.join(dest, "train")


def _source_files(src: str) -> int:
    return sum(len(files) for _, _, files in os.walk(src))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_killed_at_random_points_then_rerun_is_byte_identical(src, clean, tmp_path):
    rng = random.Random(6)
    dest = str(tmp_path / "dest")
    split = os.path.join(dest, "train")  # conversions write DEST/<split>/
    kills = 0
    for target in sorted(rng.sample(range(2, 45), 4)):  # kill once this many shards exist, plus a random few ms
        p = _convert(src, dest)
        try:
            wait_for(lambda target=target, p=p: _tars(split) >= target or p.poll() is not None, 60, interval=0.002)
            time.sleep(rng.uniform(0, 0.03))
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # the whole job: main process and its encoders
                kills += 1
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
        # what a reader can see at any moment: complete shards only, and no manifest before the end
        assert not any(
            f.endswith((".part", ".tmp")) or f.startswith(".tmp-") for f in os.listdir(split) if not f.startswith("_")
        )
        for name, digest in shards_and_manifest(split).items():
            if name.endswith(".tar"):
                assert digest == shards_and_manifest(clean).get(name), f"{name} differs from the uninterrupted run"
    assert kills >= 3, "the conversion finished before most kills: make it bigger"
    p = _convert(src, dest)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert shards_and_manifest(split) == shards_and_manifest(clean)
    m = load_manifest(split)
    assert m.num_samples + len(m.skipped) == _source_files(src) == 402
    assert sorted(s.path.rsplit("/", 1)[-1] for s in m.skipped) == ["zz_broken.jpg", "zz_empty.jpg"]


def _stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of ``pid`` from ``/proc/<pid>/stat``; ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": comm may hold spaces
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], fields[19]


def _descendants(pid: int) -> dict[int, str]:
    """Children and grandchildren of ``pid`` (resource tracker, forkserver, the encoders it forks): pid -> start time."""
    out = {}
    for child in children(pid):
        for p in (child, *children(child)):
            st = _stat(p)
            if st is not None:
                out[p] = st[1]
    return out


def _still_running(procs: dict[int, str]) -> dict[int, str]:
    """Those of ``procs`` still running: same pid and start time (not a reused pid), not a zombie; pid -> command."""
    out = {}
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[1] == start and st[0] not in "ZX":
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
            except (FileNotFoundError, ProcessLookupError):
                continue
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_killing_the_main_process_of_a_pool_conversion_leaves_no_process_and_a_rerun_completes(src, clean, tmp_path):
    dest = str(tmp_path / "dest")
    split = os.path.join(dest, "train")
    args = list(ARGS)
    args[args.index("--workers") + 1] = "2"  # two encoder processes (with 1, the main process encodes)
    cmd = [sys.executable, "-m", "shardkit", "convert", src, dest, *args]
    seen: dict[int, str] = {}

    def encoding() -> bool:
        seen.update(_descendants(p.pid))
        encoders = sum(len(children(c)) for c in children(p.pid))  # forked by the forkserver
        return (encoders >= 2 and _tars(split) >= 2) or p.poll() is not None

    with open(tmp_path / "stderr", "wb") as err:  # not a pipe: a leftover process would hold it open
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        wait_for(encoding, 60, interval=0.002)
        assert p.poll() is None, "the conversion finished before the kill: make the source bigger"
        seen.update(_descendants(p.pid))
        os.kill(p.pid, signal.SIGKILL)  # the main process only: its encoders must notice on their own
        p.wait(timeout=30)
        assert len(seen) >= 4, seen  # resource tracker, forkserver, two encoders
        wait_for(lambda: not _still_running(seen), 20, interval=0.05)
        assert not _still_running(seen), f"left running after the main process was killed: {_still_running(seen)}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # whatever is left of the job (its process group)
    written = _tars(split)
    assert 2 <= written < sum(1 for k in shards_and_manifest(clean) if k.endswith(".tar")), written
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert shards_and_manifest(split) == shards_and_manifest(clean)


@pytest.fixture()
def small_disk(tmp_path):
    """A 1 MiB tmpfs mounted at ``tmp_path/disk`` (skips where mounting is not permitted)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here ({r.stderr.strip()})")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_disk_full_is_a_clear_error_and_rerun_completes(src, clean, small_disk):
    dest = os.path.join(small_disk, "out")
    p = _convert(src, dest)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2, (out, err)
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "Traceback" not in err, err
    dest = os.path.join(dest, "train")  # conversions write DEST/<split>/
    visible = [f for f in os.listdir(dest) if not f.startswith("_")]
    assert "manifest.json" not in visible
    assert not any(f.endswith((".part", ".tmp")) or f.startswith(".tmp-") for f in visible), visible
    ref = shards_and_manifest(clean)
    for f in visible:  # whatever shard is visible is complete: the same bytes as in the uninterrupted run
        assert tree_digests(dest)[f] == ref[f], f"incomplete shard {f} is visible"
    assert 0 < len(visible) < len([k for k in ref if k.endswith(".tar")])
    # free space (grow the filesystem) and rerun
    r = subprocess.run(["mount", "-o", "remount,size=64m", small_disk], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    p = _convert(src, os.path.dirname(dest))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert shards_and_manifest(dest) == ref
