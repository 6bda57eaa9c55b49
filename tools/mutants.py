"""The mutant gate: every realistic bug in the catalogue must make the tests named for it fail.

A mutant is a small, realistic bug planted in the library: an exact snippet of
one file replaced by another. The catalogue is ``tools/mutant_catalogue/*.py``;
each file defines ``MUTANTS``, a list of dicts::

    {"id": "tars-repeated-field-merges",            # unique, kebab-case
     "row": "Conversion input: tars",               # the README Guarantees row it breaks
     "file": "shardkit/convert/tars.py",           # relative to the repository root
     "old": "if ext in fields:",                    # occurs exactly once in the file
     "new": "if False:",
     "tests": ["tests/test_convert_sources.py::test_tar_repeated_field_starts_a_new_sample"]}

For each mutant the gate copies the repository into a scratch folder (one per
job), writes the mutated file, runs ``python -m pytest -x`` on the named tests
with the scratch copy first on ``PYTHONPATH`` and byte-code writing off, and
restores the file. A mutant is *caught* when pytest reports a failure (exit 1),
a collection error (exit 2) or runs past ``--timeout``; it *survived* when the
tests pass. A stale mutant (its ``old`` is not in the file exactly once) or a
named test that does not exist is an error. The gate exits 0 only when every
selected mutant is caught.

Usage::

    python tools/mutants.py                     # the whole catalogue, 2 jobs
    python tools/mutants.py --area sources      # one catalogue file (tools/mutant_catalogue/sources.py)
    python tools/mutants.py --id tars-repeated-field-merges --id ...
    python tools/mutants.py --list              # the catalogue, no runs
    python tools/mutants.py --markdown          # after the runs, a table per Guarantees row
    python tools/mutants.py --explicit-only     # hypothesis tests run only their @example cases: proves
                                                # each mutant is caught deterministically, not by a lucky draw
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "tools" / "mutant_catalogue"
_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", "*.egg-info", "out", "bench-out")


@dataclass(frozen=True)
class Mutant:
    id: str
    row: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    area: str


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    verdict: str  # caught | survived | error
    detail: str
    seconds: float


def load_catalogue(areas: list[str] | None = None) -> list[Mutant]:
    """Every mutant of ``tools/mutant_catalogue/*.py`` (or only those files named in ``areas``)."""
    out: list[Mutant] = []
    for path in sorted(CATALOGUE.glob("*.py")):
        if path.name.startswith("_") or (areas and path.stem not in areas):
            continue
        spec = importlib.util.spec_from_file_location(f"_mutants_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        for m in module.MUTANTS:
            out.append(Mutant(m["id"], m["row"], m["file"], m["old"], m["new"], tuple(m["tests"]), path.stem))
    ids = [m.id for m in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SystemExit(f"mutants.py: duplicate mutant ids {dupes}; make each id unique")
    return out


def problems(mutants: list[Mutant]) -> list[str]:
    """Stale snippets and mutants without tests, checked against the working tree."""
    found = []
    for m in mutants:
        path = ROOT / m.file
        if not path.exists():
            found.append(f"{m.id}: no file {m.file}")
            continue
        n = path.read_text().count(m.old)
        if n != 1:
            found.append(f"{m.id}: its 'old' snippet occurs {n} times in {m.file} (must be once); update the catalogue")
        if m.old == m.new:
            found.append(f"{m.id}: 'old' and 'new' are equal")
        if not m.tests:
            found.append(f"{m.id}: names no test")
    return found


def _env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(scratch) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant's .pyc must never outlive it (same size, same second)
    return env


def _pytest(scratch: Path, args: list[str], timeout: float) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    try:
        p = subprocess.run(cmd, cwd=scratch, env=_env(scratch), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, ""
    return p.returncode, p.stdout + p.stderr


def missing_tests(scratch: Path, mutants: list[Mutant]) -> list[str]:
    """Named tests that pytest cannot collect in the unmutated copy."""
    wanted = sorted({t for m in mutants for t in m.tests})
    rc, out = _pytest(scratch, ["--collect-only", *wanted], 600)
    if rc == 0:
        return []
    bad = [t for t in wanted if f"ERROR: not found: {scratch / t}" in out or f"not found: {t}" in out or f"ERROR: file or directory not found: {t.split('::')[0]}" in out]
    return bad or [f"collection failed (exit {rc}): {out.strip().splitlines()[-1] if out.strip() else ''}"]


def _last_failure(out: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return (lines[0] if lines else (out.strip().splitlines() or [""])[-1])[:200]


_EXPLICIT_PLUGIN = "_mutants_explicit_only"
_EXPLICIT_SOURCE = """from hypothesis import Phase, settings

settings.register_profile("mutants-explicit-only", phases=[Phase.explicit])
settings.load_profile("mutants-explicit-only")
"""


def run_one(scratch: Path, m: Mutant, timeout: float, extra: tuple[str, ...] = ()) -> Outcome:
    path = scratch / m.file
    original = path.read_text()
    t0 = time.monotonic()
    path.write_text(original.replace(m.old, m.new, 1))
    try:
        rc, out = _pytest(scratch, [*extra, "-x", *m.tests], timeout)
    finally:
        path.write_text(original)
    dt = time.monotonic() - t0
    if rc == 1:
        return Outcome(m, "caught", _last_failure(out), dt)
    if rc == 2:
        return Outcome(m, "caught", "collection error: " + _last_failure(out), dt)
    if rc == 124:
        return Outcome(m, "caught", f"timed out after {timeout:.0f} s", dt)
    if rc == 0:
        return Outcome(m, "survived", "the named tests passed", dt)
    return Outcome(m, "error", f"pytest exit {rc}: {_last_failure(out)}", dt)


def markdown(outcomes: list[Outcome]) -> str:
    rows: dict[str, list[Outcome]] = {}
    for o in outcomes:
        rows.setdefault(o.mutant.row, []).append(o)
    lines = ["| Guarantees row | mutants | caught | tests |", "|---|---|---:|---|"]
    for row, os_ in rows.items():
        ids = ", ".join(f"`{o.mutant.id}`" for o in os_)
        tests = ", ".join(sorted({f"`{t}`" for o in os_ for t in o.mutant.tests}))
        lines.append(f"| {row} | {ids} | {sum(o.verdict == 'caught' for o in os_)}/{len(os_)} | {tests} |")
    return "\n".join(lines)


def area_summary(outcomes: list[Outcome]) -> str:
    """One line per catalogue file: caught/total and the seconds its mutants ran (summed over jobs)."""
    areas: dict[str, list[Outcome]] = {}
    for o in outcomes:
        areas.setdefault(o.mutant.area, []).append(o)
    return "\n".join(f"  {a:14} {sum(o.verdict == 'caught' for o in os_)}/{len(os_)} caught, {sum(o.seconds for o in os_):.0f} s of mutant runs"
                     for a, os_ in sorted(areas.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--area", action="append", help="only this catalogue file (stem); repeatable")
    ap.add_argument("--id", action="append", help="only this mutant; repeatable")
    ap.add_argument("--jobs", type=int, default=2, help="scratch copies run at once (default 2)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant before it counts as caught (hang)")
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    ap.add_argument("--markdown", action="store_true", help="print a table per Guarantees row after the runs")
    ap.add_argument("--explicit-only", action="store_true",
                    help="run hypothesis tests on their @example cases only (is each mutant caught deterministically?)")
    args = ap.parse_args(argv)

    mutants = load_catalogue(args.area)
    if args.id:
        unknown = sorted(set(args.id) - {m.id for m in mutants})
        if unknown:
            print(f"mutants.py: no mutant {unknown[0]!r} in the catalogue", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.id in args.id]
    if args.list:
        for m in mutants:
            print(f"{m.area:12} {m.id:48} {m.file}  <- {', '.join(m.tests)}")
        print(f"{len(mutants)} mutants")
        return 0
    bad = problems(mutants)
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 2

    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shardkit-mutants-") as tmp:
        scratches = []
        for j in range(max(1, min(args.jobs, len(mutants)))):
            s = Path(tmp) / f"copy{j}"
            shutil.copytree(ROOT, s, ignore=_IGNORE, symlinks=True)
            if args.explicit_only:
                (s / f"{_EXPLICIT_PLUGIN}.py").write_text(_EXPLICIT_SOURCE)
            scratches.append(s)
        extra = ("-p", _EXPLICIT_PLUGIN) if args.explicit_only else ()
        missing = missing_tests(scratches[0], mutants)
        if missing:
            print("named tests that do not exist:\n  " + "\n  ".join(missing), file=sys.stderr)
            return 2
        free: queue.Queue[Path] = queue.Queue()
        for s in scratches:
            free.put(s)

        def task(m: Mutant) -> Outcome:
            s = free.get()
            try:
                return run_one(s, m, args.timeout, extra)
            finally:
                free.put(s)

        outcomes: list[Outcome] = []
        with cf.ThreadPoolExecutor(len(scratches)) as pool:
            for o in pool.map(task, mutants):
                outcomes.append(o)
                print(f"{o.verdict:8} {o.seconds:6.1f}s  {o.mutant.id}: {o.detail}", flush=True)

    caught = sum(o.verdict == "caught" for o in outcomes)
    print(f"\n{caught}/{len(outcomes)} mutants caught in {time.monotonic() - t_start:.0f} s")
    print(area_summary(outcomes))
    if args.markdown:
        print("\n" + markdown(outcomes))
    left = [o for o in outcomes if o.verdict != "caught"]
    for o in left:
        print(f"NOT CAUGHT ({o.verdict}): {o.mutant.id} [{o.mutant.file}] row {o.mutant.row!r}; tests: {' '.join(o.mutant.tests)}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
