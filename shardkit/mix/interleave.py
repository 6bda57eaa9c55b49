"""The Sainte-Lague interleave of a mixed epoch: which source's sample sits at each position, in exact integer arithmetic."""

from __future__ import annotations

import numpy as np

_MAX_EPOCH = 1 << 31  # keys compare as (2k+1) * c_j in int64: 2 * c_i * c_j < 2**62


# --------------------------------------------------------------------------- interleave


def _before(ci: np.ndarray, k: np.ndarray, cj: int, ties: bool) -> np.ndarray:
    """Samples of a source with count ``cj`` ordered before sample ``k`` of a source with count ``ci``."""
    x = (2 * k + 1) * cj
    odd = x // ci if ties else (x - 1) // ci  # largest 2m+1 with (2m+1) * ci < x (<= x on ties)
    return np.minimum((odd + 1) // 2, cj)


def positions(counts: np.ndarray, source: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Mixed positions of sample ``k`` of ``source`` (vectorised over both)."""
    counts = np.asarray(counts, np.int64)
    source, k = np.broadcast_arrays(np.asarray(source, np.int64), np.asarray(k, np.int64))
    ci = counts[source]
    pos = k.copy()
    for j, cj in enumerate(counts.tolist()):
        if cj == 0:
            continue
        mine = source == j
        pos += np.where(mine, 0, _before(np.maximum(ci, 1), k, cj, False) * (source < j) + _before(np.maximum(ci, 1), k, cj, True) * (source > j))
    return pos


def prefix(counts: np.ndarray, a: int) -> np.ndarray:
    """Samples of each source at mixed positions ``< a`` (binary search, all sources at once)."""
    counts = np.asarray(counts, np.int64)
    lo, hi = np.zeros(len(counts), np.int64), counts.copy()
    src = np.arange(len(counts), dtype=np.int64)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        below = positions(counts, src, np.minimum(mid, np.maximum(counts - 1, 0))) < a
        below &= mid < counts
        lo = np.where((lo < hi) & below, mid + 1, lo)
        hi = np.where((lo < hi) & ~below, mid, hi)
    return lo


def _positions_of(counts: np.ndarray, i: int, k: np.ndarray) -> np.ndarray:
    """:func:`positions` of samples ``k`` of one source ``i`` (in-place integer passes, the hot path)."""
    ci = int(counts[i])
    pos = k.copy()
    odd = 2 * k + 1
    tmp = np.empty_like(k)
    for j, cj in enumerate(counts.tolist()):
        if j == i or cj == 0:
            continue
        np.multiply(odd, cj, out=tmp)
        if j > i:  # ties go to the lower source
            tmp -= 1
        tmp //= ci
        tmp += 1
        tmp >>= 1
        np.minimum(tmp, cj, out=tmp)
        pos += tmp
    return pos


def window(counts: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """``(source, k)`` of mixed positions ``[a, b)``: sample ``k`` of each one's source."""
    counts = np.asarray(counts, np.int64)
    if int(counts.sum()) >= _MAX_EPOCH:
        raise ValueError(f"an epoch of {int(counts.sum())} samples is too large to interleave (at most {_MAX_EPOCH - 1})")
    src = np.empty(b - a, np.int64)
    kk = np.empty(b - a, np.int64)
    k0, k1 = prefix(counts, a), prefix(counts, b)
    for i in range(len(counts)):
        ks = np.arange(k0[i], k1[i], dtype=np.int64)
        at = _positions_of(counts, i, ks)
        at -= a
        src[at] = i
        kk[at] = ks
    return src, kk
