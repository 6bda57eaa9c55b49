"""``shardkit bench`` and ``shardkit simulate`` over a corrected split and a selection: they read what is in."""

from __future__ import annotations

import json

import pytest

from shardkit.cli import main
from tests.support.living import Living, convert_split, correct, select


@pytest.fixture(scope="module")
def living(tmp_path_factory) -> Living:
    lv = convert_split(str(tmp_path_factory.mktemp("cli")), 18, shard_size=6)
    correct(lv, sorted(lv.latest)[:3], {})
    return lv


@pytest.fixture(scope="module")
def selection(living, tmp_path_factory) -> tuple[str, int]:
    chosen = set(living.order[::2])
    return select(living, chosen, str(tmp_path_factory.mktemp("sel"))), len(chosen & set(living.latest))


def test_simulate_plans_the_samples_that_are_in(living, selection, capsys):
    for url, n in ((living.url, len(living.latest)), selection):
        assert main(["simulate", url, "--json", "--workers", "1"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["settings"]["samples"] == n and out["settings"]["shards"] == 3


def test_bench_reads_a_selection_and_a_corrected_split(living, selection, capsys):
    for url in (living.url, selection[0]):
        rc = main(["bench", url, "--workers", "0", "--batches", "2", "--batch-size", "2", "--max-seconds", "5"])
        captured = capsys.readouterr()
        assert rc == 0, captured.err
