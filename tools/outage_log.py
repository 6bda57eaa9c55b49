"""Count the log lines a storage outage produces: moto's S3 server behind a proxy that refuses connections.

    python tools/outage_log.py --outage-s 4 --workers 2

Starts moto on 127.0.0.1, uploads a small generated dataset, streams it with ``shardkit.load``
(``num_workers`` workers), takes the endpoint down for ``--outage-s`` seconds mid-epoch, and prints
how many retries were made, how many log lines they produced (stderr of the workers and the main
process) and whether every sample came exactly once.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests.support.data import write_dataset  # noqa: E402
from tests.support.faults import FaultProxy, free_port  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outage-s", type=float, default=4.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.child:  # run the loader in a child and count what it (and its workers) print on stderr
        r = subprocess.run(
            [sys.executable, __file__, "--child", "--outage-s", str(args.outage_s), "--workers", str(args.workers)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("shardkit: s3://")]
        print(r.stdout.strip() + f", {len(lines)} log lines")
        for ln in lines:
            print("  " + ln[:160])
        sys.exit(r.returncode)

    import s3fs
    from moto.server import ThreadedMotoServer

    import shardkit

    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    try:
        endpoint = f"http://127.0.0.1:{port}"
        opts = {
            "client_kwargs": {"endpoint_url": endpoint},
            "key": "testing",
            "secret": "testing",
            "skip_instance_cache": True,
        }
        with tempfile.TemporaryDirectory() as tmp:
            ds = write_dataset(os.path.join(tmp, "ds"), num_samples=400, shard_size=50, size=(64, 48))
            fs = s3fs.S3FileSystem(**opts)
            fs.mkdir("outage")
            fs.put(ds.url + "/", "outage/ds/", recursive=True)
            with FaultProxy(endpoint, seed=0) as proxy:
                loader = shardkit.load(
                    "s3://outage/ds",
                    storage_options={**opts, "client_kwargs": {"endpoint_url": proxy.url}},
                    num_workers=args.workers,
                    batch_size=10,
                    size=16,
                    pin_memory=False,
                    with_keys=True,
                    block_size=8192,
                    shuffle_buffer=10,
                    shuffle_initial=10,
                    max_retries=10_000,
                    retry_budget_s=args.outage_s + 30,
                    multiprocessing_context="fork",
                )
                keys: list[str] = []
                timer = None
                t0 = time.monotonic()
                for i, (_, _, ks) in enumerate(loader):
                    keys += ks
                    if i == 3:
                        proxy.down()
                        timer = threading.Timer(args.outage_s, proxy.up)
                        timer.start()
                if timer is not None:
                    timer.join()
                wall = time.monotonic() - t0
                stats = loader.stats
                loader.close()
        print(
            f"outage {args.outage_s:.1f} s, {args.workers} workers: {stats.retries} retries, "
            f"{len(keys)} samples ({'each once' if sorted(keys) == sorted(ds.keys) else 'NOT each once'}), {wall:.1f} s",
            flush=True,
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
