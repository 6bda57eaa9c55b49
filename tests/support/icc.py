"""ICC profiles built in the test, no downloads: a matrix/TRC RGB profile (Display P3 and Adobe RGB primaries) and
a gray profile, as LittleCMS reads them (ICC v2: header, tag table, XYZ colorants adapted to D50, gamma curves)."""

from __future__ import annotations

import struct

import numpy as np

_D50 = np.array([0.9642, 1.0, 0.8249])
_BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])

#: (red, green, blue, white) chromaticities
DISPLAY_P3 = ((0.680, 0.320), (0.265, 0.690), (0.150, 0.060), (0.3127, 0.3290))
ADOBE_RGB = ((0.640, 0.330), (0.210, 0.710), (0.150, 0.060), (0.3127, 0.3290))


def _xyz(xy: tuple[float, float]) -> np.ndarray:
    x, y = xy
    return np.array([x / y, 1.0, (1 - x - y) / y])


def _s15(v: float) -> bytes:
    return struct.pack(">i", round(v * 65536))


def _xyz_tag(v: np.ndarray) -> bytes:
    return b"XYZ " + bytes(4) + b"".join(_s15(c) for c in v)


def _curve(gamma: float) -> bytes:
    return b"curv" + bytes(4) + struct.pack(">IH", 1, round(gamma * 256)) + bytes(2)


def _desc(text: str) -> bytes:
    ascii_ = text.encode() + b"\0"
    return b"desc" + bytes(4) + struct.pack(">I", len(ascii_)) + ascii_ + bytes(4 + 4 + 2 + 1 + 67)


def _profile(space: bytes, tags: list[tuple[bytes, bytes]]) -> bytes:
    table, data = b"", b""
    offset = 128 + 4 + 12 * len(tags)
    for sig, body in tags:
        body += bytes(-len(body) % 4)
        table += sig + struct.pack(">II", offset + len(data), len(body))
        data += body
    size = offset + len(data)
    header = (
        struct.pack(">I", size)
        + b"lcms"
        + struct.pack(">I", 0x02100000)
        + b"mntr"
        + space
        + b"XYZ "
        + struct.pack(">6H", 2020, 1, 1, 0, 0, 0)
        + b"acsp"
        + bytes(4 + 4 + 4 + 4 + 8)
        + struct.pack(">I", 0)  # perceptual
        + b"".join(_s15(c) for c in _D50)
        + bytes(128 - 80)
    )
    return header + struct.pack(">I", len(tags)) + table + data


def rgb_profile(primaries=DISPLAY_P3, gamma: float = 2.2, name: str = "test RGB") -> bytes:
    """An RGB display profile with these chromaticities (white included) and one gamma for every channel."""
    *rgb, white = primaries
    m = np.stack([_xyz(p) for p in rgb], axis=1)
    m = m * np.linalg.solve(m, _xyz(white))  # scale the primaries so that R=G=B=1 is the white point
    cone = _BRADFORD @ _xyz(white), _BRADFORD @ _D50
    adapt = np.linalg.inv(_BRADFORD) @ np.diag(cone[1] / cone[0]) @ _BRADFORD  # white -> D50 (Bradford)
    cols = adapt @ m
    tags = [(b"desc", _desc(name)), (b"wtpt", _xyz_tag(_D50))]
    tags += [(sig, _xyz_tag(cols[:, i])) for i, sig in enumerate((b"rXYZ", b"gXYZ", b"bXYZ"))]
    tags += [(sig, _curve(gamma)) for sig in (b"rTRC", b"gTRC", b"bTRC")]
    return _profile(b"RGB ", tags)


def gray_profile(gamma: float = 1.0, name: str = "test gray") -> bytes:
    """A gray display profile with a D50 white point and this gamma."""
    return _profile(b"GRAY", [(b"desc", _desc(name)), (b"wtpt", _xyz_tag(_D50)), (b"kTRC", _curve(gamma))])
