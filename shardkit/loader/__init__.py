"""The streaming loader: shardkit shards -> uint8 batches, exact over ranks, workers and resumes.

Public entry points: :func:`load` (returns a :class:`ShardLoader`) and
:class:`ShardDataset` for users who build their own ``DataLoader``.
"""

from __future__ import annotations

from .config import ImageConfig, LoaderConfig, Preset, SourceConfig
from .dataset import ShardDataset
from .loader import ShardLoader, load
from .stats import LoaderStats
from .reader import RawSample
from .sources import register_with_webdataset
from .batching import Batch

__all__ = [
    "Batch",
    "ImageConfig",
    "LoaderConfig",
    "LoaderStats",
    "Preset",
    "RawSample",
    "ShardDataset",
    "ShardLoader",
    "SourceConfig",
    "load",
    "register_with_webdataset",
]
