"""``shardkit convert``: ImageFolders, listings, labelled file names, Hugging Face datasets -> verified, resumable, deterministic WebDataset shards.

One public entry point, ``from shardkit.convert import convert`` (:func:`shardkit.convert.convert`: this package is
the conversion, the function its entry point; there is no second name for it), configured by :class:`ConvertConfig`
(with :class:`EncodeConfig` for the output images and :class:`ScanConfig` for SRC that is not class folders);
:func:`merge` finishes a conversion split over several tasks. See
:mod:`shardkit.convert.job` for how determinism, resume and scale-out work,
:mod:`shardkit.convert.shards` for shard boundaries and
:mod:`shardkit.convert.imageproc` for what happens to each image.
"""

from __future__ import annotations

from shardkit.convert.imageproc import EncodeConfig, Resample, SkipReason
from shardkit.convert.job import convert
from shardkit.convert.merge import merge
from shardkit.convert.options import (
    DEFAULT_SHARD_BYTES,
    ConvertConfig,
    ConvertResult,
    LabelType,
    Layout,
    ScanConfig,
    SplitResult,
)

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "ConvertConfig",
    "ConvertResult",
    "EncodeConfig",
    "LabelType",
    "Layout",
    "Resample",
    "SkipReason",
    "ScanConfig",
    "SplitResult",
    "convert",
    "merge",
]
