"""`shardkit info` says whether a split's sample indexes carry per-sample checksums, and how to add them."""

from __future__ import annotations

import os
import subprocess
import sys

from shardkit.cli import main
from tests.support.data import add_index, write_dataset


def test_info_says_whether_indexes_carry_checksums(tmp_path, capsys):
    root = str(tmp_path / "ds")
    write_dataset(root, num_samples=6, shard_size=3, size=(24, 20), distinct_images=2)
    assert main(["info", root]) == 0
    assert "sample index" not in capsys.readouterr().out  # written without one
    add_index(root)
    assert main(["info", root]) == 0
    assert "3 classes, 2 shards, sample index with checksums," in capsys.readouterr().out
    v1 = str(tmp_path / "v1")
    tool = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench_checksum.py")
    subprocess.run([sys.executable, tool, "--v1-copy", root, v1], check=True, capture_output=True)
    assert main(["info", v1]) == 0
    assert "sample index without checksums (`shardkit index` adds them)" in capsys.readouterr().out
