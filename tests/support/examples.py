"""The repository's example scripts and tools, as the tests use them: run in a new process, or imported."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from types import ModuleType

from tests.support.repo import ROOT


def load_script(path: str, name: str) -> ModuleType:
    """The Python file at ``path`` imported as a module called ``name`` (its ``__main__`` block not run)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_script(
    script: str, args: Sequence[str], *, cwd: str, timeout: float, check: bool = True
) -> "subprocess.CompletedProcess[str]":
    """Run the Python file ``script`` with ``args`` in a new process (one OpenMP thread, unbuffered output, this
    checkout first on ``PYTHONPATH``) in the folder ``cwd``, its output captured; with ``check`` it must exit 0
    (the tails of its output in the failure)."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=path)
    proc = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc
