"""Where the checkout is: the repository root, for tests that run its examples, tools and CLI as subprocesses."""

from __future__ import annotations

import os

#: the repository root (this file is ``tests/support/repo.py``)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
