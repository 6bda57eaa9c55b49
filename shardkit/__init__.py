"""shardkit: make PyTorch image training stop waiting on its input.

Convert an ImageFolder into WebDataset shards (:func:`shardkit.convert.convert`; the package
:mod:`shardkit.convert` is the conversion, the function its one entry point),
stream them into training with exact, shuffled, rank- and worker-split
loading, and augment whole batches on the GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

from shardkit.errors import ConvertError, DataError, ManifestError, ShardkitError, StorageError

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these come from __getattr__ below
    from shardkit.access import OpenDataset
    from shardkit.access import open_dataset as open  # noqa: A004 - shardkit.open, as tarfile.open
    from shardkit.augment import GpuAugment
    from shardkit.format.manifest import Manifest, ShardInfo, SkippedFile, load_manifest, save_manifest
    from shardkit.loader import LoaderConfig, ShardDataset, ShardLoader, load
    from shardkit.loader.prefetch import DevicePrefetcher
    from shardkit.loader.view import View
    from shardkit.plan import Source
    from shardkit.plan.world import World
    from shardkit.selecting import select

#: names served lazily (name -> submodule), so that importing shardkit (the CLI,
#: conversion worker processes) does not pay for importing torch
_LAZY = {
    "LoaderConfig": "loader",
    "ShardDataset": "loader",
    "ShardLoader": "loader",
    "load": "loader",
    "Source": "plan",
    "GpuAugment": "augment",
    "OpenDataset": "access",
    "Manifest": "format.manifest",
    "ShardInfo": "format.manifest",
    "SkippedFile": "format.manifest",
    "load_manifest": "format.manifest",
    "save_manifest": "format.manifest",
    "World": "plan.world",
    "DevicePrefetcher": "loader.prefetch",
    "View": "loader.view",
}

#: names served lazily under another name than in their module (name -> (submodule, attribute))
_LAZY_AS = {"open": ("access", "open_dataset"), "select": ("selecting", "select"), "show": ("viz", "show")}


def __getattr__(name: str):  # PEP 562
    if name in _LAZY_AS:
        import importlib

        module, attr = _LAZY_AS[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'shardkit' has no attribute {name!r}")


__all__ = [
    "__version__",
    "ConvertError",
    "DataError",
    "Manifest",
    "ManifestError",
    "OpenDataset",
    "ShardInfo",
    "ShardkitError",
    "SkippedFile",
    "StorageError",
    "DevicePrefetcher",
    "GpuAugment",
    "LoaderConfig",
    "ShardDataset",
    "ShardLoader",
    "Source",
    "View",
    "World",
    "load",
    "load_manifest",
    "open",
    "save_manifest",
    "select",
    "show",
]
