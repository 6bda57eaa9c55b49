"""The mutant gate: every realistic bug in the catalogue must make the tests named for it fail.

A mutant is a small, realistic bug planted in the library: an exact snippet of
one file replaced by another. The catalogue is ``tests/mutants/*.py``;
each file defines ``MUTANTS``, a list of dicts::

    {"id": "tars-repeated-field-merges",            # unique, kebab-case
     "row": "Conversion input: tars",               # the docs/guarantees.md row it breaks
     "file": "shardkit/convert/scan/tars.py",           # relative to the repository root
     "old": "if ext in fields:",                    # occurs exactly once in the file
     "new": "if False:",
     "tests": ["tests/convert/scan/test_sources.py::test_tar_repeated_field_starts_a_new_sample"]}

For each mutant the gate copies the repository into a scratch folder (one per
job), writes the mutated file, runs ``python -m pytest -x`` on the named tests
with the scratch copy first on ``PYTHONPATH`` and byte-code writing off, and
restores the file. Each job keeps a *zygote*, a process that imported torch, numpy, Pillow, hypothesis and
pytest once; every run is a forked child of it that imports the library and the tests afresh from the
scratch copy (about 3 s less per mutant than a new interpreter). The zygote freezes its heap before it
forks (a child's garbage collections then walk only the child's own objects), and each scratch copy is
compiled once before the runs (the library's byte code and pytest's rewritten test modules), so a run
compiles only the mutated file: the mutated file's cached byte code is deleted before its mutant is
written, and no run writes byte code. Afterwards every test function that
caught a mutant is run once, unmutated, through the zygotes; one that fails there (it would catch every
mutant) has its mutants run again in new processes (``--no-zygote``: all of them from the start). A mutant is *caught* when pytest reports a failure (exit 1),
a collection error (exit 2) or runs past ``--timeout``; it *survived* when the
tests pass. A stale mutant (its ``old`` is not in the file exactly once) or a
named test that does not exist is an error. The gate exits 0 only when every
selected mutant is caught.

Usage::

    python tools/mutants.py                     # the whole catalogue, 2 jobs
    python tools/mutants.py --area sources      # one catalogue file (tests/mutants/sources.py)
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
import json
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
CATALOGUE = ROOT / "tests" / "mutants"
_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", "*.egg-info", "out", "bench-out"
)


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
    failing: str = ""  # the test function whose failure caught it (``tests/x.py::test_y``), when known


def load_catalogue(areas: list[str] | None = None) -> list[Mutant]:
    """Every mutant of ``tests/mutants/*.py`` (or only those files named in ``areas``)."""
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


def _env(scratch: Path, write_bytecode: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(scratch) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant's .pyc must never outlive it (same size, same second)
    return env


def _pytest(scratch: Path, args: list[str], timeout: float, write_bytecode: bool = False) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    env = _env(scratch, write_bytecode)
    try:
        p = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, ""
    return p.returncode, p.stdout + p.stderr


#: the zygote: imports the heavy libraries once, then forks one child per pytest run (the child imports the
#: library and the tests from the scratch copy, so a mutant is always fresh); saves ~3 s of imports per mutant
_ZYGOTE_SOURCE = r"""
import json, os, signal, sys, time
import gc
import numpy, PIL.Image, torch, torchvision, hypothesis, pytest  # noqa: F401  (never shardkit or the tests)
gc.freeze()  # the imported heap is permanent: pytest's gc.collect() calls in a child walk only the child's objects
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        rc = 3
        try:
            os.setpgid(0, 0)
            fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            rc = int(pytest.main(req["args"]))
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            rc = 124
            break
        time.sleep(0.02)
    print(json.dumps({"rc": rc}), flush=True)
"""


class Zygote:
    """A process in ``scratch`` holding the heavy imports; :meth:`pytest` forks a fresh child per run."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE_SOURCE],
            cwd=scratch,
            env=_env(scratch),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def pytest(self, args: list[str], timeout: float) -> tuple[int, str]:
        out = self.scratch / ".mutant-run.log"
        cmd = ["-p", "no:cacheprovider", "-q", *args]
        self.proc.stdin.write(json.dumps({"args": cmd, "out": str(out), "timeout": timeout}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("mutants.py: the zygote process died; rerun with --no-zygote")
        return json.loads(line)["rc"], out.read_text(errors="replace") if out.exists() else ""

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=30)


#: the folders whose modules a run imports (the library, the tests and their helpers, the tools, the examples)
_COMPILED = ("shardkit", "tests", "tools", "examples")


def missing_tests(scratch: Path, mutants: list[Mutant]) -> list[str]:
    """Named tests that pytest cannot collect in the unmutated copy.

    The collection also writes the copy's byte code (pytest's rewritten test modules; ``compileall`` first
    compiles every module of :data:`_COMPILED`), which every later run reads instead of compiling again.
    """
    folders = [d for d in _COMPILED if (scratch / d).is_dir()]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *folders], cwd=scratch, env=_env(scratch, True), capture_output=True
    )
    wanted = sorted({t for m in mutants for t in m.tests})
    rc, out = _pytest(scratch, ["--collect-only", *wanted], 600, write_bytecode=True)
    if rc == 0:
        return []
    bad = [
        t
        for t in wanted
        if f"ERROR: not found: {scratch / t}" in out
        or f"not found: {t}" in out
        or f"ERROR: file or directory not found: {t.split('::')[0]}" in out
    ]
    return bad or [f"collection failed (exit {rc}): {out.strip().splitlines()[-1] if out.strip() else ''}"]


def _failing_function(out: str) -> str:
    """The test function (node id without parameters) of the first ``FAILED`` line of pytest's summary."""
    for line in out.splitlines():
        if line.startswith("FAILED "):
            return line[len("FAILED ") :].split(" - ", 1)[0].split("[", 1)[0].strip()
    return ""


def failing_unmutated(zygotes: list[Zygote], functions: list[str], extra: tuple[str, ...]) -> set[str]:
    """Of the test functions that caught mutants, those that also fail unmutated in a zygote's child.

    A test that fails there without any mutant (one that checks its process never imported torch, say)
    would count every mutant as caught: the mutants it caught are run again in new processes.
    """
    if not functions:
        return set()
    parts = [functions[j :: len(zygotes)] for j in range(len(zygotes))]
    with cf.ThreadPoolExecutor(len(zygotes)) as pool:
        results = list(
            pool.map(lambda zp: zp[0].pytest([*extra, *zp[1]], 1800) if zp[1] else (0, ""), zip(zygotes, parts))
        )
    bad: set[str] = set()
    for part, (rc, out) in zip(parts, results):
        if rc not in (0, 1):
            return set(functions)  # could not tell: verify them all in new processes
        bad |= {
            f
            for f in part
            if any(ln.startswith(f"FAILED {f}") or ln.startswith(f"ERROR {f}") for ln in out.splitlines())
        }
    return bad


def _last_failure(out: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return (lines[0] if lines else (out.strip().splitlines() or [""])[-1])[:200]


_EXPLICIT_PLUGIN = "_mutants_explicit_only"
_EXPLICIT_SOURCE = """from hypothesis import Phase, settings

settings.register_profile("mutants-explicit-only", phases=[Phase.explicit])
settings.load_profile("mutants-explicit-only")
"""


def run_one(
    scratch: Path, m: Mutant, timeout: float, extra: tuple[str, ...] = (), zygote: Zygote | None = None
) -> Outcome:
    path = scratch / m.file
    original = path.read_text()
    t0 = time.monotonic()
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink()  # its byte code (the interpreter's, or pytest's rewrite of a test module) is the unmutated file's
    path.write_text(original.replace(m.old, m.new, 1))
    try:
        args = [*extra, "-x", *m.tests]
        rc, out = zygote.pytest(args, timeout) if zygote is not None else _pytest(scratch, args, timeout)
    finally:
        path.write_text(original)
    dt = time.monotonic() - t0
    if rc == 1:
        return Outcome(m, "caught", _last_failure(out), dt, _failing_function(out))
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
    return "\n".join(
        f"  {a:14} {sum(o.verdict == 'caught' for o in os_)}/{len(os_)} caught, {sum(o.seconds for o in os_):.0f} s of mutant runs"
        for a, os_ in sorted(areas.items())
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--area", action="append", help="only this catalogue file (stem); repeatable")
    ap.add_argument("--id", action="append", help="only this mutant; repeatable")
    ap.add_argument("--jobs", type=int, default=2, help="scratch copies run at once (default 2)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant before it counts as caught (hang)")
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    ap.add_argument("--markdown", action="store_true", help="print a table per Guarantees row after the runs")
    ap.add_argument(
        "--explicit-only",
        action="store_true",
        help="run hypothesis tests on their @example cases only (is each mutant caught deterministically?)",
    )
    ap.add_argument("--no-zygote", action="store_true", help="start every pytest run as a new process (slower)")
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
        first = Path(tmp) / "copy0"
        shutil.copytree(ROOT, first, ignore=_IGNORE, symlinks=True)
        if args.explicit_only:
            (first / f"{_EXPLICIT_PLUGIN}.py").write_text(_EXPLICIT_SOURCE)
        extra = ("-p", _EXPLICIT_PLUGIN) if args.explicit_only else ()
        missing = missing_tests(first, mutants)
        if missing:
            print("named tests that do not exist:\n  " + "\n  ".join(missing), file=sys.stderr)
            return 2
        scratches = [first]
        for j in range(1, max(1, min(args.jobs, len(mutants)))):
            s = Path(tmp) / f"copy{j}"  # a copy of the compiled copy (copytree keeps the mtimes the byte code names)
            shutil.copytree(first, s, symlinks=True)
            scratches.append(s)
        zygotes = [Zygote(s) if not args.no_zygote else None for s in scratches]
        free: queue.Queue[tuple[Path, Zygote | None]] = queue.Queue()
        for pair in zip(scratches, zygotes):
            free.put(pair)

        def task(m: Mutant, fresh: bool = False) -> Outcome:
            s, z = free.get()
            try:
                return run_one(s, m, args.timeout, extra, None if fresh else z)
            finally:
                free.put((s, z))

        outcomes: list[Outcome] = []
        try:
            with cf.ThreadPoolExecutor(len(scratches)) as pool:
                for o in pool.map(task, mutants):
                    outcomes.append(o)
                    print(f"{o.verdict:8} {o.seconds:6.1f}s  {o.mutant.id}: {o.detail}", flush=True)
                if not args.no_zygote:  # a catch is real only if its test passes unmutated in the zygote
                    suspects = failing_unmutated(zygotes, sorted({o.failing for o in outcomes if o.failing}), extra)  # type: ignore[arg-type]
                    again = [i for i, o in enumerate(outcomes) if o.failing in suspects]
                    if again:
                        print(
                            f"tests failing in the zygote unmutated: {sorted(suspects)}; {len(again)} mutants again in new processes",
                            flush=True,
                        )
                    for i, o in zip(again, pool.map(lambda i: task(outcomes[i].mutant, True), again)):
                        outcomes[i] = o
                        print(f"{o.verdict:8} {o.seconds:6.1f}s  {o.mutant.id} (new process): {o.detail}", flush=True)
        finally:
            for z in zygotes:
                if z is not None:
                    z.close()

    caught = sum(o.verdict == "caught" for o in outcomes)
    print(f"\n{caught}/{len(outcomes)} mutants caught in {time.monotonic() - t_start:.0f} s")
    print(area_summary(outcomes))
    if args.markdown:
        print("\n" + markdown(outcomes))
    left = [o for o in outcomes if o.verdict != "caught"]
    for o in left:
        print(
            f"NOT CAUGHT ({o.verdict}): {o.mutant.id} [{o.mutant.file}] row {o.mutant.row!r}; tests: {' '.join(o.mutant.tests)}",
            file=sys.stderr,
        )
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
