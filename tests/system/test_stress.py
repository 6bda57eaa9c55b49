"""Short CI variant of ``tools/stress.py`` (the full run: ``python tools/stress.py``).

Guarantees: with more workers than cores (4 on 2), a large shuffle buffer (2,000) and thousands of tiny
shards (2,000) an epoch is still exactly once, and memory stays within bounds derived from the data
(workers: the buffer's raw samples over a one-batch reference; main process: the batches in flight);
a manifest of 100,000 shards loads in under a second, and the loader builds on it in under a second.
"""

from __future__ import annotations

import pytest

from tools.stress import stress


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_stress_short(tmp_path):
    r = stress(
        shards=2000,
        per_shard=2,
        workers=4,
        shuffle_buffer=2000,
        batch_size=64,
        manifest_shards=100_000,
        manifest_s=1.0,
        workdir=str(tmp_path),
        log=lambda *a: None,
    )
    assert r.failures == [], r.failures
    assert r.peak_main_mib > 0 and r.peak_worker_mib > 0  # both were measured
    assert (
        0 < r.main_limit_mib < 64 and 0 < r.worker_limit_mib - r.ref_worker_growth_mib < 64
    )  # and the bounds are tight
    assert r.manifest_load_s < 1.0 and r.loader_build_s < 1.0
