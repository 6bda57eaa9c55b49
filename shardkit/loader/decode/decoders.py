"""JPEG decoders behind one small interface: the stored size from the header, then pixels at a reduced DCT scale.

simplejpeg (libjpeg-turbo, fastest; ``min_width``/``min_height`` DCT scaling), PIL with
``draft`` (the fallback for anything that is not a baseline RGB/gray JPEG, and when
simplejpeg is not installed) and ``decode_jpeg`` of TorchCodec, or of torchvision without it
(``decoder="torchvision"``; no DCT scaling; kept for comparison; :mod:`shardkit.loader.decode.backend`).
:func:`make_decoder` picks one by :class:`shardkit.loader.config.Decoder`.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image

from shardkit.loader.config import Decoder


class JpegDecoder:
    """Decodes ``data`` to an RGB array of at least ``min_w`` x ``min_h`` (DCT-scaled).

    ``fast`` asks for libjpeg-turbo's fast integer IDCT and plain chroma upsampling
    where the decoder offers them (simplejpeg); others ignore it.
    """

    name = "base"

    def header(self, data: bytes) -> tuple[int, int]:
        """``(width, height)`` of the stored image without decoding pixels."""
        with Image.open(io.BytesIO(data)) as im:
            return im.size

    def decode(self, data: bytes, min_w: int, min_h: int, fast: bool = False) -> np.ndarray:
        raise NotImplementedError


class PilDecoder(JpegDecoder):
    """PIL with ``draft`` (libjpeg DCT scaling); handles every format PIL reads."""

    name = "pil"

    def decode(self, data: bytes, min_w: int, min_h: int, fast: bool = False) -> np.ndarray:
        with Image.open(io.BytesIO(data)) as im:
            if im.format == "JPEG":
                im.draft("RGB", (min_w, min_h))
            return np.array(im.convert("RGB"))  # writable: torch.from_numpy wants it


class SimplejpegDecoder(JpegDecoder):
    """simplejpeg (libjpeg-turbo) with ``min_width``/``min_height`` DCT scaling; PIL for the rest."""

    name = "simplejpeg"

    def __init__(self) -> None:
        import simplejpeg

        self._sj = simplejpeg
        self._pil = PilDecoder()

    def header(self, data: bytes) -> tuple[int, int]:
        try:
            h, w, _, _ = self._sj.decode_jpeg_header(data)
            return w, h
        except ValueError:
            return self._pil.header(data)

    def decode(self, data: bytes, min_w: int, min_h: int, fast: bool = False) -> np.ndarray:
        try:
            return self._sj.decode_jpeg(
                data,
                colorspace="RGB",
                min_width=min_w,
                min_height=min_h,
                min_factor=1.0,
                fastdct=fast,
                fastupsample=fast,
            )
        except ValueError:  # not a JPEG libjpeg-turbo handles as RGB (CMYK, PNG, damaged...)
            return self._pil.decode(data, min_w, min_h)


class TorchvisionDecoder(JpegDecoder):
    """``decode_jpeg`` at full resolution (no DCT scaling) through TorchCodec when installed, else torchvision's
    (deprecated since torchvision 0.29); PIL for the rest.

    ``backend`` (default: the process's choice, :func:`shardkit.loader.decode.backend.default_backend`) says which.
    TorchCodec applies a file's EXIF orientation, which the header's size and the crop geometry do not:
    such a file is decoded by PIL (stored pixels, as every other decoder here).
    """

    name = "torchvision"

    def __init__(self, backend: "str | None" = None) -> None:
        import torch

        from shardkit.loader.decode.backend import (
            DECODE,
            TORCHCODEC,
            check_backend,
            default_backend,
            exif_orientation,
            import_backend,
        )

        self.backend = check_backend(backend) if backend is not None else default_backend()
        import_backend(self.backend)
        self._torch, self._decode, self._cpu = torch, DECODE[self.backend], torch.device("cpu")
        self._orientation = exif_orientation if self.backend == TORCHCODEC else None
        self._pil = PilDecoder()

    def decode(self, data: bytes, min_w: int, min_h: int, fast: bool = False) -> np.ndarray:
        if self._orientation is not None and self._orientation(data) != 1:
            return self._pil.decode(data, min_w, min_h)
        try:
            t = self._decode([self._torch.frombuffer(bytearray(data), dtype=self._torch.uint8)], self._cpu)[0]
        except RuntimeError:
            return self._pil.decode(data, min_w, min_h)
        return t.permute(1, 2, 0).numpy()


DECODERS: dict[str, Callable[[], JpegDecoder]] = {
    "simplejpeg": SimplejpegDecoder,
    "pil": PilDecoder,
    "torchvision": TorchvisionDecoder,
}


def make_decoder(name: "Decoder | str" = Decoder.AUTO) -> JpegDecoder:
    """The named :class:`Decoder`; ``"auto"`` is simplejpeg if installed, else PIL.

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    choice = Decoder.parse(name)
    if choice is Decoder.AUTO:
        try:
            return SimplejpegDecoder()
        except ImportError:
            return PilDecoder()
    return DECODERS[choice.value]()
