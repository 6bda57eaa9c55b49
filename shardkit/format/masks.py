"""The ``.mask.png`` and ``.instances.png`` members: a class or an object per pixel, stored losslessly as PNG.

A mask has its image's stored size; pixel values are class indices below
:data:`~shardkit.format.fields.IGNORE` (255), which marks a pixel of no class. :func:`mask_bytes`
is the one encoding (every writer calls it) and :func:`decode_mask` the one reading (every loader
path calls it), so what a conversion stores is what a batch gets, bit for bit.

An instance map (``instances``, Mask R-CNN's per-object masks in one image) has its image's stored size
too, as a 16-bit grey PNG (PIL mode ``I;16``): pixel value ``k + 1`` is object ``k`` of the sample's
``.objects.json`` (crowd regions included, in their stored order), 0 no object. One object per pixel:
where objects overlap, the conversion paints the smaller on top (:func:`shardkit.convert.segments.instance_map`).
:func:`instances_bytes` writes it and :func:`decode_instances` reads it as the object rows, -1 for none.
"""

from __future__ import annotations

import io
import warnings
from typing import Optional

import numpy as np

#: PNG compression level of stored masks (lossless at every level; 1 is fast and masks compress well)
PNG_LEVEL = 1


def mask_bytes(mask: np.ndarray) -> bytes:
    """The ``.mask.png`` member of a uint8 ``[H, W]`` mask (an 8-bit grey PNG).

    Raises:
        ValueError: not a 2-D uint8 array with at least one pixel.
    """
    from PIL import Image

    arr = np.asarray(mask)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"a mask is a non-empty uint8 [H, W] array, got {arr.dtype} {list(arr.shape)}")
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr), mode="L").save(buf, format="PNG", compress_level=PNG_LEVEL)
    return buf.getvalue()


def _read_png(
    data: bytes, what: str, modes: tuple[str, ...], wanted: str, size: Optional[tuple[int, int]]
) -> np.ndarray:
    """The pixels of a PNG member (``what``: "mask", "instance map") whose mode is one of ``modes`` and, when
    ``size`` (``(width, height)``) is given, of its image's size; else a one-line :class:`ValueError`."""
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with Image.open(io.BytesIO(data)) as im:
                if im.format != "PNG":
                    raise ValueError(f"{what} is {im.format}, not PNG")
                if im.mode not in modes:
                    raise ValueError(f"{what} PNG has mode {im.mode}, not {wanted}")
                if size is not None and tuple(im.size) != tuple(size):
                    raise ValueError(
                        f"{what} is {im.size[0]}x{im.size[1]} but its image {size[0]}x{size[1]} (they must match)"
                    )
                return np.asarray(im)
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise ValueError(f"{what} is not a readable PNG ({type(exc).__name__})") from None


def decode_mask(data: bytes, size: Optional[tuple[int, int]] = None) -> np.ndarray:
    """A ``.mask.png`` member as uint8 ``[H, W]``; ``size`` = ``(width, height)`` its image's size, if known.

    Raises:
        ValueError: one line: not a PNG, not 8-bit single-channel (grey ``L`` or palette ``P``, whose
            indices are the classes), or a size other than the image's.
    """
    return _read_png(data, "mask", ("L", "P"), "8-bit grey (L) or palette (P)", size).astype(np.uint8, copy=False)


def instances_bytes(rows: np.ndarray) -> bytes:
    """The ``.instances.png`` member of an object-row map ``[H, W]`` (ints: row ``k`` >= 0 of the sample's objects,
    -1 none), stored as ``k + 1`` in a 16-bit grey PNG.

    Raises:
        ValueError: not a 2-D integer array with at least one pixel, or a value outside ``[-1, MAX_OBJECTS)``.
    """
    from PIL import Image

    from shardkit.format.objects import MAX_OBJECTS

    arr = np.asarray(rows)
    if arr.ndim != 2 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise ValueError(f"an instance map is a non-empty integer [H, W] array, got {arr.dtype} {list(arr.shape)}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < -1 or hi >= MAX_OBJECTS:
        raise ValueError(f"instance map values must lie in [-1, {MAX_OBJECTS}) (object rows, -1 none), got {lo}..{hi}")
    buf = io.BytesIO()
    stored = np.ascontiguousarray(arr.astype(np.int32) + 1, dtype=np.uint16)  # fromarray: mode I;16
    Image.fromarray(stored).save(buf, format="PNG", compress_level=PNG_LEVEL)
    return buf.getvalue()


def decode_instances(data: bytes, size: Optional[tuple[int, int]] = None, count: Optional[int] = None) -> np.ndarray:
    """An ``.instances.png`` member as int16 ``[H, W]`` object rows (stored value - 1; -1: no object).

    Args:
        data: the member.
        size: ``(width, height)`` of its image, if known.
        count: the sample's number of objects, if known (a value beyond it is refused).

    Raises:
        ValueError: one line: not a PNG, not single-channel grey, another size than the image's, or a value
            naming an object the sample does not have.
    """
    arr = _read_png(data, "instance map", ("I;16", "I", "L"), "16-bit grey (I;16)", size)
    top = int(arr.max()) if arr.size else 0
    limit = 1 << 15 if count is None else count
    if top > limit or int(arr.min(initial=0)) < 0:
        raise ValueError(f"instance map names object {top - 1} but the sample has {limit} objects")
    return (arr.astype(np.int32) - 1).astype(np.int16)


__all__ = ["PNG_LEVEL", "decode_instances", "decode_mask", "instances_bytes", "mask_bytes"]
