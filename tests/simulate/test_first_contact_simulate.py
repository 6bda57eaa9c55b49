"""The simulator's report and clock against hand-made references: the prefix table lists the hottest prefixes first,
and each worker's read-ahead starts when the DataLoader asks for a batch ``2 * workers`` ahead of the consumer."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanConfig
from shardkit.simulate import Dataset, SimSettings, simulate
from shardkit.simulate.clock import epoch_timing
from shardkit.simulate.report import PrefixRow
from shardkit.simulate.schedule import GET, HEAD, INDEX, epoch_schedule

ORACLE = settings(derandomize=True, deadline=None, max_examples=25, phases=[Phase.explicit, Phase.generate])


@ORACLE
@given(peaks=st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True), rows=st.integers(1, 6))
@example(peaks=[1, 50, 7, 900, 3], rows=2)
def test_prefix_table_lists_the_hottest_prefixes_first(peaks, rows):
    base = simulate(Dataset.synthetic(2, 3, 100), SimSettings(nodes=1, ranks_per_node=1, workers=0, batch_size=2))
    report = dataclasses.replace(
        base, prefixes=tuple(PrefixRow(f"p{i:02d}", 1, peak, 0.0, 0) for i, peak in enumerate(peaks))
    )
    listed = [
        line.split()[0]
        for line in report.text(rows=rows).splitlines()
        if line.startswith("p") and line.split()[0] != "prefix"
    ]
    want = [f"p{i:02d}" for i in sorted(range(len(peaks)), key=lambda i: -peaks[i])][:rows]
    assert listed == want


@ORACLE
@given(workers=st.integers(1, 3), samples=st.integers(4, 14), dt=st.sampled_from([0.5, 1.0, 7.0]))
@example(workers=1, samples=12, dt=1.0)
@example(workers=2, samples=12, dt=1.0)
def test_read_ahead_starts_two_batches_per_worker_ahead_of_the_consumer(workers, samples, dt):
    """One rank, batches of one sample, a block per sample, reads of 1 ms and a slow consumer. Worker ``p`` makes
    batches ``p, p + W, p + 2W...``; it reads its ``j``-th sample (j >= 1) once its previous read is done and the
    DataLoader has asked for the batch of sample ``j - 1``, which it does ``2 W`` batches before the consumer takes it:
    at ``t0 + (W (j - 1) + p - 2 W) dt``, ``t0`` the time the first batch is ready (then the consumer's pace)."""
    lat = 0.001
    data = Dataset.synthetic(1, samples, 1000)
    cfg = PlanConfig(batch_size=1, seed=0, shuffle=False)
    sched = epoch_schedule(data, cfg, world_size=1, num_workers=workers, epoch=0, block_size=2048, index=True)
    timing = epoch_timing(
        sched,
        world_size=1,
        num_workers=workers,
        batch_size=1,
        img_per_s_per_rank=1 / dt,
        latency_s=lat,
        bytes_per_s_per_process=1e15,
    )
    t0 = 2 * lat  # worker 0: the sample index, its first sample's GET (no size probe)
    for p in range(workers):
        mine = [i for i in range(len(sched.proc)) if sched.proc[i] == p]
        gets = [i for i in mine if sched.kind[i] == GET]
        assert int(sched.kind[mine[0]]) == INDEX and mine.index(gets[0]) == 1 and HEAD not in sched.kind[mine]
        t = lat  # after the index GET
        for j, i in enumerate(gets):
            asked = workers * (j - 1) + p - 2 * workers
            send = max(t, t0 + asked * dt) if j >= 1 and asked > 0 else t
            assert abs(float(timing.send[i]) - send) < 1e-9, (p, j, float(timing.send[i]), send)
            t = send + lat
    assert np.isclose(timing.first_batch[0], t0)
