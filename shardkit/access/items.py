"""One stored sample (:class:`~shardkit.format.sample.RawSample`) as a dict of tensors at its stored size.

Every field goes through the code the loader uses for it: the image through a
:func:`~shardkit.loader.decode.decoders.make_decoder` decoder at the stored size (no DCT scaling), the row fields
(``labels`` multi-hot, ``target``, ``text``, ``meta``) through :func:`~shardkit.loader.rows.field_rows`, the masks
through :func:`~shardkit.loader.targetrows.decode_masks`, and the objects as the loader yields them with no crop:
crowd regions are not boxes, and an ``instances`` pixel holds its object's row among the boxes (-1: none, or a
crowd region: :func:`~shardkit.targets.instances.relabel` of :func:`~shardkit.targets.instances.kept_rows`).

========== ===================================================================
``image``  uint8 ``[3, H, W]``, a view of the decoded pixels (stored ``H, W, 3``: no copy)
``label``  ``int`` (single-label datasets)
``labels`` uint8 ``[C]`` multi-hot
``target`` float32 ``[D]``
``text``   ``str``
``boxes``  float32 ``[M, 4]`` ``(x0, y0, x1, y1)`` stored pixels; ``box_labels`` int64 ``[M]``
``keypoints`` float32 ``[M, K, 3]``
``mask``   uint8 ``[H, W]`` class per pixel (255: ignore)
``instances`` int16 ``[H, W]`` row in ``boxes`` (-1: none)
``key``    ``str``; ``meta``: ``dict`` (the ``.json`` member: ``path``, ``width``, ``height``, ...)
========== ===================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from shardkit.format.objects import Objects
from shardkit.format.sample import RawSample
from shardkit.loader.decode.decoders import JpegDecoder
from shardkit.loader.fields import RowSpec
from shardkit.loader.rows import field_rows
from shardkit.loader.targetrows import decode_masks
from shardkit.targets.instances import kept_rows, relabel


@dataclass(frozen=True)
class ItemSpec:
    """What one dataset's items hold (from its manifest): stored fields and their widths."""

    fields: tuple[str, ...]
    num_classes: int
    num_targets: int
    num_keypoints: int

    @classmethod
    def of(cls, manifest: Any) -> "ItemSpec":
        """The spec of the dataset ``manifest`` describes."""
        return cls(tuple(manifest.fields), len(manifest.classes), len(manifest.targets), len(manifest.keypoint_names))

    @property
    def rows(self) -> RowSpec:
        """The loader's row spec for the row fields this dataset stores (``meta`` always)."""
        want = tuple(f for f in ("labels", "target", "text") if f in self.fields) + ("meta",)
        return RowSpec(fields=want, num_classes=self.num_classes, num_targets=self.num_targets)


def decode_item(s: RawSample, spec: ItemSpec, decoder: JpegDecoder) -> dict[str, Any]:
    """The fields of the checked sample ``s`` (no ``error``) at stored size (see the module docstring).

    Raises:
        ValueError: the image or a mask cannot be decoded (the message says which).
    """
    assert s.jpeg is not None
    w, h = decoder.header(s.jpeg)
    pixels = decoder.decode(s.jpeg, w, h)
    if pixels.shape[:2] != (h, w):
        raise ValueError(f"the image decodes to {pixels.shape[1]}x{pixels.shape[0]}, its header says {w}x{h}")
    # CHW as a view of the decoder's HWC array: a copy into CHW order would cost a fifth of the decode again
    out: dict[str, Any] = {"image": torch.from_numpy(np.asarray(pixels)).permute(2, 0, 1), "key": s.key}
    if "label" in spec.fields:
        out["label"] = int(s.label) if s.label is not None else -1
    rows = field_rows([s], spec.rows)
    if rows.labels is not None:
        out["labels"] = rows.labels[0]
    if rows.target is not None:
        out["target"] = rows.target[0]
    if rows.text is not None:
        out["text"] = rows.text[0]
    out["meta"] = rows.meta[0] if rows.meta is not None else s.meta
    planes = tuple(f for f in ("mask", "instances") if f in spec.fields)
    if planes:
        px, errors = decode_masks([s], [(w, h)], planes)
        if errors:
            raise ValueError(errors[0][1])
        assert px[0] is not None
        if px[0].mask is not None:
            out["mask"] = torch.from_numpy(np.array(px[0].mask, dtype=np.uint8))
    if "boxes" in spec.fields:
        k = spec.num_keypoints if "keypoints" in spec.fields else 0
        objects = s.objects if s.objects is not None else Objects.empty(k)
        keep = ~objects.iscrowd.astype(bool)
        kept = objects.take(keep)
        out["boxes"] = torch.from_numpy(np.array(kept.boxes, dtype=np.float32).reshape(-1, 4))
        out["box_labels"] = torch.from_numpy(np.array(kept.labels, dtype=np.int64))
        if k:
            kp = kept.keypoints if kept.keypoints is not None else np.zeros((0, k, 3), np.float32)
            out["keypoints"] = torch.from_numpy(np.array(kp, dtype=np.float32))
        if planes and px[0] is not None and px[0].instances is not None:
            ids = torch.from_numpy(np.array(px[0].instances, dtype=np.int16))[None]
            table = kept_rows(torch.from_numpy(keep)[None])
            out["instances"] = relabel(ids, table)[0] if len(keep) else ids[0]
    return out


__all__ = ["ItemSpec", "decode_item"]
