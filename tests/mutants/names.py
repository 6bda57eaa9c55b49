"""Mutants of one name per thing (area "names"): a second name served for a module or an object, or a
``DeprecationWarning`` on import, must fail ``tests/test_public_names.py``; a diary word in a test must fail
``tests/test_no_diary.py`` (the tests are scanned too)."""

ROW_ONE_NAME = (
    "One name per thing: every public module imports without a DeprecationWarning of shardkit's own, and a module "
    "path or a name that is not shardkit's raises ModuleNotFoundError, ImportError or AttributeError"
)
ROW_NO_DIARY = (
    "The product holds no diary: no work-log words (issue or session numbers, references to notes) in the package, "
    "the docs, the examples, the tools or the tests"
)

T = "tests/test_public_names.py::"
IMPORTS = T + "test_every_public_module_imports_without_a_deprecation_warning_of_shardkits_own"
PATHS = T + "test_a_path_that_is_not_a_module_of_shardkit_does_not_import"
NAMES = T + "test_a_name_that_is_not_shardkits_is_neither_an_attribute_nor_importable"

MUTANTS = [
    {
        "id": "names-renamed-config-served-again",
        "row": ROW_ONE_NAME,
        "file": "shardkit/convert/options.py",
        "old": "        return all(s.manifest is not None for s in self.splits if s.written)\n",
        "new": "        return all(s.manifest is not None for s in self.splits if s.written)\n\n\n"
        + "Convert"
        + "Options = ConvertConfig\n",
        "tests": [NAMES],
    },
    {
        "id": "names-module-path-served-again",
        "row": ROW_ONE_NAME,
        "file": "shardkit/__init__.py",
        "old": "from shardkit.errors import ConvertError, DataError, ManifestError, ShardkitError, StorageError\n",
        "new": "from shardkit.errors import ConvertError, DataError, ManifestError, ShardkitError, StorageError\n"
        "import sys as _sys\nimport shardkit.private_apis as _private_apis\n"
        '_sys.modules["shardkit.' + 'compat"] = _private_apis\n',
        "tests": [PATHS],
    },
    {
        "id": "names-import-warns-from-the-module",  # the warning's file is the package's
        "row": ROW_ONE_NAME,
        "file": "shardkit/demo/spec.py",
        "old": "from dataclasses import dataclass, field\n",
        "new": "import warnings\nfrom dataclasses import dataclass, field\n"
        'warnings.warn("Demo" "Options is now DemoConfig", DeprecationWarning, stacklevel=1)\n',
        "tests": [IMPORTS],
    },
    {
        "id": "names-import-warns-for-the-importer",  # the warning's file is the importer's; its text names shardkit
        "row": ROW_ONE_NAME,
        "file": "shardkit/demo/spec.py",
        "old": "from dataclasses import dataclass, field\n",
        "new": "import warnings\nfrom dataclasses import dataclass, field\n"
        'warnings.warn("shardkit.demo.spec moved", DeprecationWarning, stacklevel=2)\n',
        "tests": [IMPORTS],
    },
    {
        "id": "diary-issue-number-in-a-test",
        "row": ROW_NO_DIARY,
        "file": "tests/loader/test_len.py",
        "old": "describe the pass the next ``iter()`` gives.\n",
        "new": "describe the pass the next ``iter()`` gives (" + "issue" + " 21).\n",
        "tests": ["tests/test_no_diary.py::test_the_product_holds_no_diary_words"],
    },
]
