"""Datasets on the moto S3 server of the ``s3`` fixture (``(storage_options, bucket)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.data import TinyDataset, write_dataset


def put_dir(opts: dict, local: str, remote: str) -> None:
    """Upload the folder ``local`` (its files and subfolders) to ``remote`` (``bucket/prefix``) with s3fs."""
    import s3fs

    s3fs.S3FileSystem(**opts).put(local + "/", remote.rstrip("/") + "/", recursive=True)


def remote_dataset(tmp_path: Path, s3: "tuple[dict, str]", num_samples: int) -> "tuple[TinyDataset, str, Any]":
    """A dataset of ``num_samples`` samples (shards of 10, 64x48 images) written below ``tmp_path`` and put on the
    bucket at ``ds/``: ``(dataset, bucket, storage options)``."""
    opts, bucket = s3
    ds = write_dataset(str(tmp_path / "ds"), num_samples=num_samples, shard_size=10, size=(64, 48))
    put_dir(opts, ds.url, f"{bucket}/ds")
    return ds, bucket, opts
