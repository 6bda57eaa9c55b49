"""The doctor's measurement and verdict, with a fake clock and stub loaders (no timing in tests).

Guarantees checked: the rate excludes start-up and the first batch of every worker; a loader
whose start is slow gives the same rate with a short and a long batch limit (the issue's 20 vs
60 batches); time to the first batch is reported on its own; a verdict names input-bound or not,
the milliseconds and the slowest stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from shardkit.loader.doctor import epoch_report, measure, slowest_stage, verdict


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def stub_loader(
    clock: FakeClock,
    *,
    workers: int,
    startup_s: float,
    block_every: int,
    block_s: float,
    per_batch_s: float,
    batch: int = 64,
    n: int = 10_000,
):
    """Batches as a DataLoader over ``workers`` workers delivers them: a slow start, then steady
    batches every ``per_batch_s`` with a pause of ``block_s`` every ``block_every`` batches
    (a worker reading its next shuffle block)."""
    clock.t += startup_s
    for i in range(n):
        clock.t += per_batch_s
        if block_every and i % block_every == block_every - 1:
            clock.t += block_s
        yield batch


@pytest.mark.parametrize("max_batches", [20, 60])
def test_rate_does_not_depend_on_the_window_count(max_batches):
    c = FakeClock()
    r = measure(
        stub_loader(c, workers=2, startup_s=3.0, block_every=0, block_s=0, per_batch_s=0.02),
        warm=2,
        window=5,
        max_batches=max_batches,
        clock=c,
    )
    assert r.images_per_s == pytest.approx(64 / 0.02)
    assert r.first_batch_s == pytest.approx(3.02)  # start-up is reported, not averaged in
    assert r.stable and r.stop == "stable"


def test_slow_start_and_block_pauses_are_excluded_until_stable():
    """A naive rate over 20 batches including start-up would be ~1/2 the steady one."""
    c = FakeClock()
    gen = stub_loader(c, workers=2, startup_s=1.5, block_every=16, block_s=0.08, per_batch_s=0.02)
    r = measure(gen, warm=2, window=16, tolerance=0.05, clock=c)
    steady = 16 * 64 / (16 * 0.02 + 0.08)  # one block pause per window
    assert r.images_per_s == pytest.approx(steady, rel=1e-6)
    naive = 20 * 64 / (1.5 + 20 * 0.02 + 0.08)
    assert naive < 0.6 * r.images_per_s


def test_unstable_rate_stops_at_the_limit_and_says_so():
    c = FakeClock()

    def wobbly():
        for i in range(1000):
            c.t += 0.01 if (i // 5) % 2 else 0.03  # windows of 5 alternate fast/slow
            yield 64

    r = measure(wobbly(), warm=1, window=5, tolerance=0.05, max_batches=50, clock=c)
    assert not r.stable and r.stop == "batch limit" and len(r.windows) == 10


def test_time_limit():
    c = FakeClock()

    def slow():
        while True:
            c.t += 1.0
            yield 64

    r = measure(slow(), warm=1, window=1000, max_s=10, clock=c)
    assert r.stop == "time limit" and r.seconds == pytest.approx(10)


def test_end_of_data_before_warm_up():
    c = FakeClock()
    r = measure(iter([64]), warm=2, clock=c)
    assert r.images_per_s == 0 and r.stop == "end of data" and r.batches == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="warm and window"):
        measure(iter([]), warm=0)


@dataclass
class Stats:
    read_s: float = 0.1
    decode_s: float = 3.0
    resize_s: float = 1.0
    collate_s: float = 0.2
    samples: int = 6400
    skipped: int = 2
    retries: int = 1
    wait_s: float = 5.0
    elapsed_s: float = 10.0


def test_verdict_input_bound_names_ms_and_the_stage():
    v = verdict(images_per_s=64 / 0.018, batch_size=64, step_ms=12, stats=Stats(), workers=2, cpus=8)
    assert v.startswith("input-bound: the loader gives a batch of 64 every 18.0 ms, your step takes 12.0 ms")
    assert "slowest stage: decode (70 % of worker time)" in v and "decode_on" not in v and "more workers will help" in v
    assert 'decode on the GPU (decode_on="device"' in verdict(
        images_per_s=64 / 0.018, batch_size=64, step_ms=12, stats=Stats(), gpu=True
    )


def test_verdict_not_input_bound():
    v = verdict(images_per_s=64 / 0.010, batch_size=64, step_ms=12, stats=Stats())
    assert v.startswith(
        "not input-bound: the loader gives a batch of 64 every 10.0 ms, your step takes 12.0 ms (1.2x headroom)"
    )


def test_slowest_stage_and_epoch_report():
    assert slowest_stage(Stats(read_s=5)) == ("read", pytest.approx(5 / 9.2))
    line = epoch_report(3, Stats())
    assert (
        line
        == "shardkit epoch 3: waited 50 % of 10.0 s for data, 640 img/s, 2 skipped, 1 retries, slowest stage decode (70 %)"
    )


def test_min_batches_keeps_measuring_past_an_early_stable_pair():
    c = FakeClock()
    r = measure(
        stub_loader(c, workers=1, startup_s=0, block_every=0, block_s=0, per_batch_s=0.01),
        warm=1,
        window=5,
        min_batches=40,
        clock=c,
    )
    assert r.stable and r.batches == 40


# ----------------------------------------------------------------------------- through the real loader and CLI

import logging  # noqa: E402
import re  # noqa: E402

from tests.support.data import write_dataset  # noqa: E402


@pytest.fixture(scope="module")
def small_ds(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("doc") / "ds"), num_samples=48, shard_size=12, size=(32, 24))


def test_bench_cli_verdict_follows_the_step_time(small_ds, capsys):
    from shardkit.cli import main

    args = [
        "bench",
        small_ds.url,
        "--workers",
        "0",
        "--batches",
        "4",
        "--window",
        "2",
        "--batch-size",
        "4",
        "--size",
        "16",
    ]
    assert main(args + ["--step-ms", "0.001"]) == 0
    out = capsys.readouterr().out
    best = float(
        re.search(
            r"^best: \d+ ± \d+ img/s with 0 workers = ([\d.]+) ms per batch of 4; the stage that limits it: ", out, re.M
        )[1]
    )
    m = re.search(
        r"^verdict \(--step-ms\): input-bound: the loader gives a batch of 4 every ([\d.]+) ms, your step takes 0.0 ms",
        out,
        re.M,
    )
    assert m and abs(float(m[1]) - best) <= 0.1 + 0.01 * best, out
    assert "slowest stage: " in out
    assert main(args + ["--step-ms", "1000000"]) == 0
    assert re.search(r"^verdict \(--step-ms\): not input-bound: ", capsys.readouterr().out, re.M)
    assert main(args + ["--step-ms", "0"]) == 2


def test_bench_reports_first_batch_and_steadiness(small_ds):
    from shardkit.ops.bench import bench

    r = bench(small_ds.url, workers=[1], batches=4, window=2, batch_size=4, size=16, max_s=20)
    (p,) = r.points
    assert p.first_batch_s > 0 and p.images_per_s > 0
    assert p.stable == (p.stop == "stable") and p.stop in ("stable", "time limit", "batch limit")


def test_bench_plot(small_ds, tmp_path):
    pytest.importorskip("matplotlib")
    from shardkit.ops.bench import bench, plot

    r = bench(small_ds.url, workers=[0], batches=2, window=2, batch_size=4, size=16, step_ms=5.0, step_source="test")
    plot(r, str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_step_time_of_a_model_and_unknown_model(small_ds, capsys):
    from shardkit.cli import main
    from shardkit.ops.bench import step_time_ms

    assert step_time_ms("mobilenet_v3_small", batch_size=2, size=32, device="cpu", steps=1) > 0
    assert main(["bench", small_ds.url, "--workers", "0", "--model", "no_such_net", "--device", "cpu"]) == 2
    assert "--model no_such_net" in capsys.readouterr().err


def test_loader_report_and_log_every_epoch(small_ds, caplog):
    import shardkit

    caplog.set_level(logging.INFO, logger="shardkit.loader")
    loader = shardkit.load(small_ds.url, batch_size=8, num_workers=0, size=16, pin_memory=False, log_every_epoch=True)
    for _ in range(2):
        for _ in loader:
            pass
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shardkit epoch")]
    assert (
        len(lines) == 2
        and lines[0].startswith("shardkit epoch 0: waited ")
        and lines[1].startswith("shardkit epoch 1: ")
    )
    assert re.fullmatch(
        r"shardkit epoch 1: waited \d+ % of [\d.]+ s for data, \d+ img/s, 0 skipped, 0 retries, "
        r"slowest stage \w+ \(\d+ %\)",
        lines[1],
    ), lines[1]
    assert loader.report().startswith("shardkit epoch 1: ")  # the last epoch counted (the next has not started)
    quiet = shardkit.load(small_ds.url, batch_size=8, num_workers=0, size=16, pin_memory=False)
    caplog.clear()
    for _ in quiet:
        pass
    assert not [r for r in caplog.records if r.getMessage().startswith("shardkit epoch")]


def test_bench_decode_on_device_cpu(small_ds, capsys):
    from shardkit.cli import main

    assert (
        main(
            [
                "bench",
                small_ds.url,
                "--workers",
                "0",
                "--batches",
                "2",
                "--window",
                "2",
                "--batch-size",
                "4",
                "--size",
                "16",
                "--decode-on",
                "device",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "decoded on cpu" in out and re.search(r"^\s+0\s+\d+\s+[\d.]+s", out, re.M), out
