"""Shuffle quality of node affinity against a global shuffle: the class mix of global batches.

A global batch is batch ``i`` of every rank together (what one optimizer step sees). For each, the
chi-square statistic of its class counts against the dataset's class mix, divided by its degrees of
freedom (about 1 for an ideal random draw), and its class entropy in bits; the mean over an epoch's
batches is printed for a dataset whose shards are class-sorted and for one shuffled at conversion,
with a global shuffle and with node affinity, for several shard counts per node.

Usage: ``python tools/affinity_shuffle.py [--nodes 8] [--ranks 2] [--batch 32] [--classes 100]``
"""

from __future__ import annotations

import argparse

import numpy as np

from shardkit.plan import Mixture, PlanConfig, Source, epoch_stream, worker_plan
from shardkit.plan.world import World


def class_mix(labels: np.ndarray, batches: list[np.ndarray], classes: int) -> tuple[float, float]:
    """Mean chi-square / dof and mean entropy (bits) of ``batches`` (sample ids) against the labels' mix."""
    p = np.bincount(labels, minlength=classes) / len(labels)
    chi, ent = [], []
    for b in batches:
        c = np.bincount(labels[b], minlength=classes)
        e = p * len(b)
        chi.append(float(((c - e) ** 2 / np.where(e > 0, e, 1)).sum()) / (classes - 1))
        q = c[c > 0] / len(b)
        ent.append(float(-(q * np.log2(q)).sum()))
    return float(np.mean(chi)), float(np.mean(ent))


def global_batches(sizes: list[int], cfg: PlanConfig, nodes: int, ranks: int, epoch: int) -> list[np.ndarray]:
    """Batch ``i`` of every rank together, for every ``i`` (one worker per rank)."""
    m = Mixture((Source("d"),), (sizes,))
    stream = epoch_stream(m, cfg, epoch, world_size=ranks, nodes=nodes)
    per_rank = [
        worker_plan(stream, cfg, World(r, ranks, 0, 1, nodes), epoch=epoch).emission_order() for r in range(ranks)
    ]
    b = cfg.batch_size
    return [np.concatenate([ids[i : i + b] for ids in per_rank]) for i in range(0, len(per_rank[0]), b)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=2, help="ranks per node")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--samples-per-shard", type=int, default=200)
    ap.add_argument("--buffer", type=int, default=1024)
    a = ap.parse_args()
    R = a.nodes * a.ranks
    print(
        "| shards per node | dataset | global shuffle chi2/dof | affinity chi2/dof | global entropy | affinity entropy |"
    )
    print("|---|---|---|---|---|---|")
    for per_node in (1, 2, 4, 8, 16, 32):
        shards = per_node * a.nodes
        n = shards * a.samples_per_shard
        sorted_labels = (np.arange(n) * a.classes // n).astype(np.int64)
        shuffled = np.random.default_rng(0).permutation(sorted_labels)
        for name, labels in (("class-sorted", sorted_labels), ("shuffled", shuffled)):
            row = []
            for aff in (False, True):
                cfg = PlanConfig(batch_size=a.batch, seed=1, shuffle_buffer=a.buffer, node_affinity=aff)
                row.append(
                    class_mix(labels, global_batches([a.samples_per_shard] * shards, cfg, a.nodes, R, 1), a.classes)
                )
            print(f"| {per_node} | {name} | {row[0][0]:.2f} | {row[1][0]:.2f} | {row[0][1]:.2f} | {row[1][1]:.2f} |")


if __name__ == "__main__":
    main()
