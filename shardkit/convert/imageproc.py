"""Decode one source image and re-encode it as a small baseline JPEG.

This is the only module that touches pixels during conversion; everything in
it is a pure function of the source bytes and :class:`EncodeConfig`, so the
output bytes depend on nothing else (for a given Pillow/libjpeg build).

Pipeline for one file:

1. Read the bytes. Zero bytes -> ``empty``; an ``OSError`` -> ``unreadable``.
2. ``Image.open`` (header only). Not recognised -> ``not_an_image``; more than
   ``max_pixels`` pixels -> ``too_many_pixels``, before any pixel buffer is
   allocated.
3. For JPEGs that shrink at least 2x, ``Image.draft`` lets libjpeg decode at
   1/2, 1/4 or 1/8 scale (DCT scaling): far less work than a full decode
   followed by a resize. The draft size is never smaller than the target.
4. Load (truncated or broken data -> ``corrupt``), apply the EXIF orientation,
   take the first frame of multi-frame files.
5. Convert to RGB: palette, grayscale and 1-bit via Pillow; CMYK via Pillow's
   conversion (ICC profiles are ignored); 16-bit and 32-bit integer images are
   scaled to 8 bits (``>> 8``), not clipped; images with transparency are
   composited onto **white** (:data:`BACKGROUND`).
6. Resize so the shorter side is ``short_side`` (or the longer side is
   ``max_side``) with an antialiasing filter (:class:`Resample`; default
   bilinear, like ``torchvision.transforms.Resize``) and ``reducing_gap``;
   never upscale.
7. Encode a baseline (non-progressive) JPEG at ``quality`` with 4:2:0 chroma
   subsampling, no optimisation pass and no metadata.

With ``copy``, an upright RGB or grayscale JPEG skips steps 3-7: its bytes
are kept as they are (the header is still checked).

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

from shardkit.compat import one_thread, renamed
from shardkit.format.members import MAX_PIXELS

#: colour that transparent pixels are composited onto
BACKGROUND = (255, 255, 255)
#: file name extensions treated as images (compared lower-case), as in torchvision
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm")
_REDUCING_GAP = 3.0
_SUBSAMPLING_420 = 2


class SkipReason(str, enum.Enum):
    """Why a source file is not in any shard (the ``reason`` code in the manifest)."""

    NOT_AN_IMAGE = "not_an_image"
    CORRUPT = "corrupt"
    EMPTY = "empty"
    TOO_MANY_PIXELS = "too_many_pixels"
    UNREADABLE = "unreadable"
    NOT_IN_CLASS_FOLDER = "not_in_class_folder"
    BAD_NAME = "bad_name"
    DUPLICATE_FILE = "duplicate_file"
    MISSING_FILE = "missing_file"
    NO_LABEL = "no_label"
    BAD_LABEL = "bad_label"
    DUPLICATE_PATH = "duplicate_path"
    BAD_METADATA = "bad_metadata"
    BAD_ROW = "bad_row"
    BAD_TARGET = "bad_target"
    NO_TEXT = "no_text"
    BAD_TEXT = "bad_text"
    MISSING_MASK = "missing_mask"
    BAD_MASK = "bad_mask"
    SIZE_MISMATCH = "size_mismatch"


class SkipImage(Exception):
    """Raised for a source file that cannot become a sample."""

    def __init__(self, reason: SkipReason, detail: str = ""):
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


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
        quality: JPEG quality, 1-95.
        max_pixels: larger images (width x height) are skipped as ``too_many_pixels``.
        resample: resize filter.
        copy: keep a source JPEG's bytes as they are (no decode, no resize, no re-encode) when it
            is an upright (no EXIF rotation) RGB or grayscale JPEG within ``max_pixels``; other
            images are converted as usual.
    """

    short_side: int | None = 256
    max_side: int | None = None
    quality: int = 90
    max_pixels: int = MAX_PIXELS
    resample: Resample = Resample.BILINEAR
    copy: bool = False

    def __post_init__(self) -> None:
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
        if not 1 <= self.quality <= 95:
            raise ValueError(f"quality must be between 1 and 95, not {self.quality}")
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


def _to_rgb(im: Image.Image) -> Image.Image:
    mode = im.mode
    if mode == "RGB":
        return im
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        arr = np.asarray(im).astype(np.int64)
        arr = np.clip(arr, 0, 65535) >> 8
        return Image.fromarray(arr.astype(np.uint8)).convert("RGB")
    if mode == "F":
        arr = np.nan_to_num(np.asarray(im, dtype=np.float64))
        return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).convert("RGB")
    if mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    elif mode in ("LA", "La", "PA", "RGBa"):
        im = im.convert("RGBA")
    if im.mode == "RGBA":
        bg = Image.new("RGB", im.size, BACKGROUND)
        bg.paste(im, mask=im.getchannel("A"))
        return bg
    return im.convert("RGB")


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
    orientation = im.getexif().get(0x0112, 1)
    if opts.copy and im.format == "JPEG" and im.mode in ("RGB", "L") and orientation == 1:
        return Encoded(data, w, h, w, h)
    ow, oh = (h, w) if orientation in (5, 6, 7, 8) else (w, h)
    tw, th = target_size(w, h, opts)  # in stored orientation: the scale factor does not depend on rotation
    fast = _fast()
    arr: np.ndarray | None = None  # the RGB pixels, once they are an array rather than `im`
    sj = fast is not None and im.format == "JPEG" and im.mode == "RGB" and orientation == 1
    if im.format == "JPEG" and tw * 2 <= w and th * 2 <= h:
        im.draft("RGB", (tw, th))  # now im.size is the reduced size libjpeg will decode to
    if sj:
        arr = _sj_decode(fast, data, *im.size)  # type: ignore[arg-type]  # sj: fast is not None
    if arr is None:
        if getattr(im, "n_frames", 1) > 1:
            im.seek(0)
        im.load()
        im = ImageOps.exif_transpose(im) or im
        im = _to_rgb(im)
    fw, fh = target_size(ow, oh, opts)
    cw, ch = (arr.shape[1], arr.shape[0]) if arr is not None else im.size
    if (cw, ch) != (fw, fh):
        if fast is not None and _torch_resizes(cw, ch, fw, fh, opts.resample):
            arr = resize_bilinear(np.asarray(im) if arr is None else arr, fw, fh)
        else:
            if arr is not None:
                im = Image.fromarray(arr)
            im = im.resize((fw, fh), opts.resample.pil, reducing_gap=_REDUCING_GAP)
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
    """:func:`shardkit.compat.one_thread` when the fast path (torch) is in use; nothing to limit otherwise."""
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


#: names before issue 22 -> their names now: still importable, with a DeprecationWarning
__getattr__ = renamed(__name__, {"ImageOptions": "EncodeConfig"}, globals())
