"""Decode one source image and re-encode it as a small baseline JPEG.

This is the only module that touches pixels during conversion; everything in
it is a pure function of the source bytes and :class:`EncodeConfig`, so the
output bytes depend on nothing else (for a given Pillow/libjpeg build).

Pipeline for one file:

1. Read the bytes. Zero bytes -> ``empty``; an ``OSError`` -> ``unreadable``.
2. ``Image.open`` (header only). Not recognised -> ``not_an_image``; more than
   ``max_pixels`` pixels -> ``too_many_pixels``, before any pixel buffer is
   allocated; a stored side over JPEG's limit (:data:`JPEG_MAX_SIDE`) ->
   ``too_large_for_jpeg``.
3. For JPEGs that shrink at least 2x, ``Image.draft`` lets libjpeg decode at
   1/2, 1/4 or 1/8 scale (DCT scaling): far less work than a full decode
   followed by a resize. The draft size is never smaller than the target.
4. Load (truncated or broken data -> ``corrupt``), apply the EXIF orientation,
   take the first frame of multi-frame files.
5. Convert to 8-bit sRGB (:func:`shardkit.convert.colour.to_rgb`): every Pillow
   mode, transparency (alpha, palette, ``tRNS`` colour keys) composited onto
   **white** (:data:`~shardkit.convert.colour.BACKGROUND`), an embedded ICC profile converted to sRGB
   unless ``colour`` is :attr:`Colour.RAW`.
6. Resize so the shorter side is ``short_side`` (or the longer side is
   ``max_side``) with an antialiasing filter (:class:`Resample`; default
   bilinear, like ``torchvision.transforms.Resize``); never upscale. A large
   shrink is first box-reduced by the largest whole factor that divides the
   size (:func:`resize_pil`), so every source pixel weighs the same.
7. Encode a baseline (non-progressive) JPEG at ``quality`` with 4:2:0 chroma
   subsampling, no optimisation pass and no metadata.

With ``copy``, an upright RGB or grayscale JPEG in sRGB (no profile, an sRGB
profile, or ``colour`` :attr:`Colour.RAW`) skips steps 3-7: its bytes are kept
as they are, once a decode at 1/8 scale (libjpeg-turbo's DCT scaling: every
coefficient is still read, so truncated or damaged data fails) proves they
decode (:func:`check_decodes`); an undecodable one is ``corrupt``.

Fast path (when torch and simplejpeg import; otherwise everything is Pillow):

* a baseline RGB JPEG that needs no EXIF rotation is decoded by simplejpeg
  (libjpeg-turbo, same pixels as Pillow's decoder, less overhead), at the DCT
  scale Pillow's draft chose when it shrinks at least 2x;
  if simplejpeg refuses it, Pillow decodes it as above;
* the bilinear resize runs on torch's vectorised uint8 antialiased kernel
  (``interpolate(..., mode="bilinear", antialias=True)``: the same triangle
  filter as Pillow's, within +-1 of it, about 2x faster on ImageNet-sized images) whenever Pillow would
  not have applied ``reducing_gap`` (shrink < 6x); bicubic, lanczos and larger
  shrinks use Pillow;
* the JPEG is encoded by simplejpeg (libjpeg-turbo, accurate DCT, the same
  quantisation tables for ``quality``, baseline, 4:2:0, no metadata).

Output bytes therefore depend on the Pillow, simplejpeg and torch versions,
all recorded by :func:`encoder_version`. Callers run torch on one thread
(:func:`one_core`): conversion parallelism is one process per core.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import io
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from shardkit.convert.colour import Colour, needs_conversion
from shardkit.convert.colour import to_rgb as _to_rgb
from shardkit.convert.skips import SkipImage as SkipImage
from shardkit.convert.skips import SkipReason as SkipReason
from shardkit.format.members import MAX_PIXELS
from shardkit.private_apis import one_thread

#: the longest side libjpeg(-turbo) writes or reads (``JPEG_MAX_DIMENSION``)
JPEG_MAX_SIDE = 65_500
#: the JPEG qualities ``convert`` and ``sample-data`` accept: above 95 files grow about 2x for little gain
QUALITY_RANGE = (1, 95)
#: file name extensions treated as images (compared lower-case), as in torchvision
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm")
_REDUCING_GAP = 3.0
_SUBSAMPLING_420 = 2


class Resample(str, enum.Enum):
    """Antialiasing resize filter. Bilinear is about 1.6x faster than bicubic at ImageNet sizes."""

    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"

    @property
    def pil(self) -> Image.Resampling:
        return {
            "bilinear": Image.Resampling.BILINEAR,
            "bicubic": Image.Resampling.BICUBIC,
            "lanczos": Image.Resampling.LANCZOS,
        }[self.value]


@dataclass(frozen=True)
class EncodeConfig:
    """Everything that decides the output pixels and bytes.

    Attributes:
        short_side: resize so the shorter side is this many pixels (``None``: use ``max_side``).
        max_side: resize so the longer side is this many pixels (alternative to ``short_side``).
        quality: JPEG quality, 1-95 (:data:`QUALITY_RANGE`).
        max_pixels: larger images (width x height) are skipped as ``too_many_pixels``.
        resample: resize filter.
        copy: keep a source JPEG's bytes as they are (no resize, no re-encode) when it is an upright
            (no EXIF rotation) RGB or grayscale JPEG in sRGB within ``max_pixels`` that decodes; other
            images are converted as usual.
        colour: what an embedded ICC profile does (:class:`Colour`): ``srgb`` (default) converts the
            pixels to sRGB, ``raw`` keeps the stored values.
    """

    short_side: int | None = 256
    max_side: int | None = None
    quality: int = 90
    max_pixels: int = MAX_PIXELS
    resample: Resample = Resample.BILINEAR
    copy: bool = False
    colour: Colour = Colour.SRGB

    def __post_init__(self) -> None:
        object.__setattr__(self, "colour", Colour.parse(self.colour))
        try:
            object.__setattr__(self, "resample", Resample(self.resample))
        except ValueError:
            raise ValueError(
                f"resample must be one of {', '.join(r.value for r in Resample)}, not {self.resample!r}"
            ) from None
        if (self.short_side is None) == (self.max_side is None):
            raise ValueError("set exactly one of short_side and max_side")
        side = self.short_side if self.short_side is not None else self.max_side
        if not isinstance(side, int) or side < 1:
            raise ValueError(f"short_side/max_side must be a positive integer, not {side!r}")
        if side > JPEG_MAX_SIDE:
            raise ValueError(f"short_side/max_side must be at most {JPEG_MAX_SIDE} (JPEG's limit), not {side}")
        low, high = QUALITY_RANGE
        if not low <= self.quality <= high:
            raise ValueError(
                f"quality must be between {low} and {high}, not {self.quality} (above 95 files grow ~2x for little gain)"
            )
        if self.max_pixels < 1:
            raise ValueError("max_pixels must be positive")


@dataclass(frozen=True)
class Encoded:
    """A re-encoded image, the original (EXIF-oriented) size and the stored size (``out_width`` x ``out_height``)."""

    jpeg: bytes
    width: int
    height: int
    out_width: int = 0
    out_height: int = 0

    @property
    def out_size(self) -> tuple[int, int]:
        """``(width, height)`` of the stored image (the original size when not recorded)."""
        return (self.out_width or self.width, self.out_height or self.height)


def target_size(width: int, height: int, opts: EncodeConfig) -> tuple[int, int]:
    """Output size for a ``width`` x ``height`` image: the bound side hits the target, never upscaled."""
    if opts.short_side is not None:
        side, target = min(width, height), opts.short_side
    else:
        side, target = max(width, height), opts.max_side  # type: ignore[assignment]
    if side <= target:
        return width, height
    scale = target / side
    if width <= height if opts.short_side is not None else width >= height:
        return target, max(1, round(height * scale))
    return max(1, round(width * scale)), target


def process(data: bytes, opts: EncodeConfig) -> Encoded:
    """Turn the bytes of one source file into a baseline JPEG; raise :class:`SkipImage` if impossible."""
    if not data:
        raise SkipImage(SkipReason.EMPTY, "zero bytes")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DecompressionBombWarning, EXIF/TIFF metadata warnings
        try:
            im = Image.open(io.BytesIO(data))
        except UnidentifiedImageError:
            raise SkipImage(SkipReason.NOT_AN_IMAGE, "not a recognised image format") from None
        except Image.DecompressionBombError as exc:
            raise SkipImage(SkipReason.TOO_MANY_PIXELS, str(exc)) from None
        except (OSError, ValueError, SyntaxError) as exc:
            raise SkipImage(SkipReason.CORRUPT, f"cannot read header: {exc}") from None
        try:
            return _process_open(im, data, opts)
        except SkipImage:
            raise
        except Image.DecompressionBombError as exc:
            raise SkipImage(SkipReason.TOO_MANY_PIXELS, str(exc)) from None
        except MemoryError:
            raise SkipImage(SkipReason.TOO_MANY_PIXELS, "out of memory while decoding") from None
        except Exception as exc:  # noqa: BLE001 - any decoder failure means a bad file, never a crash
            raise SkipImage(SkipReason.CORRUPT, f"{type(exc).__name__}: {exc}") from None
        finally:
            im.close()


def _process_open(im: Image.Image, data: bytes, opts: EncodeConfig) -> Encoded:
    w, h = im.size
    if w < 1 or h < 1:
        raise SkipImage(SkipReason.CORRUPT, f"impossible size {w}x{h}")
    if w * h > opts.max_pixels:
        raise SkipImage(SkipReason.TOO_MANY_PIXELS, f"{w}x{h} = {w * h} pixels > max_pixels {opts.max_pixels}")
    check_jpeg_side(w, h, *target_size(w, h, opts))  # from the header: a rotation swaps the sides, not their lengths
    orientation = im.getexif().get(0x0112, 1)
    convert_icc = opts.colour is Colour.SRGB and needs_conversion(im.info.get("icc_profile"), im.mode)
    if opts.copy and im.format == "JPEG" and im.mode in ("RGB", "L") and orientation == 1 and not convert_icc:
        check_jpeg_side(w, h, w, h)
        check_decodes(im, data)
        return Encoded(data, w, h, w, h)
    ow, oh = (h, w) if orientation in (5, 6, 7, 8) else (w, h)
    fw, fh = target_size(ow, oh, opts)
    tw, th = target_size(w, h, opts)  # in stored orientation: the scale factor does not depend on rotation
    fast = _fast()
    arr: np.ndarray | None = None  # the RGB pixels, once they are an array rather than `im`
    sj = fast is not None and im.format == "JPEG" and im.mode == "RGB" and orientation == 1 and not convert_icc
    if im.format == "JPEG" and tw * 2 <= w and th * 2 <= h:
        im.draft("RGB", (tw, th))  # now im.size is the reduced size libjpeg will decode to
    if sj:
        arr = _sj_decode(fast, data, *im.size)  # type: ignore[arg-type]  # sj: fast is not None
    if arr is None:
        if getattr(im, "n_frames", 1) > 1:
            im.seek(0)
        im.load()
        im = ImageOps.exif_transpose(im) or im
        im = _to_rgb(im, opts.colour)
    cw, ch = (arr.shape[1], arr.shape[0]) if arr is not None else im.size
    if (cw, ch) != (fw, fh):
        if fast is not None and _torch_resizes(cw, ch, fw, fh, opts.resample):
            arr = resize_bilinear(np.asarray(im) if arr is None else arr, fw, fh)
        else:
            if arr is not None:
                im = Image.fromarray(arr)
            im = resize_pil(im, fw, fh, opts.resample)
            arr = None
    if fast is not None:
        jpeg = fast.simplejpeg.encode_jpeg(
            np.ascontiguousarray(np.asarray(im) if arr is None else arr),
            quality=opts.quality,
            colorspace="RGB",
            colorsubsampling="420",
            fastdct=False,
        )
        return Encoded(jpeg, ow, oh, fw, fh)
    if arr is not None:
        im = Image.fromarray(arr)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=opts.quality, progressive=False, optimize=False, subsampling=_SUBSAMPLING_420)
    return Encoded(buf.getvalue(), ow, oh, fw, fh)


def check_jpeg_side(width: int, height: int, out_width: int, out_height: int) -> None:
    """Raise ``too_large_for_jpeg`` when the stored ``out_width`` x ``out_height`` has a side over :data:`JPEG_MAX_SIDE`."""
    if max(out_width, out_height) > JPEG_MAX_SIDE:
        raise SkipImage(
            SkipReason.TOO_LARGE_FOR_JPEG,
            f"{width}x{height} would be stored as {out_width}x{out_height}, over JPEG's limit of {JPEG_MAX_SIDE:,} "
            f"pixels per side; convert such images with --max-side N (N <= {JPEG_MAX_SIDE}) to bound the longer side",
        )


def check_decodes(im: Image.Image, data: bytes) -> None:
    """Prove that the JPEG ``data`` (opened as ``im``, not loaded) decodes, as the loader will decode it: simplejpeg
    (strict: libjpeg-turbo's warnings are errors) at 1/8 scale, else Pillow at 1/8 scale (``draft``).

    DCT scaling skips most of the inverse transform but still reads every coefficient, so truncated or
    damaged entropy-coded data is found. Raises Pillow's error (``OSError``) when neither decodes.
    """
    fast = _fast()
    if fast is not None:
        try:
            fast.simplejpeg.decode_jpeg(
                data, colorspace="GRAY" if im.mode == "L" else "RGB", min_width=1, min_height=1, strict=True
            )
            return
        except (ValueError, RuntimeError):
            pass  # Pillow decides: it accepts some files libjpeg-turbo only warns about, as the loader does
    im.draft(im.mode, (1, 1))
    im.load()


def resize_pil(im: Image.Image, width: int, height: int, resample: Resample) -> Image.Image:
    """Pillow's antialiased resize of ``im`` to ``width`` x ``height``, exact for large shrinks.

    A shrink of at least ``2 * reducing_gap`` on an axis is first box-reduced (``Image.reduce``) by the largest
    factor up to ``size / target / reducing_gap`` that divides that side, so that every reduced pixel
    averages a full block (Pillow's own ``reducing_gap`` averages a partial last block and weighs it as a full
    one: a 200x70000 gradient shrunk to 1x256 came out 12 levels too bright). A side with no such factor
    is resized from its full resolution.
    """
    fx, fy = _dividing_factor(im.width, width), _dividing_factor(im.height, height)
    if fx > 1 or fy > 1:
        im = im.reduce((fx, fy))
    return im.resize((width, height), resample.pil)


def _dividing_factor(size: int, target: int) -> int:
    """The largest whole factor up to ``size / target / reducing_gap`` that divides ``size`` (1: none)."""
    factor = int(size / target / _REDUCING_GAP)
    while factor > 1 and size % factor:
        factor -= 1
    return max(factor, 1)


@dataclass(frozen=True)
class _Fast:
    torch: Any
    interpolate: Any
    simplejpeg: Any


@functools.cache
def _fast() -> _Fast | None:
    """torch and simplejpeg for the fast path, imported on first use (``import shardkit`` stays light); ``None``: Pillow only."""
    try:
        import simplejpeg
        import torch
        from torch.nn.functional import interpolate
    except ImportError:
        return None
    return _Fast(torch, interpolate, simplejpeg)


def _sj_decode(fast: _Fast, data: bytes, w: int, h: int) -> np.ndarray | None:
    """RGB decode by simplejpeg at ``w`` x ``h`` (the full size, or the DCT-scaled size Pillow's draft chose:
    the same scale, so the same pixels), or ``None`` to let Pillow decide (warnings, odd files)."""
    try:
        arr = fast.simplejpeg.decode_jpeg(
            data,
            colorspace="RGB",
            fastdct=False,
            fastupsample=False,
            strict=True,
            min_width=w,
            min_height=h,
        )
    except (ValueError, RuntimeError):  # truncated, corrupt, or something libjpeg-turbo only warns about
        return None
    return arr if arr.shape == (h, w, 3) else None


def _torch_resizes(cw: int, ch: int, fw: int, fh: int, resample: Resample) -> bool:
    """Whether the torch kernel does this resize: bilinear, and no ``reducing_gap`` pre-reduction in Pillow."""
    return (
        resample is Resample.BILINEAR
        and fw <= cw
        and fh <= ch
        and int(cw / fw / _REDUCING_GAP) <= 1
        and int(ch / fh / _REDUCING_GAP) <= 1
    )


def resize_bilinear(arr: np.ndarray, width: int, height: int) -> np.ndarray:
    """Antialiased bilinear resize of an ``H x W x 3`` uint8 array with torch's vectorised uint8 kernel.

    The filter is Pillow's (a triangle stretched by the scale factor); results are within +-1 of
    ``Image.resize(..., BILINEAR)`` and, for a given torch version, identical on every CPU (AVX2,
    AVX-512 and the generic path give the same bytes) and thread count.
    """
    fast = _fast()
    if fast is None:
        return np.asarray(Image.fromarray(arr).resize((width, height), Image.Resampling.BILINEAR))
    t = fast.torch.from_numpy(arr).permute(2, 0, 1)[None]  # channels-last view, no copy
    planes = fast.interpolate(t, size=(height, width), mode="bilinear", antialias=True, align_corners=False)[0].numpy()
    out = np.empty((height, width, planes.shape[0]), np.uint8)  # the kernel returns planar (CHW) output
    for c in range(planes.shape[0]):  # interleave plane by plane: ~4x faster than a transposing copy
        out[..., c] = planes[c]
    return out


def one_core() -> contextlib.AbstractContextManager[None]:
    """:func:`shardkit.private_apis.one_thread` when the fast path (torch) is in use; nothing to limit otherwise."""
    return one_thread() if _fast() is not None else contextlib.nullcontext()


def encoder_version() -> str:
    """Versions of everything that touches pixels: output bytes are only reproducible with the same ones."""
    import PIL
    from PIL import features

    turbo = features.version("libjpeg_turbo") if features.check_feature("libjpeg_turbo") else None
    jpeg = f"libjpeg-turbo {turbo}" if turbo else f"libjpeg {features.version('jpg')}"
    fast = _fast()
    extra = (
        f", simplejpeg {fast.simplejpeg.__version__} (decode/encode), torch {fast.torch.__version__} (bilinear resize)"
        if fast
        else ""
    )
    return f"pillow {PIL.__version__}, {jpeg}{extra}"
