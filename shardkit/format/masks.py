"""The ``.mask.png`` member: a class index per pixel, stored losslessly as an 8-bit grey PNG.

A mask has its image's stored size; pixel values are class indices below
:data:`~shardkit.format.fields.IGNORE` (255), which marks a pixel of no class. :func:`mask_bytes`
is the one encoding (every writer calls it) and :func:`decode_mask` the one reading (every loader
path calls it), so what a conversion stores is what a batch gets, bit for bit.
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


def decode_mask(data: bytes, size: Optional[tuple[int, int]] = None) -> np.ndarray:
    """A ``.mask.png`` member as uint8 ``[H, W]``; ``size`` = ``(width, height)`` its image's size, if known.

    Raises:
        ValueError: one line: not a PNG, not 8-bit single-channel (grey ``L`` or palette ``P``, whose
            indices are the classes), or a size other than the image's.
    """
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with Image.open(io.BytesIO(data)) as im:
                if im.format != "PNG":
                    raise ValueError(f"mask is {im.format}, not PNG")
                if im.mode not in ("L", "P"):
                    raise ValueError(f"mask PNG has mode {im.mode}, not 8-bit grey (L) or palette (P)")
                if size is not None and im.size != tuple(size):
                    raise ValueError(
                        f"mask is {im.size[0]}x{im.size[1]} but its image {size[0]}x{size[1]} (they must match)"
                    )
                arr = np.asarray(im, dtype=np.uint8)
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise ValueError(f"mask is not a readable PNG ({type(exc).__name__})") from None
    return arr


__all__ = ["PNG_LEVEL", "decode_mask", "mask_bytes"]
