"""Which JPEGs the batched device decode takes, read from the header alone (:func:`jpeg_route`).

:class:`~shardkit.loader.decode.device.DeviceDecoder` sends the JPEGs this routes to ``None`` to one batched
``decode_jpeg`` call and the rest to the worker path's CPU decoder; the route depends on the bytes only, so the
counts are the same on every device and backend.
"""

from __future__ import annotations

from typing import Optional, Union

from torch import Tensor

from shardkit.loader.decode.backend import app1_orientation

Jpeg = Union[bytes, bytearray, memoryview, Tensor]

#: chroma/luma sampling factors (h, v) of the luma component that nvJPEG's batched decode takes (4:4:4, 4:2:2, 4:4:0, 4:2:0)
_LUMA_FACTORS = {(1, 1), (2, 1), (1, 2), (2, 2)}
#: bytes at the end searched for the end-of-image marker (encoders may pad after it)
_EOI_WINDOW = 64
#: start-of-frame markers other than DHT (C4), JPG (C8) and DAC (CC)
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def jpeg_route(data: Jpeg) -> Optional[str]:
    """``None`` if the batched device decode takes ``data``, else why not (one short word).

    Reads markers up to the frame header only (no pixels): a baseline or extended
    sequential Huffman JPEG (SOF0/SOF1), 8-bit, with 1 component or 3 YCbCr
    components in 4:4:4/4:2:2/4:4:0/4:2:0 is batched; anything else is routed
    to the CPU decoder (``"progressive"``, ``"cmyk"``, ``"subsampling"``, ...), and so is a
    file without an end-of-image marker in its last 64 bytes (``"truncated"``, or trailing data)
    and one with an EXIF orientation other than 1 (``"orientation"``: TorchCodec would rotate it;
    the worker path and the crop geometry use the stored pixels).
    """
    b = memoryview(data.numpy() if isinstance(data, Tensor) else data).cast("B")  # type: ignore[arg-type] # no copy
    if bytes(b[:2]) != b"\xff\xd8":
        return "not-jpeg"
    i, n, adobe_rgb, oriented = 2, len(b), False, False
    while i + 4 <= n:
        if b[i] != 0xFF:
            return "damaged"
        m = b[i + 1]
        if m == 0xFF:  # fill byte
            i += 1
            continue
        if m == 0x01 or 0xD0 <= m <= 0xD8:  # markers without a length
            i += 2
            continue
        seg_len = (b[i + 2] << 8) | b[i + 3]
        if m == 0xEE and bytes(b[i + 4 : i + 9]) == b"Adobe" and i + 15 < n:
            adobe_rgb = b[i + 15] == 0  # APP14 transform 0: RGB (or CMYK) coded without YCbCr
        if m == 0xE1 and not oriented:
            oriented = app1_orientation(b[i + 4 : i + 2 + seg_len]) != 1
        if m in _SOF:
            if i + 2 + seg_len > n:
                return "damaged"
            if m not in (0xC0, 0xC1):
                return "progressive" if m in (0xC2, 0xC6, 0xCA, 0xCE) else "sof"
            seg = b[i + 4 : i + 2 + seg_len]
            if len(seg) < 6 or seg[0] != 8:
                return "precision"
            comps = seg[5]
            if comps == 1:
                return _tail(b, oriented)
            if comps == 4:
                return "cmyk"
            if comps != 3 or len(seg) < 15:
                return "components"
            if adobe_rgb:
                return "rgb"
            factors = [seg[7 + 3 * k] for k in range(3)]
            if (factors[0] >> 4, factors[0] & 15) not in _LUMA_FACTORS or factors[1] != 0x11 or factors[2] != 0x11:
                return "subsampling"
            return _tail(b, oriented)
        if m == 0xDA:  # scan before any frame header
            return "damaged"
        i += 2 + seg_len
    return "damaged"


def _tail(b: memoryview, oriented: bool) -> Optional[str]:
    # libjpeg (CPU) fails on a cut-off scan like the worker path does; a hardware decoder may fill in
    # the rest instead: route such files to the CPU so that they are dropped on every device alike
    if b"\xff\xd9" not in bytes(b[-_EOI_WINDOW:]):
        return "truncated"
    return "orientation" if oriented else None
