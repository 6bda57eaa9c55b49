"""The streaming loader: shardkit shards -> uint8 batches, exact over ranks, workers and resumes.

Public entry points: :func:`load` (returns a :class:`ShardLoader`) and
:class:`ShardDataset` for users who build their own ``DataLoader``. The path of a
batch through the modules of this package is in docs/design/batch-path.md ("The path of a batch").
"""

from __future__ import annotations

from shardkit.format import RawSample
from shardkit.loader.api import load
from shardkit.loader.batchtypes import Batch, JpegBatch, PixelBatch, RawBatch, ViewBatch
from shardkit.loader.config import (
    DecodeOn,
    Decoder,
    ImageConfig,
    LoaderConfig,
    MultiprocessingContext,
    Preset,
    StorageConfig,
)
from shardkit.loader.dataset import ShardDataset
from shardkit.loader.fields import FIELD_KINDS
from shardkit.loader.loader import ShardLoader
from shardkit.loader.rows import FieldRows
from shardkit.loader.stats import LoaderStats
from shardkit.loader.view import View
from shardkit.storage.webdataset_hook import register_with_webdataset

__all__ = [
    "Batch",
    "DecodeOn",
    "Decoder",
    "FIELD_KINDS",
    "FieldRows",
    "ImageConfig",
    "JpegBatch",
    "LoaderConfig",
    "LoaderStats",
    "MultiprocessingContext",
    "PixelBatch",
    "Preset",
    "RawBatch",
    "RawSample",
    "ShardDataset",
    "ShardLoader",
    "StorageConfig",
    "View",
    "ViewBatch",
    "load",
    "register_with_webdataset",
]
