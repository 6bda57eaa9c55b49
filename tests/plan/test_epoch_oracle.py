"""Planning oracle: a brute-force reference of what every rank consumes, over generated topologies.

The reference below is deliberately simple (lists and loops, no library helper): it reads the
README's promise ("Multi-node data-parallel training") literally --

* the epoch's stream is cut into ``R`` equal contiguous rank ranges; ``pad`` gives each rank
  ``ceil(n / R)`` stream positions, the positions past the end wrapping to the stream's start
  (the padding), ``drop`` (and ``drop_last``) gives ``floor(n / R)``; ``drop_last`` then cuts
  each rank to whole batches;
* batch ``i`` of a rank is made by worker ``i % W``, each worker reading one contiguous chunk of
  its rank's range (its batches in order); only the rank's last batch may be short;
* shuffling only permutes samples inside one worker's chunk;
* a checkpoint after ``k`` batches resumed on the same topology gives exactly batches ``k..``;
* an elastic resume continues with the samples the split assigned, in stream order, minus every
  sample some rank already delivered (a sample seen through padding counts as seen).

and checks the planner (:mod:`shardkit.plan.epoch`: for one dataset given as a plain stream, for
mixtures and for the one-source mixture the loader uses) against it, for every checkpoint step
and for chains of up to three topologies in one epoch (3 -> 2 -> 3 ranks and the like),
including checkpoints after padding was emitted. Over the whole epoch: every sample is delivered
exactly once, plus at most the padding each segment's split reports (``loader.epoch_info``), and
at least the last segment's (it runs to the end, so its padding is emitted); with ``drop``
exactly the reported drops are missing and nothing repeats.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit import plan as mix
from shardkit.plan import Mixture, PlanConfig, Segment, Source, Stream
from shardkit.plan import epoch as P
from shardkit.plan.world import World

# --------------------------------------------------------------------------- the reference


def ref_split(n: int, R: int, B: int, policy: str, drop_last: bool) -> tuple[int, int, int, int]:
    """``(per_rank, used, padded, dropped)`` for a stream of ``n`` over ``R`` ranks, batches of ``B``."""
    per = -(-n // R) if policy == "pad" and not drop_last else n // R
    used = per - per % B if drop_last else per
    padded = max(0, per * R - n)
    return per, used, padded, n + padded - used * R


def ref_rank_positions(n: int, R: int, W: int, B: int, policy: str, drop_last: bool) -> list[list[list[int]]]:
    """Per rank, per batch, the stream positions it reads (past ``n``: padding, the position ``p % n`` again)."""
    per, used, _, _ = ref_split(n, R, B, policy, drop_last)
    out = []
    for r in range(R):
        mine = [r * per + i for i in range(used)]
        T = -(-used // B)
        sizes = [min(B, used - i * B) for i in range(T)]
        batches: list[list[int]] = [[] for _ in range(T)]
        at = 0
        for w in range(W):  # worker w reads its chunk front to back: its batches w, w + W, ...
            for i in range(w, T, W):
                batches[i] = mine[at : at + sizes[i]]
                at += sizes[i]
        assert at == used
        out.append(batches)
    return out


def ref_rank_batches(items: list, R: int, W: int, B: int, policy: str, drop_last: bool) -> list[list[list]]:
    """Per rank, per batch, the stream items it holds (exact when unshuffled)."""
    n = len(items)
    return [[[items[v % n] for v in b] for b in rank] for rank in ref_rank_positions(n, R, W, B, policy, drop_last)]


def ref_remaining(items: list, seen: set, R: int, B: int, policy: str, drop_last: bool) -> list:
    """The next segment's stream: the stream positions the split assigned (each once), in stream order,
    minus the positions some rank delivered (``seen``: real positions, padding ``v`` counts as ``v % n``)."""
    n = len(items)
    per, used, _, _ = ref_split(n, R, B, policy, drop_last)
    assigned = sorted({(r * per + i) % n for r in range(R) for i in range(used)})
    return [items[p] for p in assigned if p not in seen]


def seen_positions(
    items: list, got: list[list[list[int]]], refpos: list[list[list[int]]], k: int, shuffle: bool
) -> set | None:
    """Real stream positions delivered in the first ``k`` batches of every rank; None when that is not
    knowable from the delivered ids (shuffled, and an id at two positions of the stream)."""
    n = len(items)
    if not shuffle:
        return {v % n for rank in refpos for b in rank[:k] for v in b}
    where: dict = {}
    for p, g in enumerate(items):
        if g in where:
            return None
        where[g] = p
    return {where[g] for rank in got for b in rank[:k] for g in b}


# --------------------------------------------------------------------------- the planners under test


class Single:
    """One dataset as a plain :class:`~shardkit.plan.stream.Stream` (every shard once, in a seeded order), planned by
    :mod:`shardkit.plan.epoch`."""

    def __init__(self, sizes: list[int]):
        self.sizes = sizes

    def stream(self, cfg: PlanConfig, epoch: int, history: list[Segment]):
        return P.replanned(
            Stream.full_epoch(self.sizes, seed=cfg.seed, epoch=epoch, shuffle=cfg.shuffle), cfg, epoch, history
        )

    @staticmethod
    def items(stream) -> list[int]:
        return [int(g) for g in stream.window(0, len(stream))[1]]

    @staticmethod
    def worker_plan(stream, cfg, world, **kw):
        return P.worker_plan(stream, cfg, world, **kw)


class Mixed:
    """A mixture (or one source, as the loader plans a plain URL), planned by :mod:`shardkit.plan.epoch`."""

    def __init__(self, mixture: Mixture):
        self.mixture = mixture

    def stream(self, cfg: PlanConfig, epoch: int, history: list[Segment]):
        return mix.epoch_stream(self.mixture, cfg, epoch, history)

    @staticmethod
    def items(stream) -> list[int]:
        return [int(g) for g in stream.window(0, len(stream))[1]]

    @staticmethod
    def worker_plan(stream, cfg, world, **kw):
        return mix.worker_plan(stream, cfg, world, **kw)


def lib_rank_batches(
    planner, stream, cfg: PlanConfig, R: int, W: int, r: int, *, epoch: int, batches_done: int = 0, generation: int = 0
) -> list[list[int]]:
    """Rank ``r``'s batches as a DataLoader collects them (batch ``i`` from worker ``i % W``)."""
    per_worker = []
    for w in range(W):
        ids = planner.worker_plan(
            stream, cfg, World(r, R, w, W), epoch=epoch, batches_done=batches_done, generation=generation
        ).emission_order()
        ids = [int(g) for g in ids]
        per_worker.append([ids[i : i + cfg.batch_size] for i in range(0, len(ids), cfg.batch_size)])
    out = []
    for i in range(sum(len(p) for p in per_worker)):  # bounded: every batch of every worker once
        w, j = i % W, i // W
        if j >= len(per_worker[w]):
            break
        out.append(per_worker[w][j])
    assert len(out) == sum(len(p) for p in per_worker), "a worker has batches after another ran dry"
    return out


def check_segment(
    planner, cfg: PlanConfig, items: list, stream, R: int, W: int, *, epoch: int, generation: int, resume_steps: bool
) -> list[list[list[int]]]:
    """One topology's stretch of the epoch against the reference; returns every rank's batches."""
    policy, B = cfg.policy.value, cfg.batch_size
    per, used, padded, dropped = ref_split(len(items), R, B, policy, cfg.drop_last)
    split = P.rank_split(len(stream), R, cfg)
    assert (split.per_rank, split.used, split.padded, split.dropped) == (per, used, padded, dropped)
    ref = ref_rank_batches(items, R, W, B, policy, cfg.drop_last)
    got = [lib_rank_batches(planner, stream, cfg, R, W, r, epoch=epoch, generation=generation) for r in range(R)]
    for r in range(R):
        assert [len(b) for b in got[r]] == [len(b) for b in ref[r]], f"rank {r}: batch sizes"
        if not cfg.shuffle:
            assert got[r] == ref[r], f"rank {r}: unshuffled batches differ from the reference"
        for w in range(W):  # shuffling permutes a worker's chunk, nothing else
            mine = Counter(g for b in got[r][w::W] for g in b)
            assert mine == Counter(g for b in ref[r][w::W] for g in b), f"rank {r} worker {w}: not its chunk"
    if resume_steps:  # every checkpoint step, resumed on the same topology, continues exactly
        for r in range(R):
            for k in range(len(got[r]) + 1):
                rest = lib_rank_batches(
                    planner, stream, cfg, R, W, r, epoch=epoch, batches_done=k, generation=generation
                )
                assert rest == got[r][k:], f"rank {r}: resumed after {k} batches"
    return got


def run_chain(
    planner, cfg: PlanConfig, epoch: int, chain: list[tuple[int, int, float]], *, resume_steps: bool = True
) -> None:
    """Run an epoch through ``chain``: ``(ranks, workers, checkpoint)`` (see ``topology`` below) per segment;
    the last segment runs to the end. Checks every segment and the epoch as a whole."""
    history: list[Segment] = []
    full = planner.items(planner.stream(cfg, epoch, []))
    delivered: Counter = Counter()
    paddings, drops = [], []
    for s, (R, W, frac) in enumerate(chain):
        W = max(1, W)  # num_workers=0: the main process is the one reader
        stream = planner.stream(cfg, epoch, history)
        items = planner.items(stream)
        got = check_segment(
            planner, cfg, items, stream, R, W, epoch=epoch, generation=len(history), resume_steps=resume_steps
        )
        T = len(got[0])
        assert all(len(g) == T for g in got), "ranks yield different numbers of batches (DDP would hang)"
        last = s == len(chain) - 1
        k = T if last else frac % (T + 1) if isinstance(frac, int) else min(T, int(round(frac * T)))
        delivered += Counter(g for r in range(R) for b in got[r][:k] for g in b)
        seen = seen_positions(
            items,
            got,
            ref_rank_positions(len(items), R, W, cfg.batch_size, cfg.policy.value, cfg.drop_last),
            k,
            cfg.shuffle,
        )
        if k or last:  # a checkpoint after 0 batches leaves no trace: the next topology plans the same stream
            split = P.rank_split(len(items), R, cfg)
            paddings.append(split.padded)
            drops.append(split.dropped)
        if not last:
            nxt_history = history + [Segment(R, W, k)] if k else history
            nxt = planner.items(planner.stream(cfg, epoch, nxt_history))
            if k and seen is not None:
                assert nxt == ref_remaining(items, seen, R, cfg.batch_size, cfg.policy.value, cfg.drop_last), (
                    f"segment {s}: the re-planned rest of the epoch is not the unseen samples"
                )
            history = nxt_history
    want = Counter(full)
    extra = sum((delivered - want).values())
    missing = sum((want - delivered).values())
    if sum(drops) == 0:  # pad: every sample at least once, repeats only through reported padding
        assert missing == 0, f"{missing} samples never delivered"
        assert paddings[-1] <= extra <= sum(paddings), f"{extra} repeats, padding reported {paddings}"
    else:
        assert sum(paddings) == 0
        assert extra == 0, f"{extra} samples delivered twice"
        assert missing == sum(drops), f"{missing} samples missing, {drops} reported dropped"


# --------------------------------------------------------------------------- strategies


#: (ranks, workers, checkpoint): the checkpoint is a float in [0, 1] (that share of the segment's batches) or an int
#: ``i`` (``i % (batches + 1)`` batches: any step, hypothesis' floats favour 0, 1 and other extremes)
topology = st.tuples(st.integers(1, 3), st.integers(0, 3), st.integers(0, 1000) | st.sampled_from([0.0, 1.0, 0.99]))


@st.composite
def configs(draw) -> PlanConfig:
    shuffle = draw(st.booleans())
    buf = draw(st.integers(1, 7))
    return PlanConfig(
        batch_size=draw(st.integers(1, 4)),
        seed=draw(st.integers(0, 3)),
        shuffle=shuffle,
        shuffle_buffer=buf,
        shuffle_initial=draw(st.none() | st.integers(0, buf)),
        drop_last=draw(st.booleans()),
        policy=draw(st.sampled_from(["pad", "drop"])),
    )


shard_sizes = st.lists(st.integers(0, 11), min_size=1, max_size=5)
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=400, **SETTINGS)
@given(sizes=shard_sizes, cfg=configs(), epoch=st.integers(0, 2), chain=st.lists(topology, min_size=1, max_size=3))
def test_single_dataset_plan_matches_the_reference(sizes, cfg, epoch, chain):
    run_chain(Single(sizes), cfg, epoch, chain)


@settings(max_examples=200, **SETTINGS)
@given(sizes=shard_sizes, cfg=configs(), epoch=st.integers(0, 2), chain=st.lists(topology, min_size=1, max_size=3))
def test_one_source_mixture_plan_matches_the_reference(sizes, cfg, epoch, chain):
    """What the loader plans for a plain URL."""
    run_chain(Mixed(Mixture((Source("a"),), (sizes,))), cfg, epoch, chain)


@st.composite
def mixtures(draw) -> Mixture:
    k = draw(st.integers(2, 3))
    sizes = [draw(st.lists(st.integers(0, 6), min_size=1, max_size=3).filter(lambda s: sum(s) > 0)) for _ in range(k)]
    kind = draw(st.sampled_from(["repeat", "weight", "choose"]))
    if kind == "repeat":
        specs = [Source(f"s{i}", repeat=draw(st.sampled_from([0.5, 1, 1.5, 2]))) for i in range(k)]
        return Mixture(tuple(specs), tuple(sizes))
    if kind == "weight":
        specs = [Source(f"s{i}", weight=draw(st.integers(1, 4))) for i in range(k)]
        return Mixture(tuple(specs), tuple(sizes), draw(st.none() | st.integers(1, 30)))
    return Mixture(tuple(Source(f"s{i}", choose=draw(st.integers(1, 12))) for i in range(k)), tuple(sizes))


@settings(max_examples=200, **SETTINGS)
@given(m=mixtures(), cfg=configs(), epoch=st.integers(0, 2), chain=st.lists(topology, min_size=1, max_size=3))
def test_mixture_plan_matches_the_reference(m, cfg, epoch, chain):
    run_chain(Mixed(m), cfg, epoch, chain, resume_steps=len(chain) == 1)


# --------------------------------------------------------------------------- named cases (also mutant targets)


@pytest.mark.parametrize("policy", ["pad", "drop"])
@pytest.mark.parametrize("planner", ["single", "mixture"])
def test_three_two_three_ranks_with_checkpoints_after_padding(policy, planner):
    """Two elastic resumes in one epoch, 3 -> 2 -> 3 ranks, each checkpoint at the segment's last batch
    (after the padding, which sits at the end of the last rank's range, was emitted)."""
    sizes = [5, 9, 2, 7, 8, 1, 6]  # 38 samples: 3 ranks pad 1 (pad) or drop 2 (drop)
    cfg = PlanConfig(batch_size=2, seed=9, shuffle_buffer=4, policy=policy)
    p = Single(sizes) if planner == "single" else Mixed(Mixture((Source("a"),), (sizes,)))
    for frac in (0.99, 0.5, 1.0):
        run_chain(p, cfg, 1, [(3, 2, frac), (2, 1, frac), (3, 3, frac)])


@pytest.mark.parametrize("planner", ["single", "mixture"])
def test_grid_every_step_resumes_exactly(planner):
    """Brute force, deterministic (the hypothesis tests explore more, this one never varies): 1x1, 2x3 and 3x2
    readers, batches of 1 and 3, pad and drop, shuffled and not; every batch against the reference and every
    checkpoint step resumed on the same topology."""
    sizes = [5, 9, 2, 7, 8, 1, 6]  # 38 samples
    p = Single(sizes) if planner == "single" else Mixed(Mixture((Source("a"),), (sizes,)))
    for (R, W), B, policy, shuffle in itertools.product(
        [(1, 1), (2, 3), (3, 2)], [1, 3], ["pad", "drop"], [False, True]
    ):
        cfg = PlanConfig(batch_size=B, seed=2, shuffle=shuffle, shuffle_buffer=5, shuffle_initial=3, policy=policy)
        run_chain(p, cfg, 1, [(R, W, 0)])


GRID = [(2, 2), (3, 3), (3, 2), (2, 1)]


@pytest.mark.parametrize("planner", ["single", "mixture"])
def test_grid_of_three_topology_chains_with_checkpoints_inside_shuffle_blocks(planner):
    """Brute force over a grid: every chain of three topologies from ``GRID`` (3 -> 2 -> 3 ranks and the like),
    each checkpoint inside a shuffle block of several readers (blocks of 3 then 5, batches of 2), so the
    re-plan must redraw exactly the permutations those readers used (their rank, worker and generation)."""
    sizes = [5, 9, 2, 7, 8, 1, 6]  # 38 samples
    cfg = PlanConfig(batch_size=2, seed=5, shuffle_buffer=5, shuffle_initial=3)
    p = Single(sizes) if planner == "single" else Mixed(Mixture((Source("a"),), (sizes,)))
    for (r0, w0), (r1, w1), (r2, w2) in itertools.product(GRID, repeat=3):
        run_chain(p, cfg, 0, [(r0, w0, 3), (r1, w1, 2), (r2, w2, 0)], resume_steps=False)


@pytest.mark.parametrize("case", ["padding in a partly emitted block", "padding in a whole emitted block"])
@pytest.mark.parametrize("planner", ["single", "mixture"])
def test_padding_emitted_before_its_original_counts_as_seen(planner, case):
    """Rank 2 emits its padding (the stream's first samples again) before rank 0 reached those samples: the
    re-plan must count them as seen and not deliver them a third time. Every seed and checkpoint of two small
    cases, and at least one such checkpoint is met in each: 10 samples on 3 ranks x 1 worker, one shuffle block
    per reader (the padding sits in the block being emitted); 7 samples on 3 ranks x 2 workers, batches of 1,
    blocks of 2 (rank 2's worker 1 holds one padded sample, emitted as a whole block while rank 0's worker 0
    may still hold the other original in its first block)."""
    sizes, W, buf = ([4, 6], 1, 8) if case.startswith("padding in a partly") else ([3, 4], 2, 2)
    met = 0
    for seed in range(12):
        cfg = PlanConfig(batch_size=1, seed=seed, shuffle_buffer=buf, shuffle_initial=0)
        p = Single(sizes) if planner == "single" else Mixed(Mixture((Source("a"),), (sizes,)))
        stream = p.stream(cfg, 0, [])
        items = p.items(stream)
        assert P.rank_split(len(items), 3, cfg).padded == 2
        ranks = [lib_rank_batches(p, stream, cfg, 3, W, r, epoch=0) for r in range(3)]
        for k in range(1, len(ranks[0])):
            early = {g for b in ranks[2][:k] for g in b} & set(items[:2])
            met += bool(early - {g for b in ranks[0][:k] for g in b})
            run_chain(p, cfg, 0, [(3, W, k), (2, 1, 0), (3, 1, 0)], resume_steps=False)
    assert met > 0


@pytest.mark.parametrize("shuffle", [False, True])
def test_three_two_three_ranks_mixture_with_repeats(shuffle):
    m = Mixture((Source("a", repeat=2), Source("b", repeat=0.5)), ([3, 4], [6, 5, 2]))
    cfg = PlanConfig(batch_size=3, seed=2, shuffle=shuffle, shuffle_buffer=5, shuffle_initial=2)
    for frac in (0.99, 0.34, 1.0):
        run_chain(Mixed(m), cfg, 0, [(3, 2, frac), (2, 0, frac), (3, 1, frac)], resume_steps=False)


def test_reference_is_not_vacuous():
    """The reference itself, by hand: 10 samples on 3 ranks pad 2 (samples 0 and 1 again, at the end of rank 2)."""
    ref = ref_rank_batches(list(range(10)), 3, 2, 2, "pad", False)
    assert ref == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [0, 1]]]
    ref = ref_rank_batches(
        list(range(10)), 1, 2, 3, "pad", False
    )  # worker 0: batches 0, 2 = samples 0-5; worker 1: 6-9
    assert ref == [[[0, 1, 2], [6, 7, 8], [3, 4, 5], [9]]]
    assert ref_split(10, 3, 2, "drop", True) == (3, 2, 0, 4)
    # after rank 2 delivered [8, 9] and the padding [0, 1], sample 0 and 1 are seen: rank 0 must not read them again
    assert ref_remaining(list(range(10)), {0, 1, 4, 5, 8, 9}, 3, 2, "pad", False) == [2, 3, 6, 7]
    # a sample at two positions (a mixture's repeat): delivering one position leaves the other
    assert ref_remaining([2, 0, 1, 2], {0, 2}, 3, 1, "pad", False) == [0, 2]


# --------------------------------------------------------------------------- through the real loader


@pytest.mark.parametrize(
    "chain,repeats", [([(3, 3, 6), (2, 1, 1), (3, 0, None)], 4), ([(2, 0, 5), (3, 2, 2), (1, 1, None)], 0)]
)
def test_loader_elastic_chain_delivers_every_key_once_plus_reported_padding(tmp_path, chain, repeats):
    """The real loader (rank/world_size arguments, state_dict/load_state_dict): two elastic resumes in one epoch.
    94 samples on 3 ranks x 3 workers, batches of 4: 8 batches per rank, the 2 padded samples at the end of
    rank 2's worker 2 chunk, which emits them in batch 5 (its last shuffle block): the first chain's first
    checkpoint (after 6 batches) falls after the padding was emitted, and its last segment pads again."""
    import shardkit
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path / "d"), num_samples=94, shard_size=9, size=(16, 12), distinct_images=2)
    kw = dict(batch_size=4, seed=4, shuffle_buffer=4, persistent_workers=False, size=8, with_keys=True)
    seen: Counter = Counter()
    state, paddings = None, []
    for R, W, stop in chain:
        states, counts = [], []
        for rank in range(R):
            loader = shardkit.load(ds.url, rank=rank, world_size=R, num_workers=W, **kw)
            if state is not None:
                loader.load_state_dict(state)
            info = loader.epoch_info
            n = 0
            for _, _, keys in loader:
                seen.update(keys)
                n += 1
                if n == stop:
                    break
            counts.append(n)
            states.append(loader.state_dict())
        paddings.append(info.padded)
        assert len(set(counts)) == 1, counts
        assert all(s == states[0] for s in states)
        state = states[0]
    extra = sum(c - 1 for c in seen.values())
    assert set(seen) == set(ds.keys)
    assert paddings[-1] <= extra <= sum(paddings), (extra, paddings)
    assert extra == repeats  # chain 0: both paddings (2 + 2) were emitted
