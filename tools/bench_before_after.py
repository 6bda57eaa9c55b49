"""The loader before and after a change, interleaved in one run: same shards, same machine, run by run.

    python tools/bench_before_after.py --before OLD_CHECKOUT --after . --shards /tmp/skb/shards --runs 5

Each measurement is a fresh process with ``PYTHONPATH`` set to one checkout (its ``shardkit`` is the
one imported): ``shardkit.load(shards, batch_size=64, num_workers=W, pin_memory=P)``, one untimed
warm-up epoch (worker start, page cache), then ``--epochs`` timed epochs. The two checkouts alternate
A B A B ... for every configuration, so drift of the machine's speed hits both alike; the table gives
medians of img/s and the median of the per-round ratios after/before, and each checkout's
decode-only ceiling (decode + crop/resize alone on one core, in process) with the ratio of the
0-worker loader to it. Make shards first, e.g. with ``tools/bench_loader.py`` (its ``--out``) or
``shardkit convert``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import shardkit
shards, workers, epochs, pin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
out = {}
if workers < 0:  # the decode-only ceiling of this checkout
    try:  # a checkout keeps its bench in shardkit.ops or in shardkit.loader
        from shardkit.ops.bench import decode_ceiling
    except ImportError:
        from shardkit.loader.bench import decode_ceiling
    from shardkit.loader.config import ImageConfig
    out["ceiling"] = decode_ceiling(shards, image=ImageConfig(preset="train", size=224), samples=512)[0]
else:
    loader = shardkit.load(shards, batch_size=64, num_workers=workers, persistent_workers=workers > 0, pin_memory=pin)
    for _ in loader:
        pass
    n, t = 0, time.perf_counter()
    for _ in range(epochs):
        for images, _labels in loader:
            n += len(images)
    out["img_s"] = n / (time.perf_counter() - t)
    loader.close()
print(json.dumps(out))
"""


def one(tree: str, shards: str, workers: int, epochs: int, pin: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    r = subprocess.run(
        [sys.executable, "-c", CHILD, shards, str(workers), str(epochs), "1" if pin else "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=os.path.abspath(tree),
    )
    # cwd=tree too: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH
    if r.returncode:
        raise SystemExit(f"{tree}: measurement failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="checkout whose shardkit is 'before'")
    ap.add_argument("--after", default=".", help="checkout whose shardkit is 'after' (default: this one)")
    ap.add_argument("--shards", required=True, help="the dataset the 'after' checkout reads")
    ap.add_argument(
        "--before-shards",
        default=None,
        help="the same images converted by the 'before' checkout (default: --shards), e.g. when the manifest format changed",
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 0])
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs per measurement")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    configs = [(w, pin) for w in a.workers for pin in ((False, True) if w > 0 else (False,))]
    res: dict[tuple[int, bool, str], list[float]] = {}
    for r in range(a.runs):
        for w, pin in configs:
            for name, tree, shards in (("before", a.before, a.before_shards or a.shards), ("after", a.after, a.shards)):
                v = one(tree, shards, w, a.epochs, pin)["img_s"]
                res.setdefault((w, pin, name), []).append(v)
                print(f"round {r}: workers {w} pin_memory={pin!s:<5} {name:<6} {v:>7.0f} img/s", flush=True)
    ceil = {
        name: statistics.median(one(tree, shards, -1, 0, False)["ceiling"] for _ in range(3))
        for name, tree, shards in (("before", a.before, a.before_shards or a.shards), ("after", a.after, a.shards))
    }
    print(
        f"\n{'workers':>7} {'pin_memory':>10} {'before':>8} {'after':>8} {'after/before':>13}   (img/s: medians of {a.runs} interleaved runs)"
    )
    for w, pin in configs:
        b, f = res[(w, pin, "before")], res[(w, pin, "after")]
        ratio = statistics.median(x / y for x, y in zip(f, b))
        print(f"{w:>7} {pin!s:>10} {statistics.median(b):>8.0f} {statistics.median(f):>8.0f} {ratio:>13.2f}")
    for name in ("before", "after"):
        line = f"decode-only ceiling ({name}): {ceil[name]:.0f} img/s"
        if (0, False, name) in res:
            line += f"; 0 workers / ceiling = {statistics.median(res[(0, False, name)]) / ceil[name]:.2f}"
        print(line)


if __name__ == "__main__":
    main()
