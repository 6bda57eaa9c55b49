"""Soak test of the loader: many epochs with persistent workers, watching memory, fds, threads, processes, temp files.

Runs ``--epochs`` full passes over a generated dataset (``--samples`` tiny JPEG samples) with
``--workers`` persistent DataLoader workers, and records after every epoch the RSS of the main
process and of each worker, the open file descriptors, threads and child processes. After
``loader.close()`` every count must be back to where it started and no temporary file may be
left (the run uses a private TMPDIR and checks ``/dev/shm`` too). With ``--remote`` the dataset
is served over HTTP on 127.0.0.1 and read through a local shard cache smaller than the dataset
(eviction on every epoch).

Checks (exit status 1 if one fails): every epoch yields every sample exactly once; RSS of the main
process and of the workers grows less than ``--max-growth`` (default 5 %) from the end of epoch 2
to the end of the last epoch; fds, threads and children return to their starting counts; no temp
files (a ``/dev/shm`` segment that another program maps is that program's); the cache stays under its limit.

    python tools/soak.py                      # 20 epochs x 3000 samples, 4 workers (a few minutes)
    python tools/soak.py --remote             # the same through HTTP + an evicting shard cache
    python tools/soak.py --epochs 6 --samples 600 --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import functools
import http.server
import io
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.support.probes import children, num_threads, open_fds, rss_bytes, wait_for  # noqa: E402

# ----------------------------------------------------------------------------- /proc counters: tests/support/probes.py


def _shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def _shm_left(before: set[str], me: int, settle_s: float = 15.0) -> list[str]:
    """``/dev/shm`` files that appeared since ``before`` and no other program maps, still there after up to
    ``settle_s`` seconds: a test run beside this one creates and removes its own (a multiprocessing semaphore lives
    unmapped for a moment between its last close and its unlink); this run's leftovers stay."""
    left = _shm() - before - _shm_of_others(me)
    deadline = time.monotonic() + settle_s
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left &= _shm() - _shm_of_others(me)
    return sorted(left)


def _shm_of_others(me: int) -> set[str]:
    """The ``/dev/shm`` files that processes other than ``me`` and its descendants have mapped: another
    program's segments in use (a test run beside this one), never this run's leftovers."""
    ours, stack = {me}, [me]
    while stack:
        for kid in children(stack.pop()):
            if kid not in ours:
                ours.add(kid)
                stack.append(kid)
    names: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in ours:
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                names.update(line.split("/dev/shm/", 1)[1].split()[0] for line in f if "/dev/shm/" in line)
        except OSError:  # gone, or not ours to read
            continue
    return names


# ----------------------------------------------------------------------------- dataset


def make_dataset(root: str, samples: int, shard_size: int, image_size: tuple[int, int] = (64, 48)) -> list[str]:
    """Write ``samples`` tiny samples in shards of ``shard_size`` plus a manifest; return the keys."""
    from PIL import Image

    from shardkit.demo.sampledata import make_image
    from shardkit.format import EncodedSample, write_shard
    from shardkit.format.manifest import Manifest, ShardInfo, save_manifest

    os.makedirs(root, exist_ok=True)
    jpegs = []
    for c in range(4):
        for j in range(4):
            buf = io.BytesIO()
            Image.fromarray(make_image(c, j, image_size)).save(buf, format="JPEG", quality=85)
            jpegs.append((c, buf.getvalue()))
    keys, shards = [], []
    for start in range(0, samples, shard_size):
        batch = []
        for i in range(start, min(samples, start + shard_size)):
            label, data = jpegs[i % len(jpegs)]
            batch.append(EncodedSample(f"s{i:07d}", data, label, {"i": i}))
            keys.append(f"s{i:07d}")
        name = f"train-{len(shards):06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            n, nbytes, sha = write_shard(batch, f)
        shards.append(ShardInfo(name, n, nbytes, sha))
    save_manifest(Manifest("train", [f"c{i}" for i in range(4)], shards), root)
    return keys


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


# ----------------------------------------------------------------------------- the soak


@dataclass
class Snapshot:
    epoch: int
    seconds: float
    main_rss: int
    worker_rss: list[int]
    fds: int
    threads: int
    children: int
    cache_bytes: int = 0


@dataclass
class SoakReport:
    epochs: int
    samples: int
    workers: int
    remote: bool
    start: dict
    after_close: dict
    snapshots: list[Snapshot] = field(default_factory=list)
    leftover_tmp: list[str] = field(default_factory=list)
    leftover_shm: list[str] = field(default_factory=list)
    cache_limit: int = 0
    failures: list[str] = field(default_factory=list)

    def growth(self, which: str, from_epoch: int = 2) -> float:
        """Relative growth of main or (summed) worker RSS from the end of ``from_epoch`` to the end."""
        if len(self.snapshots) <= from_epoch:
            return 0.0
        val = (lambda s: s.main_rss) if which == "main" else (lambda s: sum(s.worker_rss))
        a, b = val(self.snapshots[from_epoch - 1]), val(self.snapshots[-1])
        return (b - a) / a if a else 0.0


def soak(
    *,
    epochs: int = 20,
    samples: int = 3000,
    shard_size: int = 50,
    workers: int = 4,
    batch_size: int = 32,
    remote: bool = False,
    max_growth: float = 0.05,
    image_size: int = 32,
    workdir: Optional[str] = None,
    log=print,
) -> SoakReport:  # type: ignore[no-untyped-def]
    """Run the soak; return a :class:`SoakReport` whose ``failures`` list is empty on success."""
    import shardkit

    work = tempfile.mkdtemp(prefix="shardkit-soak-", dir=workdir)
    # a short path: multiprocessing binds AF_UNIX sockets (108-byte limit) in TMPDIR to pass
    # tensors between processes; a long TMPDIR makes a worker's feeder thread die and the loop hang
    private_tmp = tempfile.mkdtemp(prefix="sksoak-")
    old_tmp, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = private_tmp, private_tmp
    server = thread = None
    try:
        ds = os.path.join(work, "www", "ds")
        keys = make_dataset(ds, samples, shard_size)
        url, cache_dir, cache_size = ds, None, None
        if remote:
            handler = functools.partial(_Quiet, directory=os.path.join(work, "www"))
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            thread.start()
            url = f"http://127.0.0.1:{server.server_address[1]}/ds"
            cache_dir = os.path.join(work, "cache")
            total = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds) if f.endswith(".tar"))
            cache_size = total // 3  # eviction pressure: a third of the dataset fits
        me = os.getpid()
        if remote:
            # fsspec starts one IO thread with an event loop (3 fds) per process, on first use, and
            # keeps it for the life of the process: create it before the baseline, it is not the loader's
            from shardkit.storage import fs as storage

            storage.read_bytes(url + "/manifest.json")
        # the loader's batch slots are multiprocessing.shared_memory segments: Python starts one resource
        # tracker process per interpreter on first use (it removes leftover segments if we crash) and keeps
        # it for the life of the process; start it before the baseline, it is not a leak
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        shm0 = _shm()
        before = set(children(me))  # e.g. a multiprocessing resource tracker started earlier: not ours
        start = {"fds": open_fds(me), "threads": num_threads(me), "children": len(before)}
        report = SoakReport(epochs, samples, workers, remote, start, {}, cache_limit=cache_size or 0)
        loader = shardkit.load(
            url,
            batch_size=batch_size,
            num_workers=workers,
            size=image_size,
            pin_memory=False,
            persistent_workers=True,
            with_keys=True,
            cache_dir=cache_dir,
            cache_size=cache_size,
            multiprocessing_context="fork",
        )
        t0 = time.perf_counter()
        for epoch in range(epochs):
            seen = [k for _, _, ks in loader for k in ks]
            if len(seen) != len(keys) or set(seen) != set(keys):
                report.failures.append(
                    f"epoch {epoch}: {len(seen)} samples delivered, {len(set(seen))} distinct, expected {len(keys)}"
                )
            kids = [k for k in children(me) if k not in before]
            wrss = [rss_bytes(k) for k in kids]
            cache_bytes = 0
            if cache_dir:
                from shardkit.storage.cache import ShardCache

                cache_bytes = ShardCache(cache_dir, cache_size).usage()
                if cache_size is not None and cache_bytes > cache_size:
                    report.failures.append(f"epoch {epoch}: cache holds {cache_bytes} bytes > limit {cache_size}")
            snap = Snapshot(
                epoch + 1,
                time.perf_counter() - t0,
                rss_bytes(me),
                wrss,
                open_fds(me),
                num_threads(me),
                len(kids),
                cache_bytes,
            )
            report.snapshots.append(snap)
            log(
                f"epoch {epoch + 1:3d}: {snap.seconds:7.1f} s  main RSS {snap.main_rss / 2**20:7.1f} MiB  workers RSS "
                f"{' '.join(f'{r / 2**20:.1f}' for r in wrss)} MiB  fds {snap.fds}  threads {snap.threads}  children {snap.children}"
                + (f"  cache {cache_bytes / 2**20:.1f}/{cache_size / 2**20:.1f} MiB" if cache_dir else "")
            )  # type: ignore[operator]
        loader.close()
        del loader
        ok = wait_for(
            lambda: (
                len(children(me)) <= start["children"]
                and open_fds(me) <= start["fds"]
                and num_threads(me) <= start["threads"]
            ),
            15,
        )
        report.after_close = {"fds": open_fds(me), "threads": num_threads(me), "children": len(children(me))}
        if not ok:
            report.failures.append(f"after close: {report.after_close} != start {start}")
        for which in ("main", "workers"):
            g = report.growth(which)
            if g > max_growth:
                report.failures.append(
                    f"{which} RSS grew {g:.1%} from epoch 2 to epoch {epochs} (limit {max_growth:.0%})"
                )
        report.leftover_tmp = sorted(os.listdir(private_tmp))
        report.leftover_shm = _shm_left(shm0, me)
        if cache_dir:
            report.leftover_tmp += [f for f in os.listdir(cache_dir) if f.startswith(".tmp-")]
        if report.leftover_tmp or report.leftover_shm:
            report.failures.append(f"temp files left: {report.leftover_tmp + report.leftover_shm}")
        return report
    finally:
        tempfile.tempdir = old_tmp
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env
        if server is not None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)  # type: ignore[union-attr]
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(private_tmp, ignore_errors=True)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--shard-size", type=int, default=50)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--remote", action="store_true", help="serve over HTTP on 127.0.0.1, read through an evicting shard cache"
    )
    p.add_argument("--max-growth", type=float, default=0.05, help="allowed RSS growth after epoch 2 (default 0.05)")
    p.add_argument("--json", help="write the report here")
    a = p.parse_args(argv)
    r = soak(
        epochs=a.epochs,
        samples=a.samples,
        shard_size=a.shard_size,
        workers=a.workers,
        batch_size=a.batch_size,
        remote=a.remote,
        max_growth=a.max_growth,
    )
    print(
        f"RSS growth after epoch 2: main {r.growth('main'):+.2%}, workers {r.growth('workers'):+.2%}; "
        f"start {r.start} -> after close {r.after_close}; temp files left: {len(r.leftover_tmp) + len(r.leftover_shm)}"
    )
    return finish(r, a.json)


def finish(report, json_path: Optional[str]) -> int:  # type: ignore[no-untyped-def]
    """Write ``report`` (a dataclass with ``failures``) to ``json_path``, print the verdict, return the exit status."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(asdict(report), f, indent=1)
    for msg in report.failures:
        print("FAIL:", msg)
    print("OK" if not report.failures else "FAILED")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
