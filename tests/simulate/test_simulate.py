"""The simulator against references: its schedule against the real BlockReader driven by the real planner over
every (rank, worker) (a recording opener in memory, many topologies), the report's peak against a brute-force
count, the limiter keeping the budget, the node cache, and the command's JSON and errors."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.cli import main
from shardkit.format.index import index_url
from shardkit.format.indexio import index_from_walk
from shardkit.loader.read.blocks import BlockReader
from shardkit.loader.read.reader import _pieces
from shardkit.loader.stats import Counters
from shardkit.plan import Mixture, PlanConfig, Source, World, epoch_stream, shard_offsets, worker_plan
from shardkit.simulate import Dataset, SimSettings, peak_rate, simulate
from shardkit.simulate.schedule import HEAD, NOOP, epoch_schedule
from shardkit.storage.budget import RequestLimiter
from tests.support.shard_reads import RecordingRaw, uniform_shard

ORACLE = settings(derandomize=True, deadline=None, max_examples=25, phases=[Phase.explicit, Phase.generate])


class RecordingOpener:
    """A ShardOpener over in-memory shards that logs what the remote opener sends: nothing for an open (the
    manifest gives the size), a GET per raw read, one GET per index fetch."""

    def __init__(self, files: dict[str, bytes], block_size: int):
        self.files, self.block_size, self.log, self.retries = files, block_size, [], 0

    def _raw(self, url: str) -> RecordingRaw:
        raw = RecordingRaw(self.files[url])
        raw.gets = _Logged(self.log, url)
        return raw

    def open(self, url, nbytes=None, sha256=None):
        return io.BufferedReader(self._raw(url), buffer_size=self.block_size)

    def open_ranges(self, url, nbytes=None, sha256=None):
        return self._raw(url)

    def cache_path_of(self, f):
        return None  # no node cache: every range is the store's

    def fetch(self, url):
        self.log.append(("GET index", url, 0, 0))
        return self.files[url]

    def fetch_sidecar(self, url, sha256, check):
        return check(self.fetch(url))


class _Logged(list):
    def __init__(self, log, url):
        super().__init__()
        self.log, self.url = log, url

    def append(self, r):
        self.log.append(("GET", self.url, r[0], r[1]))


@ORACLE
@given(
    shards=st.integers(1, 6),
    per_shard=st.integers(1, 9),
    jpeg=st.integers(1, 3000),
    world_size=st.integers(1, 3),
    workers=st.integers(0, 3),
    batch=st.integers(1, 5),
    buf=st.integers(1, 12),
    initial=st.integers(0, 6),
    shuffle=st.booleans(),
    indexed=st.booleans(),
    block=st.sampled_from([512, 2048, 4096, 1 << 16]),
    max_range=st.sampled_from([4096, 1 << 26]),
    epoch=st.integers(0, 2),
)
def test_schedule_is_what_the_real_reader_sends_for_the_real_plan(
    shards, per_shard, jpeg, world_size, workers, batch, buf, initial, shuffle, indexed, block, max_range, epoch
):
    data_bytes, layout = uniform_shard(per_shard, jpeg)
    names = tuple(f"train-{j:06d}.tar" for j in range(shards))
    files = {n: data_bytes for n in names}
    sha = hashlib.sha256(data_bytes).hexdigest()
    if indexed:
        idx = index_from_walk(io.BytesIO(data_bytes), names[0], len(data_bytes), sha)
        files.update({index_url(n): idx.to_bytes() for n in names})
    data = Dataset(
        names, [per_shard] * shards, [len(data_bytes)] * shards, indexed, layout, np.full(shards, layout.size)
    )
    cfg = PlanConfig(batch_size=batch, seed=5, shuffle=shuffle, shuffle_buffer=buf, shuffle_initial=initial)
    sched = epoch_schedule(
        data, cfg, world_size=world_size, num_workers=workers, epoch=epoch, block_size=block, max_range=max_range
    )
    stream = epoch_stream(Mixture((Source("x"),), (data.samples,)), cfg, epoch)
    w = max(1, workers)
    for p in range(world_size * w):
        opener = RecordingOpener(files, block)
        reader = BlockReader(
            list(names),
            [len(data_bytes)] * shards,
            shard_offsets(data.samples),
            opener,
            Counters(),
            num_classes=1,
            sha256=[sha] * shards if indexed else None,
        )
        reader.MAX_RANGE_BYTES = max_range
        plan = worker_plan(stream, cfg, World(p // w, world_size, p % w, w), epoch=epoch)
        for gids, _ in _pieces(plan.blocks, batch):
            reader.read(gids)
        got = [  # the index's size is the simulator's estimate: compared by name only
            (k, index_url(names[s]), 0, 0) if k == "GET index" else (k, names[s], lo, hi)
            for k, s, lo, hi in sched.requests_of(p)
        ]
        assert got == opener.log, p


@settings(derandomize=True, deadline=None, max_examples=60, phases=[Phase.explicit, Phase.generate])
@given(st.lists(st.integers(0, 5000), max_size=60))
@example([0, 1000])  # one second apart: never in the same window
@example([0, 999, 1000, 1999])
def test_peak_is_the_most_requests_in_any_one_second_window(ms):
    t = np.array(ms, dtype=np.float64)
    brute = max((sum(1 for x in ms if s <= x < s + 1000) for s in range(-1000, 5001)), default=0)
    assert peak_rate(t, window=1000) == brute


@ORACLE
@given(
    nodes=st.integers(1, 6),
    ranks=st.integers(1, 4),
    workers=st.integers(0, 4),
    prefixes=st.integers(1, 5),
    budget=st.sampled_from([5.0, 20.0, 100.0, 400.0]),
    walk=st.booleans(),
)
@example(nodes=6, ranks=4, workers=4, prefixes=1, budget=5.0, walk=False)
def test_with_a_budget_the_world_keeps_it(nodes, ranks, workers, prefixes, budget, walk):
    """All prefixes together never see more than budget x prefixes in any second; with one prefix that is the
    budget per prefix. (With several, one prefix can see more while the processes' current shards crowd on it:
    the per-process rate assumes they spread evenly, which a large world does; see the Scaling out page.)"""
    data = Dataset.synthetic(40, 50, 20000, prefixes=prefixes)
    kw = dict(nodes=nodes, ranks_per_node=ranks, workers=workers, index=not walk, block_size=1 << 20)
    r = simulate(data, SimSettings(request_budget=budget, **kw))
    assert r.peak_get_per_s <= budget * prefixes
    if prefixes == 1:
        assert r.peak_get_per_s_per_prefix[""] <= budget
    free = simulate(data, SimSettings(request_budget=None, **kw))
    assert free.requests == r.requests  # the limiter delays requests, it never drops or adds one
    if (nodes, ranks, workers, budget) == (6, 4, 4, 5.0):  # the explicit example: without the budget it is exceeded
        assert free.peak_get_per_s > budget * prefixes


def test_the_node_cache_serves_later_epochs():
    data = Dataset.synthetic(8, 64, 10000)
    r = simulate(data, SimSettings(nodes=1, ranks_per_node=2, workers=2, epochs=3, cache=True, request_budget=None))
    assert r.cache_hit_rate == 1.0
    shard_bytes = int(data.nbytes.sum())
    assert r.bytes >= shard_bytes  # every shard downloaded once...
    once = simulate(data, SimSettings(nodes=1, ranks_per_node=2, workers=2, epochs=1, cache=True, request_budget=None))
    assert r.by_kind["GET"] == once.by_kind["GET"] and r.by_kind["HEAD"] == once.by_kind["HEAD"]  # ...and only once


def test_command_json_and_errors(capsys, tmp_path):
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path / "ds"), num_samples=30, shard_size=7, size=(24, 20))
    assert main(["simulate", ds.url, "--json", "--nodes", "2", "--workers", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["shards"] == 5 and out["settings"]["samples"] == 30 and not out["settings"]["index"]
    assert out["requests"] == out["by_kind"]["HEAD"] + out["by_kind"]["GET"]  # the walk: no index
    args = ["simulate", "--shards", "20", "--samples-per-shard", "30", "--bytes-per-sample", "20000", "--nodes", "2"]
    assert main([*args, "--prefixes", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["peak_get_per_s_per_prefix"]) == 4
    assert out["mean_get_per_s"] > 0 and out["bytes_per_s_per_node"] > 0
    assert {"block_size", "num_prefixes", "request_budget"} <= set(out["settings"])
    assert main([*args, "--block-size", "8MiB", "--request-budget", "none"]) == 0
    text = capsys.readouterr().out
    assert "block size 8 MiB" in text and "budget none" in text
    assert main(["simulate", "--shards", "3"]) == 2
    assert "--samples-per-shard" in capsys.readouterr().err
    assert main([*args, "--workers", "-1"]) == 2
    assert "--workers" in capsys.readouterr().err
    # what the probe found: each a one-line error naming its option, never a traceback, NaN or a silent ignore
    for bad, named in [
        (["--request-budget", "nan"], "--request-budget"),
        (["--latency-ms", "-1"], "--latency-ms"),
        (["--mb-per-s-per-process", "0"], "--mb-per-s-per-process"),
        (["--img-per-s-per-rank", "nan"], "--img-per-s-per-rank"),
        (["--nodes", "100000", "--workers", "64"], "reading processes"),
    ]:
        assert main([*args, *bad]) == 2, bad
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err
    assert main(["simulate", ds.url, "--prefixes", "4"]) == 2
    assert "manifest's" in capsys.readouterr().err
    # rates over at least one second: a run shorter than the 1 s window never shows a mean above its peak
    assert main(["simulate", "--shards", "1", "--samples-per-shard", "1", "--bytes-per-sample", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean_get_per_s"] <= out["peak_get_per_s"] and out["duration_s"] >= 1.0


@ORACLE
@given(
    per_shard=st.integers(5, 300),
    batch=st.integers(1, 64),
    rate=st.sampled_from([10.0, 1e3, 1e6]),
    walk=st.booleans(),
    budget=st.sampled_from([None, 3.0, 50.0]),
)
def test_one_reader_timing_by_hand(per_shard, batch, rate, walk, budget):
    """One rank, no workers: the first batch is ready when the reads of its samples are done, their requests one
    after another (each the latency plus its bytes, spaced by the limiter); batches are taken no faster than asked."""
    data = Dataset.synthetic(3, per_shard, 5000)
    kw = dict(nodes=1, ranks_per_node=1, workers=0, batch_size=batch, img_per_s_per_rank=rate, index=not walk)
    s = SimSettings(block_size=1 << 16, request_budget=budget, **kw)
    r = simulate(data, s)
    cfg = PlanConfig(batch_size=batch, seed=0)
    sched = epoch_schedule(data, cfg, world_size=1, num_workers=0, epoch=0, block_size=1 << 16, index=not walk)
    # the reads holding the first batch's samples are the first ones, read back to back from the start
    last = min(batch, int(sched.chunk_len[0])) - 1
    reads = int(np.searchsorted(sched.read_start, last, side="right"))
    # the limiter grants on points k * STRETCH / budget (phase 0): a request takes the first unused point after
    # it is asked for (one request at a time: asked when the previous one is done)
    t, period = 0.0, (RequestLimiter.STRETCH / budget if budget else 0.0)
    point = 0.0
    for i in np.flatnonzero(sched.read < reads).tolist():
        if sched.kind[i] == NOOP:
            continue
        if period:
            while point < t - 1e-9 * period:
                point += period
            t, point = point, point + period
        t += s.latency_s + (0 if sched.kind[i] == HEAD else int(sched.hi[i] - sched.lo[i])) / s.bytes_per_s_per_process
    assert abs(r.first_batch_s[0] - t) < 1e-9 * max(1.0, t)
    batches = -(-3 * per_shard // batch)
    assert sum(r.epoch_s) >= batches * batch / rate - 1e-9


@ORACLE
@given(
    shards=st.integers(1, 30),
    per_shard=st.integers(1, 40),
    nodes=st.integers(1, 4),
    ranks=st.integers(1, 4),
    workers=st.integers(0, 8),
    batch=st.integers(1, 64),
    prefixes=st.integers(1, 4),
)
@example(shards=3, per_shard=10, nodes=1, ranks=1, workers=4, batch=16, prefixes=1)
def test_the_budget_each_process_gets_is_the_loaders(shards, per_shard, nodes, ranks, workers, batch, prefixes):
    """The simulator's read size, per-process rate and reading processes are what the loader's workers compute
    (``stages.process_budget`` with the real plan's batches per rank): only workers with batches share the budget."""
    from shardkit.format.manifest import Manifest, ShardInfo
    from shardkit.format.prefixes import spread_name
    from shardkit.loader.stages import process_budget
    from shardkit.simulate import read_budget_for
    from shardkit.storage.opener import StorageConfig

    names = [spread_name(f"train-{j:06d}.tar", j, prefixes) for j in range(shards)]
    manifest = Manifest(
        split="train", classes=["a"], shards=[ShardInfo(n, per_shard, 28000 * per_shard, "0" * 64) for n in names]
    )
    data = Dataset.of_manifest(manifest)
    s = SimSettings(nodes=nodes, ranks_per_node=ranks, workers=workers, batch_size=batch)
    sim = read_budget_for(data, s)
    cfg = PlanConfig(batch_size=batch, seed=s.seed)
    stream = epoch_stream(Mixture((Source("x"),), (data.samples,)), cfg, 0)
    world = s.world_size
    w = max(1, workers)
    for rank in {0, world - 1}:
        plan = worker_plan(stream, cfg, World(rank, world, 0, w), epoch=0)
        real = process_budget(manifest, StorageConfig(), World(rank, world, 0, w), plan.split.num_batches)
        assert (sim.block_size, sim.rate, sim.processes) == (real.block_size, real.rate, real.processes)
