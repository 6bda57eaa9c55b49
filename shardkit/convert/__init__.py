"""``shardkit convert``: ImageFolders, listings, labelled file names, Hugging Face datasets -> verified, resumable, deterministic WebDataset shards.

One public entry point, :func:`convert`, configured by :class:`ConvertOptions` (and :class:`SourceOptions` for SRC that is not class folders);
:func:`merge` finishes a conversion split over several tasks. See
:mod:`shardkit.convert.job` for how determinism, resume and scale-out work,
:mod:`shardkit.convert.plan` for shard boundaries and
:mod:`shardkit.convert.imageproc` for what happens to each image.
"""

from __future__ import annotations

from .options import Layout
from .imageproc import ImageOptions, Resample, SkipReason
from .job import convert
from .merge import merge
from .options import DEFAULT_SHARD_BYTES, ConvertOptions, ConvertResult, LabelType, SourceOptions, SplitResult

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
