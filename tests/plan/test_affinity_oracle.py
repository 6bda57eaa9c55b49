"""Node affinity against deliberately simple references, over generated topologies, shard sizes and resumes.

The references (lists and loops):

* the assignment: one node holds every shard; node ``k`` is added by taking, from each node before it in
  turn, the shards last in the seeded stable order while the giver stays nearest to ``total / (k + 1)``;
* what a rank reads: ``ranks`` equal contiguous ranges of the epoch's stream, batch ``i`` from worker
  ``i % W`` (the planner's split, which node affinity does not change); node ``n`` holds ranks
  ``n * L .. n * L + L - 1``.

Checked: every sample exactly once per epoch (plus the padding the split reports), equal batches on every
rank, every sample a rank reads from its node's pieces (padding aside: it repeats the stream's first
samples), a resume on the same topology equals the uninterrupted epoch, a chain of node counts in one epoch
delivers every sample once, and adding or removing a node moves only the shards the new (or removed) node holds.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.plan import Mixture, PlanConfig, Segment, Source, epoch_stream, rank_split, worker_plan
from shardkit.plan.affinity import assign_shards, node_layout, node_targets, stable_rank
from shardkit.plan.world import World, detect_nodes

SETTINGS = dict(deadline=None, phases=[Phase.explicit, Phase.generate], suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- references


def ref_assign(sizes: list[int], nodes: int, seed: int) -> list[int]:
    """The assignment, one shard at a time."""
    rank = stable_rank(len(sizes), seed).tolist()
    node = [0] * len(sizes)
    total = sum(sizes)
    for k in range(1, nodes):
        taken = []
        for j in range(k):
            mine = sorted((s for s in range(len(sizes)) if node[s] == j), key=lambda s: -rank[s])
            load = sum(sizes[s] for s in mine)
            given = 0
            for s in mine:  # nearest to the share: give while given + size / 2 <= load - total / (k + 1)
                if 2 * (k + 1) * given + (k + 1) * sizes[s] <= 2 * ((k + 1) * load - total):
                    taken.append(s)
                    given += sizes[s]
                else:
                    break
        for s in taken:
            node[s] = k
    return node


def rank_batches(stream, cfg: PlanConfig, world: World, batches_done: int = 0, generation: int = 0, epoch: int = 0):
    """Rank ``world.rank``'s batches as a DataLoader collects them (batch ``i`` from worker ``i % W``)."""
    W = world.num_workers
    per_worker = []
    for w in range(W):
        ids = worker_plan(
            stream,
            cfg,
            World(world.rank, world.world_size, w, W, world.nodes),
            epoch=epoch,
            batches_done=batches_done,
            generation=generation,
        ).emission_order()
        per_worker.append([ids[i : i + cfg.batch_size].tolist() for i in range(0, len(ids), cfg.batch_size)])
    out = []
    for i in range(sum(len(p) for p in per_worker)):
        if i // W >= len(per_worker[i % W]):
            break
        out.append(per_worker[i % W][i // W])
    return out


def node_samples(m: Mixture, cfg: PlanConfig, world_size: int, nodes: int) -> list[set[int]]:
    """Mixture sample ids of each node's pieces (what its ranks may read)."""
    per_node = rank_split(int(m.sizes.sum()), world_size, cfg).per_rank * (world_size // nodes)
    targets = node_targets(m.sizes, nodes, per_node)
    out: list[set[int]] = [set() for _ in range(nodes)]
    for i, key in enumerate(m.seed_keys):
        lay = node_layout(m.shard_sizes[i], targets[i], cfg.seed + i * 0x9E3779B9 if key == i else key)
        for n, (shard, lo, hi) in enumerate(lay.pieces):
            for s, a, b in zip(shard.tolist(), lo.tolist(), hi.tolist()):
                base = int(m.shard_offsets[m.shard_base[i] + s])
                out[n].update(range(base + a, base + b))
    return out


# --------------------------------------------------------------------------- strategies


@st.composite
def topologies(draw):
    nodes = draw(st.integers(1, 4))
    return nodes, nodes * draw(st.integers(1, 3)), draw(st.integers(1, 3))  # nodes, ranks, workers per rank


@st.composite
def configs(draw) -> PlanConfig:
    buf = draw(st.integers(1, 7))
    return PlanConfig(
        batch_size=draw(st.integers(1, 4)),
        seed=draw(st.integers(0, 3)),
        shuffle=draw(st.booleans()),
        shuffle_buffer=buf,
        drop_last=draw(st.booleans()),
        policy=draw(st.sampled_from(["pad", "drop"])),
        node_affinity=True,
    )


sizes_st = st.lists(st.integers(0, 12), min_size=1, max_size=12)


# --------------------------------------------------------------------------- the assignment


@settings(max_examples=150, **SETTINGS)
@given(sizes=sizes_st, nodes=st.integers(1, 6), seed=st.integers(0, 5))
@example(sizes=[5, 9, 2, 7, 8, 1, 6, 4], nodes=3, seed=1)
def test_assignment_matches_the_reference_and_moves_only_the_new_nodes_shards(sizes, nodes, seed):
    got = assign_shards(sizes, nodes, seed).tolist()
    assert got == ref_assign(sizes, nodes, seed)
    more = assign_shards(sizes, nodes + 1, seed).tolist()
    moved = [s for s in range(len(sizes)) if got[s] != more[s]]
    assert all(more[s] == nodes for s in moved), "a shard moved between nodes that both stay"
    assert moved == [s for s in range(len(sizes)) if more[s] == nodes]  # the fewest: exactly the new node's
    loads = Counter()
    for s, n in enumerate(more):
        loads[n] += sizes[s]
    assert sum(loads.values()) == sum(sizes)


def test_assignment_balances_a_large_dataset():
    """Within a few shards of equal, and the reference count of moved shards for 8 -> 9 nodes."""
    sizes = np.random.default_rng(0).integers(900, 1100, 800)
    for nodes in (2, 8, 9):
        load = np.bincount(assign_shards(sizes, nodes, 3), weights=sizes, minlength=nodes)
        assert load.max() - load.min() <= 12 * 1100, (nodes, load)
    a, b = assign_shards(sizes, 8, 3), assign_shards(sizes, 9, 3)
    assert int((a != b).sum()) == int((b == 8).sum())


# --------------------------------------------------------------------------- the epoch


def check_epoch(m: Mixture, cfg: PlanConfig, nodes: int, R: int, W: int, epoch: int, locality: bool) -> None:
    stream = epoch_stream(m, cfg, epoch, world_size=R, nodes=nodes)
    split = rank_split(len(stream), R, cfg)
    got = [rank_batches(stream, cfg, World(r, R, 0, W, nodes), epoch=epoch) for r in range(R)]
    assert len({len(g) for g in got}) == 1, "ranks yield different numbers of batches"
    delivered = Counter(g for rank in got for b in rank for g in b)
    want = Counter(stream.window(0, len(stream))[1].tolist())
    assert sum((want - delivered).values()) == split.dropped
    assert sum((delivered - want).values()) == split.padded
    if locality:
        mine = node_samples(m, cfg, R, nodes)
        pad = set(stream.window(0, min(len(stream), split.padded))[1].tolist())
        for r in range(R):
            off = {g for b in got[r] for g in b} - mine[r // (R // nodes)] - pad
            assert not off, f"rank {r} reads samples {sorted(off)} of another node's share"
    for r in range(R):  # resumed on the same topology after every batch: the rest of the epoch
        for k in range(len(got[r]) + 1):
            assert rank_batches(stream, cfg, World(r, R, 0, W, nodes), k, epoch=epoch) == got[r][k:], (r, k)


@settings(max_examples=120, **SETTINGS)
@given(sizes=sizes_st, cfg=configs(), topo=topologies(), epoch=st.integers(0, 2))
@example(sizes=[5, 9, 2, 7, 8, 1, 6], cfg=PlanConfig(batch_size=2, seed=1, node_affinity=True), topo=(2, 4, 2), epoch=1)
def test_one_dataset_exactly_once_equal_batches_from_its_node(sizes, cfg, topo, epoch):
    nodes, R, W = topo
    check_epoch(Mixture((Source("a"),), (sizes,)), cfg, nodes, R, W, epoch, locality=True)


@settings(max_examples=60, **SETTINGS)
@given(
    sizes=st.lists(st.lists(st.integers(1, 8), min_size=1, max_size=5), min_size=2, max_size=3),
    kind=st.sampled_from(["repeat", "weight", "choose"]),
    cfg=configs(),
    topo=topologies(),
    epoch=st.integers(0, 2),
)
@example(
    sizes=[[4, 6, 3], [5, 2, 7, 1]],
    kind="repeat",
    cfg=PlanConfig(batch_size=2, node_affinity=True),
    topo=(2, 2, 1),
    epoch=0,
)
def test_mixture_exactly_once_equal_batches(sizes, kind, cfg, topo, epoch):
    """Per source shares; repeat=1 sources read only their node's pieces (the padding aside)."""
    if kind == "repeat":
        m = Mixture(tuple(Source(f"s{i}", repeat=1) for i in range(len(sizes))), tuple(sizes))
    elif kind == "weight":
        m = Mixture(tuple(Source(f"s{i}", weight=i + 1) for i in range(len(sizes))), tuple(sizes))
    else:
        m = Mixture(tuple(Source(f"s{i}", choose=3 + i) for i in range(len(sizes))), tuple(sizes))
    nodes, R, W = topo
    check_epoch(m, cfg, nodes, R, W, epoch, locality=kind == "repeat")


chains = st.lists(
    st.tuples(st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(0, 50)), min_size=2, max_size=3
)


@settings(max_examples=80, **SETTINGS)
@given(sizes=sizes_st, cfg=configs(), chain=chains, epoch=st.integers(0, 1))
@example(
    sizes=[5, 9, 2, 7, 8, 1, 6],
    cfg=PlanConfig(batch_size=1, seed=2, node_affinity=True),
    chain=[(2, 2, 1, 3), (3, 1, 2, 2)],
    epoch=0,
)
def test_node_count_changes_mid_epoch_deliver_every_sample_once(sizes, cfg, chain, epoch):
    """(nodes, ranks per node, workers, checkpoint step) per segment, the last to the end of the epoch."""
    m = Mixture((Source("a"),), (sizes,))
    full = epoch_stream(m, cfg, epoch, world_size=chain[0][0] * chain[0][1], nodes=chain[0][0])
    want = Counter(full.window(0, len(full))[1].tolist())
    history: list[Segment] = []
    delivered: Counter = Counter()
    pads, drops = [], []
    for s, (nodes, L, W, step) in enumerate(chain):
        R = nodes * L
        stream = epoch_stream(m, cfg, epoch, history, world_size=R, nodes=nodes)
        got = [
            rank_batches(stream, cfg, World(r, R, 0, W, nodes), generation=len(history), epoch=epoch) for r in range(R)
        ]
        T = len(got[0])
        assert all(len(g) == T for g in got)
        k = T if s == len(chain) - 1 else step % (T + 1)
        delivered += Counter(g for rank in got for b in rank[:k] for g in b)
        if k or s == len(chain) - 1:
            split = rank_split(len(stream), R, cfg)
            pads.append(split.padded)
            drops.append(split.dropped)
        if k:
            history.append(Segment(R, W, k, nodes))
    extra, missing = sum((delivered - want).values()), sum((want - delivered).values())
    if sum(drops) == 0:
        assert missing == 0 and extra <= sum(pads)
    else:
        assert extra == 0 and missing == sum(drops)


# --------------------------------------------------------------------------- topology


def test_node_count_from_torchrun_environment():
    assert detect_nodes(8, 5, {"LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1"}) == 2
    assert detect_nodes(8, 5, {"LOCAL_WORLD_SIZE": "4", "NODE_RANK": "1"}) == 2
    assert detect_nodes(8, 5, {"LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0"}) == 1  # another world: not trusted
    assert detect_nodes(8, 5, {}) == 1
    assert World(5, 8, nodes=2).node == 1
    with pytest.raises(ValueError, match="divide"):
        World(0, 6, nodes=4)
