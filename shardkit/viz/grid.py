"""A grid of samples as one picture: boxes with class names, masks as overlays, keypoints, labels and captions.

:func:`show` takes what :func:`shardkit.open` returns (one item, a list of items) or what the loader yields
(a batch dict of ``fields=``, or an ``(images, labels[, keys])`` tuple) and draws each sample with torchvision's
:func:`~torchvision.utils.draw_segmentation_masks` (one colour per class, ``alpha`` 0.45; 255 is not drawn),
:func:`~torchvision.utils.draw_bounding_boxes` (the class's colour, its name above the box),
:func:`~torchvision.utils.draw_keypoints` (visible points only), then a caption band under it (class name,
multi-label names, text), and lays them out with :func:`~torchvision.utils.make_grid` (samples of different
sizes are padded to the largest). A class's colour is :func:`class_colour` everywhere. A multi-crop batch
(``views=``: a list of ``[B, 3, S, S]`` tensors, as ``image`` of a batch dict or first in a tuple) is drawn
one sample per row, every view of it in order, each captioned ``view i/V``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypeGuard

import torch

#: drawn box width in pixels
BOX_WIDTH = 2
#: caption band height in pixels
CAPTION = 12
#: grey between cells and around padded samples
PAD_VALUE = 64
_PALETTE = [
    (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (220, 190, 255),
]  # fmt: skip


def class_colour(c: int) -> tuple[int, int, int]:
    """The colour class ``c`` is drawn in (boxes, mask overlays, keypoints)."""
    return _PALETTE[int(c) % len(_PALETTE)]


def as_items(data: Any) -> list[dict[str, Any]]:
    """One dict per sample (``image`` uint8 ``[3, H, W]`` and its fields) from an item, a list of items, a batch dict
    or an ``(images, labels[, keys])`` batch."""
    if isinstance(data, Mapping):
        image = data.get("image")
        if _is_views(image):
            return _view_items(image, {k: v for k, v in data.items() if k != "image"})
        if not isinstance(image, torch.Tensor):
            raise TypeError("show() needs an 'image' tensor (load the batch with fields=[\"image\", ...])")
        if image.dim() == 3:
            return [dict(data)]
        return [_row(data, b) for b in range(image.shape[0])]
    if isinstance(data, tuple) and data and _is_views(data[0]):
        labels = data[1] if len(data) > 1 else None
        rest: dict[str, Any] = {"label": labels} if isinstance(labels, torch.Tensor) and labels.dim() == 1 else {}
        if len(data) > 2:
            rest["key"] = list(data[2])
        return _view_items(data[0], rest)
    if isinstance(data, (tuple, list)) and data and isinstance(data[0], torch.Tensor) and data[0].dim() == 4:
        images, labels = data[0], data[1] if len(data) > 1 else None
        keys = data[2] if len(data) > 2 else None
        return [
            {
                "image": images[b],
                **({"label": int(labels[b])} if isinstance(labels, torch.Tensor) and labels.dim() == 1 else {}),
                **({"key": keys[b]} if keys is not None else {}),
            }
            for b in range(images.shape[0])
        ]
    if isinstance(data, Sequence):
        return [x for d in data for x in as_items(d)]
    raise TypeError(f"show() takes items, a list of items or a batch, not {type(data).__name__}")


def _is_views(x: Any) -> TypeGuard[list[torch.Tensor]]:
    return isinstance(x, list) and bool(x) and all(isinstance(v, torch.Tensor) and v.dim() == 4 for v in x)


def _view_items(views: list[torch.Tensor], rest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every view of every sample of a multi-crop batch, sample by sample, views in order."""
    n = views[0].shape[0]
    if any(v.shape[0] != n for v in views):
        raise ValueError(f"show(): the views of a batch hold {[v.shape[0] for v in views]} samples; they must agree")
    out = []
    for b in range(n):
        row = _row(rest, b)
        out += [{**row, "image": v[b], "view": (j, len(views))} for j, v in enumerate(views)]
    return out


def _row(batch: Mapping[str, Any], b: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() >= 1:
            out[k] = v[b]
        elif isinstance(v, list):
            out[k] = v[b]
    if "box_labels" in out:  # padding rows (-1) are not objects
        keep = out["box_labels"] >= 0
        for k in ("boxes", "box_labels", "keypoints"):
            if k in out:
                out[k] = out[k][keep]
    return out


def draw_item(item: Mapping[str, Any], classes: Optional[Sequence[str]] = None) -> torch.Tensor:
    """One sample drawn: uint8 ``[3, H + CAPTION, W]`` (see the module docstring)."""
    from torchvision.utils import draw_bounding_boxes, draw_keypoints, draw_segmentation_masks

    img = item["image"].detach().to("cpu", torch.uint8)
    if img.dim() != 3 or img.shape[0] != 3:
        raise ValueError(f"an image must be uint8 [3, H, W], got {tuple(img.shape)}")
    names = list(classes) if classes is not None else []

    def name(c: int) -> str:
        return names[c] if 0 <= c < len(names) else str(c)

    mask = item.get("mask")
    if isinstance(mask, torch.Tensor) and mask.shape == img.shape[1:]:
        present = [int(c) for c in torch.unique(mask.cpu()).tolist() if c not in (0, 255)]
        if present:
            planes = torch.stack([mask.cpu() == c for c in present])
            img = draw_segmentation_masks(img, planes, alpha=0.45, colors=[class_colour(c) for c in present])
    boxes = item.get("boxes")
    if isinstance(boxes, torch.Tensor) and len(boxes):
        labels = item.get("box_labels")
        cls = [int(c) for c in labels.tolist()] if isinstance(labels, torch.Tensor) else [0] * len(boxes)
        img = draw_bounding_boxes(
            img,
            boxes.detach().cpu().float(),
            labels=[name(c) for c in cls],
            colors=[class_colour(c) for c in cls],
            width=BOX_WIDTH,
        )
    kp = item.get("keypoints")
    if isinstance(kp, torch.Tensor) and kp.numel():
        kp = kp.detach().cpu().float()
        img = draw_keypoints(img, kp[..., :2], visibility=kp[..., 2] > 0, colors=(255, 255, 255), radius=2)
    return _captioned(img, _caption(item, name))


def _caption(item: Mapping[str, Any], name: Any) -> str:
    parts = []
    if "label" in item and int(item["label"]) >= 0:
        parts.append(name(int(item["label"])))
    labels = item.get("labels")
    if isinstance(labels, torch.Tensor):
        parts.append(",".join(name(int(c)) for c in torch.nonzero(labels).flatten().tolist()) or "-")
    if item.get("text"):
        parts.append(str(item["text"]))
    if "view" in item:
        parts.append(f"view {item['view'][0] + 1}/{item['view'][1]}")
    return " | ".join(parts)


def _captioned(img: torch.Tensor, text: str) -> torch.Tensor:
    from PIL import Image, ImageDraw

    band = Image.new("RGB", (img.shape[2], CAPTION), (0, 0, 0))
    if text:
        ImageDraw.Draw(band).text((2, 0), text, fill=(255, 255, 255))
    strip = torch.frombuffer(bytearray(band.tobytes()), dtype=torch.uint8).view(CAPTION, img.shape[2], 3)
    return torch.cat([img, strip.permute(2, 0, 1)], 1)


def show(data: Any, *, classes: Optional[Sequence[str]] = None, ncol: Optional[int] = None, padding: int = 2) -> Any:
    """A grid of the samples of ``data`` as a PIL image (see the module docstring).

    Args:
        data: an item of :func:`shardkit.open`, a list of them, or a batch the loader yields.
        classes: class names for the labels (an :class:`~shardkit.access.OpenDataset`'s ``classes``).
        ncol: cells per row (default: a multi-crop sample's views, else 4).
        padding: pixels between cells.
    """
    from PIL import Image
    from torchvision.utils import make_grid

    items = as_items(data)
    if not items:
        raise ValueError("show() got no sample")
    if ncol is None:
        ncol = items[0]["view"][1] if "view" in items[0] else 4
    cells = [draw_item(it, classes) for it in items]
    h = max(c.shape[1] for c in cells)
    w = max(c.shape[2] for c in cells)
    padded = torch.full((len(cells), 3, h, w), PAD_VALUE, dtype=torch.uint8)
    for i, c in enumerate(cells):
        padded[i, :, : c.shape[1], : c.shape[2]] = c
    grid = make_grid(padded, nrow=max(1, ncol), padding=padding, pad_value=PAD_VALUE)
    if len(cells) == 1 and padding:  # make_grid returns a single image as it is: the same frame as a grid's
        grid = torch.nn.functional.pad(grid, (padding,) * 4, value=PAD_VALUE)
    return Image.fromarray(grid.permute(1, 2, 0).contiguous().numpy())


__all__ = ["BOX_WIDTH", "CAPTION", "as_items", "class_colour", "draw_item", "show"]
