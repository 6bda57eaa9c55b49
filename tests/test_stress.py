"""Short CI variant of ``tools/stress.py`` (the full run: ``python tools/stress.py``).

Guarantees: with more workers than cores, a large shuffle buffer and thousands of tiny shards an
epoch is still exactly once and memory stays bounded; a manifest of 100,000 shards loads in under
a second, and the loader builds on it in under a second.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))

from stress import stress  # noqa: E402


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_stress_short(tmp_path):
    r = stress(shards=2000, per_shard=2, workers=4, shuffle_buffer=2000, batch_size=64, manifest_shards=100_000,
               manifest_s=1.0, max_worker_mib=1024, workdir=str(tmp_path), log=lambda *a: None)
    assert r.failures == [], r.failures
    assert r.manifest_load_s < 1.0 and r.loader_build_s < 1.0
