"""Short CI variant of ``tools/stress.py`` (the full run: ``python tools/stress.py``).

Guarantees: with more workers than cores (4 on 2), a large shuffle buffer (2,000) and thousands of tiny
shards (2,000) an epoch is still exactly once, and memory stays within bounds derived from the data
(workers: the buffer's raw samples over a one-batch reference; main process: the batches in flight);
loading a manifest, building the loader on it and planning an epoch of it grow linearly with the number of
shards up to 100,000 (the absolute figures, under a second each: ``python tools/stress.py``).
"""

from __future__ import annotations

import pytest

from tests.support.timing import check_scales_linearly
from tools.stress import manifest_timing, plan_timing, stress


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_stress_short(tmp_path):
    r = stress(
        shards=2000,
        per_shard=2,
        workers=4,
        shuffle_buffer=2000,
        batch_size=64,
        manifest_shards=0,  # timed below, against a smaller manifest instead of a number of seconds
        workdir=str(tmp_path),
        log=lambda *a: None,
    )
    assert r.failures == [], r.failures
    assert r.peak_main_mib > 0 and r.peak_worker_mib > 0  # both were measured
    assert (
        0 < r.main_limit_mib < 64 and 0 < r.worker_limit_mib - r.ref_worker_growth_mib < 64
    )  # and the bounds are tight


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_manifest_load_loader_build_and_planning_grow_linearly_to_100k_shards(tmp_path):
    small, large = 1_000, 100_000
    load_small, build_small = manifest_timing(small, str(tmp_path))
    load_large, build_large = manifest_timing(large, str(tmp_path))
    plan_small, plan_large = min(plan_timing(small) for _ in range(3)), min(plan_timing(large) for _ in range(3))
    check_scales_linearly("load_manifest", (small, load_small), (large, load_large))
    check_scales_linearly("shardkit.load", (small, build_small), (large, build_large))
    check_scales_linearly("planning an epoch over 8,192 ranks x 8 workers", (small, plan_small), (large, plan_large))
