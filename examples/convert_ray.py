"""Convert a dataset with K Ray tasks, then merge: ``--num-tasks/--task-index`` on a Ray cluster.

Each Ray task runs ``shardkit.convert.convert(..., num_tasks=K, task_index=i)``
for its own ``i``: the tasks share nothing but DEST, and the result is
byte-identical to a single-task run. Once every task is done, ``merge``
checks that every shard is there and writes the manifests (``shardkit merge
DEST`` does the same from a shell). A failed task can be retried on its own:
it resumes like any conversion. Needs ``pip install 'shardkit[ray]'``::

    python examples/convert_ray.py SRC DEST --num-tasks 16 --workers-per-task 8 [--address auto]

SRC is anything ``shardkit convert`` takes (class folders, a listing, tars,
``hf:PATH``); every Ray node must be able to read SRC and write DEST (a
shared file system or an fsspec URL such as ``s3://bucket/prefix``).
"""

from __future__ import annotations

import argparse
from typing import Any

import ray

from shardkit.convert import ConvertConfig, EncodeConfig, convert, merge
from shardkit.format.manifest import Manifest


@ray.remote
def convert_task(
    src: str,
    dest: str,
    options: ConvertConfig,
    num_tasks: int,
    task_index: int,
    workers: int,
    storage_options: dict[str, Any],
) -> tuple[int, int, int]:
    """Convert task ``task_index`` of ``num_tasks``; returns ``(task_index, images converted, shards kept from an earlier run)``."""
    r = convert(
        src,
        dest,
        options,
        workers=workers,
        num_tasks=num_tasks,
        task_index=task_index,
        quiet=True,
        storage_options=storage_options,
    )
    return task_index, r.converted, sum(s.shards_resumed for s in r.splits)


def convert_with_ray(
    src: str,
    dest: str,
    options: ConvertConfig,
    num_tasks: int,
    workers_per_task: int = 1,
    storage_options: dict[str, Any] | None = None,
) -> list[Manifest]:
    """Run the ``num_tasks`` conversion tasks on the connected Ray cluster, then merge; returns the manifests."""
    so = dict(storage_options or {})
    task = convert_task.options(num_cpus=workers_per_task)
    refs = [task.remote(src, dest, options, num_tasks, i, workers_per_task, so) for i in range(num_tasks)]
    for index, converted, resumed in sorted(ray.get(refs)):
        print(f"task {index}: converted {converted} images" + (f", kept {resumed} finished shards" if resumed else ""))
    return merge(dest, **so)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src")
    p.add_argument("dest")
    p.add_argument("--num-tasks", type=int, default=4)
    p.add_argument("--workers-per-task", type=int, default=1, help="encoding processes (and Ray CPUs) per task")
    p.add_argument("--short-side", type=int, default=256)
    p.add_argument("--shard-size", type=int, default=None)
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    a = p.parse_args()
    ray.init(address=a.address)
    options = ConvertConfig(image=EncodeConfig(short_side=a.short_side), shard_size=a.shard_size)
    for m in convert_with_ray(a.src, a.dest, options, a.num_tasks, a.workers_per_task):
        print(f"{m.split}: {m.num_samples} samples in {len(m.shards)} shards -> {m.url}")


if __name__ == "__main__":
    main()
