"""One name per thing: every public module imports without a warning of shardkit's own, and no second name serves it.

:func:`test_every_public_module_imports_without_a_deprecation_warning_of_shardkits_own` imports every module of the
package (those whose dotted path has no ``_``-prefixed part) in a fresh interpreter, recording every warning, and
fails naming the module and the message for each ``DeprecationWarning``, ``PendingDeprecationWarning`` or
``FutureWarning`` raised from a file of the package or naming shardkit (a third party's warning about its own code is
not shardkit's). The other tests ask for names that are not shardkit's (:data:`NOT_MODULES`, :data:`NOT_NAMES`) and
expect the import system's usual answer: ``ModuleNotFoundError`` (in a fresh interpreter that sees only this
checkout), ``ImportError``, ``AttributeError``.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: dotted paths that are not modules of shardkit (each names what its code is part of)
NOT_MODULES: tuple[str, ...] = (
    "shardkit.compat",  # shardkit.private_apis
    "shardkit.cropresize",  # shardkit.loader.decode.cropresize
    "shardkit.demo_options",  # shardkit.demo.spec
    "shardkit.devicedecode",  # shardkit.loader.decode.device
    "shardkit.doctor",  # the loader's doctor
    "shardkit.inspect",  # shardkit.ops.verify
    "shardkit.jpegbackend",  # shardkit.loader.decode.backend
    "shardkit.lightning",  # shardkit.integrations.lightning
    "shardkit.manifest",  # shardkit.format.manifest
    "shardkit.mix",  # shardkit.plan
    "shardkit.position",  # shardkit.plan.position
    "shardkit.prefetch",  # shardkit.loader.prefetch
    "shardkit.sampledata",  # shardkit.demo.sampledata
    "shardkit.threads",  # shardkit.private_apis
    "shardkit.world",  # shardkit.plan.world
)

#: (module, name) pairs that are not attributes of the module (each names the object's one name)
NOT_NAMES: tuple[tuple[str, str], ...] = (
    ("shardkit.convert", "ConvertOptions"),  # ConvertConfig
    ("shardkit.convert", "ImageOptions"),  # EncodeConfig
    ("shardkit.convert", "SourceOptions"),  # ScanConfig
    ("shardkit.convert.options", "ConvertOptions"),
    ("shardkit.convert.options", "SourceOptions"),
    ("shardkit.convert.imageproc", "ImageOptions"),
    ("shardkit.convert.scan.source", "Source"),  # ScannedSource (shardkit.Source is a mixture member)
    ("shardkit.demo.spec", "DemoOptions"),  # DemoConfig
    ("shardkit.demo.run", "DemoOptions"),
    ("shardkit.storage.opener", "SourceConfig"),  # StorageConfig
    ("shardkit.loader.config", "SourceConfig"),
    ("shardkit.loader", "SourceConfig"),
    ("shardkit.private_apis", "alias_moved_modules"),
    ("shardkit.private_apis", "renamed"),
)

#: run in a fresh interpreter: try to import each path in argv, print ``{path: "absent" | what happened}`` as JSON
IMPORT_PATHS = r"""
import importlib, json, sys
outcome = {}
for path in sys.argv[1:]:
    try:
        importlib.import_module(path)
        outcome[path] = "imported"
    except ModuleNotFoundError as e:
        outcome[path] = "absent" if e.name == path else f"ModuleNotFoundError: {e}"
    except Exception as e:
        outcome[path] = f"{type(e).__name__}: {e}"
print(json.dumps(outcome))
"""

#: run in a fresh interpreter: import every public module, print the deprecation-like warnings as JSON lines
IMPORT_ALL = r"""
import importlib, json, os, pkgutil, sys, warnings
import shardkit
home = os.path.dirname(os.path.abspath(shardkit.__file__))
kinds = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
modules = sorted(m.name for m in pkgutil.walk_packages(shardkit.__path__, "shardkit.")
                 if not any(part.startswith("_") for part in m.name.split(".")))
for name in modules:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.import_module(name)
    for w in caught:
        own = os.path.abspath(w.filename).startswith(home + os.sep) or "shardkit" in str(w.message)
        if issubclass(w.category, kinds) and own:
            print(json.dumps({"module": name, "warning": f"{w.category.__name__}: {w.message}"}))
print(json.dumps({"imported": len(modules)}))
"""


def test_every_public_module_imports_without_a_deprecation_warning_of_shardkits_own() -> None:
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    warned = [f"{d['module']}: {d['warning']}" for d in lines if "warning" in d]
    assert not warned, "importing shardkit's modules warned:\n" + "\n".join(warned)
    assert lines[-1]["imported"] > 100, lines[-1]  # the walk found the package's modules


def test_a_path_that_is_not_a_module_of_shardkit_does_not_import() -> None:
    # -S: without site-packages, so that an editable install of another checkout cannot answer for this one
    out = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_PATHS, *NOT_MODULES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    outcome = json.loads(out.stdout)
    assert outcome == {path: "absent" for path in NOT_MODULES}, {p: o for p, o in outcome.items() if o != "absent"}


@pytest.mark.parametrize(("module", "name"), NOT_NAMES)
def test_a_name_that_is_not_shardkits_is_neither_an_attribute_nor_importable(module: str, name: str) -> None:
    mod = importlib.import_module(module)
    with pytest.raises(AttributeError):
        getattr(mod, name)
    with pytest.raises(ImportError):
        exec(f"from {module} import {name}", {})
