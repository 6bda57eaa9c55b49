"""The streaming loader: shardkit shards -> uint8 batches, exact over ranks, workers and resumes.

Public entry points: :func:`load` (returns a :class:`ShardLoader`) and
:class:`ShardDataset` for users who build their own ``DataLoader``. The path of a
batch through the modules of this package is in the README ("How it works").
"""

from __future__ import annotations

from .batching import Batch
from .config import DecodeOn, Decoder, ImageConfig, LoaderConfig, MultiprocessingContext, Preset, SourceConfig
from .dataset import ShardDataset
from .loader import ShardLoader, load
from ..format import RawSample
from .sources import register_with_webdataset
from .stats import LoaderStats

__all__ = [
    "Batch",
    "DecodeOn",
    "Decoder",
    "ImageConfig",
    "LoaderConfig",
    "LoaderStats",
    "MultiprocessingContext",
    "Preset",
    "RawSample",
    "ShardDataset",
    "ShardLoader",
    "SourceConfig",
    "load",
    "register_with_webdataset",
]
