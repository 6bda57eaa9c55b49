"""``shardkit convert``: ImageFolders, listings, labelled file names, Hugging Face datasets -> verified, resumable, deterministic WebDataset shards.

One public entry point, :func:`convert`, configured by :class:`ConvertOptions` (and :class:`SourceOptions` for SRC that is not class folders);
:func:`merge` finishes a conversion split over several tasks. See
:mod:`shardkit.convert.job` for how determinism, resume and scale-out work,
:mod:`shardkit.convert.shards` for shard boundaries and
:mod:`shardkit.convert.imageproc` for what happens to each image.
"""

from __future__ import annotations

from shardkit.convert.imageproc import ImageOptions, Resample, SkipReason
from shardkit.convert.job import convert
from shardkit.convert.merge import merge
from shardkit.convert.options import (
    DEFAULT_SHARD_BYTES,
    ConvertOptions,
    ConvertResult,
    LabelType,
    Layout,
    SourceOptions,
    SplitResult,
)

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "ConvertOptions",
    "ConvertResult",
    "ImageOptions",
    "LabelType",
    "Layout",
    "Resample",
    "SkipReason",
    "SourceOptions",
    "SplitResult",
    "convert",
    "merge",
]
