"""Turn a decoded image of any Pillow mode into 8-bit sRGB: modes, transparency, ICC profiles.

One function, :func:`to_rgb`, decides what every source pixel becomes; the table in
``docs/guides/convert.md`` ("Images: modes, colour, limits") describes it:

* ``RGB``: as it is. ``L`` and ``1``: gray copied to the three channels. ``P``: the palette's colours.
* 16-bit and 32-bit integer (``I;16``, ``I``): clipped to 0-65535, then the top 8 bits (``>> 8``).
* 32-bit float (``F``): scaled to 0-255 when its largest finite value is at most 1 (``round(v * 255)``),
  else rounded; then clipped to 0-255; NaN is 0.
* ``CMYK``: Pillow's conversion (an embedded CMYK profile is not applied).
* Transparency (an alpha channel, a palette's transparent entries, or a PNG ``tRNS`` colour key on
  ``RGB``, ``L``, ``I;16`` and ``I`` images) is composited onto **white** (:data:`BACKGROUND`) after
  the colour conversion.
* An embedded RGB or gray ICC profile is converted to sRGB with LittleCMS (Pillow's ``ImageCms``,
  perceptual intent) under :attr:`Colour.SRGB` (the default); a profile whose transform leaves every
  probe colour within :data:`SRGB_TOLERANCE` is treated as sRGB (no conversion), and a profile LittleCMS
  cannot read, or one whose colour space does not match the pixels, is ignored. :attr:`Colour.RAW`
  keeps the stored values (the profile is dropped).
"""

from __future__ import annotations

import enum
import functools
import io

import numpy as np
from PIL import Image, ImageCms

#: colour that transparent pixels are composited onto
BACKGROUND = (255, 255, 255)
#: a profile whose transform to sRGB moves no probe colour by more than this is treated as sRGB
SRGB_TOLERANCE = 2
_INT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_PROFILE_SPACE = {"RGB": "RGB ", "L": "GRAY"}  # pixel mode -> the ICC colour space that describes it


class Colour(str, enum.Enum):
    """What an embedded ICC profile does to the stored pixels."""

    SRGB = "srgb"  #: convert the pixels from the profile's colour space to sRGB (default)
    RAW = "raw"  #: keep the stored values as they are and drop the profile

    @classmethod
    def parse(cls, value: "Colour | str") -> "Colour":
        """``value`` as a :class:`Colour`; a ``ValueError`` listing the valid names otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"colour must be one of {', '.join(c.value for c in cls)}, not {value!r}") from None


def to_rgb(im: Image.Image, colour: Colour = Colour.SRGB) -> Image.Image:
    """``im`` as an 8-bit sRGB ``RGB`` image (module docstring: every mode, transparency, profiles)."""
    icc = im.info.get("icc_profile") if colour is Colour.SRGB else None
    base, alpha = _colour_and_alpha(im)
    rgb = convert_profile(base, icc) if icc else None
    if rgb is None:
        rgb = base if base.mode == "RGB" else base.convert("RGB")
    if alpha is None:
        return rgb
    bg = Image.new("RGB", rgb.size, BACKGROUND)
    bg.paste(rgb, mask=alpha)
    return bg


def _colour_and_alpha(im: Image.Image) -> tuple[Image.Image, Image.Image | None]:
    """The colour part of ``im`` (an 8-bit mode Pillow converts to RGB) and its alpha mask (``None``: opaque)."""
    mode, key = im.mode, im.info.get("transparency")
    if mode in _INT_MODES:
        raw = np.asarray(im).astype(np.int64)
        alpha = _key_alpha(raw == key) if isinstance(key, int) else None
        arr = np.clip(raw, 0, 65535) >> 8
        return Image.fromarray(arr.astype(np.uint8)), alpha
    if mode == "F":
        return Image.fromarray(float_to_8bit(np.asarray(im, dtype=np.float64))), None
    if mode == "1":
        return im.convert("L"), None
    if mode == "L" and isinstance(key, int):
        return im, _key_alpha(np.asarray(im) == key)
    if mode == "RGB" and isinstance(key, tuple) and len(key) == 3:
        return im, _key_alpha((np.asarray(im) == np.asarray(key)).all(axis=-1))
    if mode == "LA":
        return im.getchannel("L"), im.getchannel("A")
    if (mode == "P" and key is not None) or mode in ("La", "PA", "RGBa", "RGBA"):
        rgba = im.convert("RGBA")
        return rgba.convert("RGB"), rgba.getchannel("A")
    return im, None


def _key_alpha(transparent: np.ndarray) -> Image.Image:
    """The alpha mask of a colour key: 0 where ``transparent``, 255 elsewhere."""
    return Image.fromarray(np.where(transparent, 0, 255).astype(np.uint8))


def float_to_8bit(arr: np.ndarray) -> np.ndarray:
    """A float image as uint8: ``round(v * 255)`` when its largest finite value is at most 1, else
    ``round(v)``; clipped to 0-255; NaN is 0."""
    finite = arr[np.isfinite(arr)]
    scale = 255.0 if finite.size == 0 or finite.max() <= 1.0 else 1.0
    out = np.nan_to_num(arr * scale, nan=0.0, posinf=255.0, neginf=0.0)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def convert_profile(im: Image.Image, icc: bytes) -> Image.Image | None:
    """``im`` converted from the colour space of profile ``icc`` to sRGB, or ``None`` when there is nothing to
    convert (the profile is sRGB, unreadable, or describes another colour space than ``im.mode``)."""
    transform = srgb_transform(bytes(icc), im.mode)
    return None if transform is None else ImageCms.applyTransform(im, transform)


def needs_conversion(icc: bytes | None, mode: str) -> bool:
    """True when an image of ``mode`` with profile ``icc`` is not already sRGB (see :func:`srgb_transform`)."""
    return icc is not None and len(icc) > 0 and srgb_transform(bytes(icc), mode) is not None


@functools.lru_cache(maxsize=64)
def srgb_transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """The LittleCMS transform from profile ``icc`` (for pixels of ``mode``) to sRGB, built once per profile,
    or ``None`` when the pixels need none: an sRGB-equivalent profile (no probe colour moves by more than
    :data:`SRGB_TOLERANCE`), a profile LittleCMS cannot read, or one whose colour space is not ``mode``'s."""
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        if profile.profile.xcolor_space != _PROFILE_SPACE.get(mode):
            return None
        transform = ImageCms.buildTransform(profile, _srgb_profile(), mode, "RGB")
        probe = _probe(mode)
        moved = np.asarray(ImageCms.applyTransform(probe, transform)).astype(int) - np.asarray(probe.convert("RGB"))
    except (OSError, ValueError, ImageCms.PyCMSError):
        return None
    return transform if np.abs(moved).max() > SRGB_TOLERANCE else None


def _probe(mode: str) -> Image.Image:
    """Colours that tell an sRGB-equivalent profile from another: a 6x6x6 RGB grid, or a gray ramp."""
    if mode == "L":
        return Image.fromarray(np.arange(256, dtype=np.uint8)[None, :])
    levels = np.arange(0, 256, 51, dtype=np.uint8)
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1)
    return Image.fromarray(grid.reshape(1, -1, 3))


@functools.cache
def _srgb_profile() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
