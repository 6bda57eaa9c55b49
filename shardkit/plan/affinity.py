"""Node affinity: each node reads the same share of the shards every epoch, shuffled within the share.

Pure functions of (shard sizes, nodes, ranks, seed); the planner (:mod:`shardkit.plan.epoch`) only sees
another pass order, so exactness, equal batches, resume and elastic resume are the planner's own.

1. **Assignment** (:func:`assign_shards`): whole shards to nodes, once, balanced by samples (equal batches
   need equal samples; bytes follow where bytes per sample are even). It is built node by node: one node
   holds everything, and each added node takes, from every node before it, the shards last in that node's
   seeded stable order until the giver is nearest to its new equal share. So going from ``N`` to ``N + 1``
   nodes moves only the shards the new node takes (the fewest a balanced assignment can move), and from
   ``N + 1`` to ``N`` only the last node's shards.
2. **Shares** (:func:`node_layout`): the ranks of node ``n`` read stream positions
   ``[n * L * per, (n + 1) * L * per)`` (``L`` ranks per node, ``per`` samples per rank); each node's share
   is cut to exactly that many samples of each source: a node over its target lends the tail of its stable
   order (possibly part of one shard) to nodes under it, in node order. The lent pieces are the same every
   epoch, so the borrower caches them too.
3. **Passes** (:meth:`NodeLayout.pass_order`): a source's pass is the nodes' shares in node order, each
   share's pieces in a seeded per-(pass, node) permutation; the shuffle blocks then shuffle samples.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from shardkit.plan.stream import Sizes, Stream, seeded_rng, shard_offsets

_ORDER_KEY = 0xAFF0  #: seeds the stable order of a source's shards
_PASS_KEY = 0xAFF1  #: seeds a node's permutation of its pieces in one pass

#: fewer shards per node than this: the loader warns (each epoch shuffles a node's share among too few shards;
#: docs/design/node-affinity.md measures the batches' class mix against a global shuffle)
MIN_SHARDS_PER_NODE = 8

#: runs ``(shard, lo, hi)``: samples ``[lo, hi)`` of each ``shard``
Runs = tuple[np.ndarray, np.ndarray, np.ndarray]


def stable_rank(num_shards: int, seed: int) -> np.ndarray:
    """Each shard's place in the source's seeded stable order (the same for every node count and epoch)."""
    rank = np.empty(num_shards, np.int64)
    rank[seeded_rng(seed, _ORDER_KEY).permutation(num_shards)] = np.arange(num_shards, dtype=np.int64)
    return rank


def assign_shards(shard_sizes: Sizes, nodes: int, seed: int) -> np.ndarray:
    """The node of each shard: balanced by samples, and ``nodes + 1`` moves only what the new node takes.

    Args:
        shard_sizes: samples per shard (manifest order).
        nodes: number of nodes (>= 1).
        seed: seeds the stable order the nodes give shards away in.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    sizes = np.asarray(shard_sizes, np.int64)
    node = np.zeros(len(sizes), np.int64)
    if nodes == 1 or len(sizes) == 0:
        return node
    rank = stable_rank(len(sizes), seed)
    total = int(sizes.sum())
    order = np.argsort(-rank, kind="stable")  # by (node, rank descending): the shards each node gives first
    for k in range(1, nodes):
        on = node[order]
        sz = sizes[order]
        load = np.bincount(node, weights=sizes, minlength=k).astype(np.int64)
        base = np.concatenate([[0], np.cumsum(load)[:-1]])
        before = np.cumsum(sz) - sz - base[on]  # samples given ahead of this shard by its node
        # give while the giver stays nearest to its share total / (k + 1): before + sz / 2 <= load - share
        # (before + size / 2 only grows along a group, so each node gives a prefix of its group)
        give = 2 * (k + 1) * before + (k + 1) * sz <= 2 * ((k + 1) * load[on] - total)
        taken = order[give]
        node[taken] = k
        order = np.concatenate([order[~give], taken[np.argsort(-rank[taken], kind="stable")]])
    return node


def _cut(runs: Runs, cuts: np.ndarray) -> list[Runs]:
    """``runs`` cut at the cumulative sample counts ``cuts`` (ascending, within the total): ``len(cuts) + 1`` run lists."""
    shard, lo, hi = runs
    out: list[Runs] = []
    ends = np.cumsum(hi - lo)
    begins = ends - (hi - lo)
    bounds = np.concatenate([[0], cuts, [int(ends[-1]) if len(ends) else 0]])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        keep = (ends > a) & (begins < b)
        out.append(
            (
                shard[keep],
                lo[keep] + np.maximum(0, a - begins[keep]),
                hi[keep] - np.maximum(0, ends[keep] - b),
            )
        )
    return out


@dataclass(frozen=True, eq=False)
class NodeLayout:
    """Each node's pieces of one source, fixed for every pass: ``pieces[n]`` is ``(shard, lo, hi)`` runs.

    Attributes:
        pieces: per node, its runs in stable order (whole shards, and at most a lent or borrowed part of some).
        offsets: the source's shard offsets (first sample id of each shard).
    """

    pieces: tuple[Runs, ...]
    offsets: np.ndarray

    def share(self, node: int) -> int:
        """Samples of node ``node``'s share."""
        _, lo, hi = self.pieces[node]
        return int((hi - lo).sum())

    def pass_order(self, seed: int, p: int, shuffle: bool = True) -> Stream:
        """Pass ``p`` of the source: the shares in node order, each one's pieces permuted from (seed, pass, node)."""
        parts = []
        for n, (shard, lo, hi) in enumerate(self.pieces):
            perm = seeded_rng(seed, p, n, _PASS_KEY).permutation(len(shard)) if shuffle else np.arange(len(shard))
            parts.append((shard[perm], lo[perm], hi[perm]))
        return Stream(_cat(parts, 0), _cat(parts, 1), _cat(parts, 2), self.offsets)


def node_targets(counts: np.ndarray, nodes: int, per_node: int) -> np.ndarray:
    """Samples of each source (rows) each node (columns) reads: node ``n`` reads mixed stream positions
    ``[n * per_node, (n + 1) * per_node)``, the last node up to the end (:func:`shardkit.plan.interleave.prefix`)."""
    from shardkit.plan.interleave import prefix

    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    bounds = [min(total, n * per_node) for n in range(nodes)] + [total]
    pre = np.stack([prefix(counts, b) for b in bounds], axis=1)
    return np.diff(pre, axis=1)


def node_layout(shard_sizes: Sizes, targets: np.ndarray, seed: int) -> NodeLayout:
    """Each node's pieces of a source: its assigned shards in stable order cut to ``targets[n]`` samples, the
    surplus lent, in node order, to the nodes under their targets (``targets`` sums to the source's samples)."""
    return _layout(np.asarray(shard_sizes, np.int64).tobytes(), tuple(int(t) for t in targets), int(seed))


@functools.lru_cache(maxsize=32)
def _layout(sizes_bytes: bytes, targets: tuple[int, ...], seed: int) -> NodeLayout:
    """:func:`node_layout`, once per (sizes, targets, seed): every worker and ``len()`` plan with it."""
    sizes = np.frombuffer(sizes_bytes, np.int64)
    if sum(targets) != int(sizes.sum()):
        raise ValueError(f"node targets sum to {sum(targets)}, the source has {int(sizes.sum())} samples")
    nodes = len(targets)
    node = assign_shards(sizes, nodes, seed)
    rank = stable_rank(len(sizes), seed)
    kept, lent = [], []
    for n in range(nodes):
        ids = np.flatnonzero((node == n) & (sizes > 0))
        ids = ids[np.argsort(rank[ids], kind="stable")]
        runs = (ids.astype(np.int64), np.zeros(len(ids), np.int64), sizes[ids])
        have = int(sizes[ids].sum())
        mine, extra = _cut(runs, np.array([min(have, targets[n])], np.int64))
        kept.append(mine)
        lent.append(extra)
    pool: Runs = (_cat(lent, 0), _cat(lent, 1), _cat(lent, 2))
    need = np.array([max(0, t - int((k[2] - k[1]).sum())) for t, k in zip(targets, kept)], np.int64)
    borrowed = _cut(pool, np.cumsum(need)[:-1])
    pieces = tuple((_cat([k, b], 0), _cat([k, b], 1), _cat([k, b], 2)) for k, b in zip(kept, borrowed))
    return NodeLayout(pieces, shard_offsets(sizes))


def _cat(runs: list[Runs], i: int) -> np.ndarray:
    """Field ``i`` of several run lists, concatenated."""
    return np.concatenate([r[i] for r in runs]).astype(np.int64)
