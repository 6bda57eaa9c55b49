"""Detection sources: ``coco:ANNOTATIONS.json`` (with ``--root IMAGES_DIR``), ``voc:DIR``, ``yolo:DIR``.

Each becomes a :class:`~shardkit.convert.scan.source.ScannedSource` whose files carry
``objects`` (and, for ``--masks``, ``segments`` or a ``mask`` ref), with the classes
``["background", *category names]`` (box labels >= 1, mask 0 = background: torchvision's
detection convention), and whose splits account for every annotation (``SplitSource.annotations``).
"""

from __future__ import annotations

from typing import Any

from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.source import ScannedSource
from shardkit.errors import ConvertError


def scan_detection(kind: str, path: str, options: ScanConfig, split: str, **storage_options: Any) -> ScannedSource:
    """The :class:`ScannedSource` of a detection SRC (``kind`` in coco, voc, yolo; ``path`` after the prefix)."""
    raise ConvertError(f"{kind}:{path}: {kind} sources are not built yet")
