"""The Sainte-Lague interleave of a mixed epoch, in exact integer arithmetic.

Source ``i`` has ``c_i`` samples in the epoch; its ``k``-th one has key ``(2k + 1) / (2 c_i)``
and the epoch is ordered by key, ties to the lower source. Sample ``(j, m)`` comes before
``(i, k)`` when ``(2m + 1) c_i < (2k + 1) c_j`` (``<=`` for ``j < i``), so the position of a
sample is ``k`` plus, per other source, a count in closed form: any window of positions costs
O(sources^2 + window), nothing is materialised per epoch.
"""

from __future__ import annotations

import numpy as np

_MAX_EPOCH = 1 << 31  # keys compare as (2k+1) * c_j in int64: 2 * c_i * c_j < 2**62


def _positions_of(counts: np.ndarray, i: int, k: np.ndarray) -> np.ndarray:
    """Mixed positions of samples ``k`` of source ``i`` (in-place integer passes: the hot path)."""
    ci = int(counts[i])
    pos = k.copy()
    if ci == 0:
        return pos  # no samples: nothing to place
    odd = 2 * k + 1
    tmp = np.empty_like(k)
    for j, cj in enumerate(counts.tolist()):
        if j == i or cj == 0:
            continue
        np.multiply(odd, cj, out=tmp)  # samples m of j before: odd 2m+1 < (2k+1) cj / ci (<= when j < i)
        if j > i:
            tmp -= 1
        tmp //= ci
        tmp += 1
        tmp >>= 1
        np.minimum(tmp, cj, out=tmp)
        pos += tmp
    return pos


def positions(counts: np.ndarray, source: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Mixed positions of sample ``k`` of ``source`` (vectorised over both)."""
    counts = np.asarray(counts, np.int64)
    source, k = np.broadcast_arrays(np.asarray(source, np.int64), np.asarray(k, np.int64))
    pos = np.empty(k.shape, np.int64)
    for i in np.unique(source).tolist():
        mine = source == i
        pos[mine] = _positions_of(counts, i, k[mine])
    return pos


def prefix(counts: np.ndarray, a: int) -> np.ndarray:
    """Samples of each source at mixed positions ``< a`` (one binary search for all sources)."""
    counts = np.asarray(counts, np.int64)
    lo, hi = np.zeros(len(counts), np.int64), counts.copy()
    src = np.arange(len(counts), dtype=np.int64)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        below = (positions(counts, src, np.minimum(mid, np.maximum(counts - 1, 0))) < a) & (mid < counts)
        lo = np.where((lo < hi) & below, mid + 1, lo)
        hi = np.where((lo < hi) & ~below, mid, hi)
    return lo


def window(counts: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """``(source, k)`` of mixed positions ``[a, b)``: sample ``k`` of each one's source."""
    counts = np.asarray(counts, np.int64)
    if int(counts.sum()) >= _MAX_EPOCH:
        raise ValueError(
            f"an epoch of {int(counts.sum())} samples is too large to interleave (at most {_MAX_EPOCH - 1})"
        )
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
