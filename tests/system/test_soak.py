"""Short CI variant of ``tools/soak.py`` (the long run: ``python tools/soak.py [--remote]``).

Guarantees: with persistent workers, every epoch delivers every sample exactly once; RSS of the
main process and of the workers stays flat after epoch 2; after ``close()`` open fds, threads and
child processes are back to their starting counts and no temporary file is left; through an
evicting shard cache the cache stays under its limit.
"""

from __future__ import annotations

import pytest

from tools.soak import soak


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("remote", [False, True], ids=["local", "http+evicting-cache"])
def test_soak_short(remote, tmp_path):
    r = soak(
        epochs=6,
        samples=600,
        shard_size=25,
        workers=2,
        batch_size=16,
        remote=remote,
        workdir=str(tmp_path),
        log=lambda *a: None,
    )
    assert r.failures == [], r.failures
    # the 2 persistent workers stay alive all along (in a full pytest session multiprocessing may
    # start a helper process of its own, e.g. a resource tracker, so this is a lower bound; that
    # every child is gone after close() is checked by soak() itself: r.failures)
    assert len(r.snapshots) == 6 and all(s.children >= 2 for s in r.snapshots)
    # < 5 % is the long run's bar; 6 short epochs allow a little allocator noise
    assert r.growth("main") < 0.05 and r.growth("workers") < 0.05
    if remote:
        assert all(0 < s.cache_bytes <= r.cache_limit for s in r.snapshots)
