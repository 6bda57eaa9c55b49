"""mkdocs hook: render the Sphinx roles the docstrings use (:class:`X`, :func:`~a.b.f`) as plain code.

mkdocstrings (google style) leaves ``:class:`X``` as the text ``:class:`` followed by ``X`` in code; this drops the role
and, as Sphinx does, shortens a ``~``-prefixed dotted name to its last part.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const):(<code>)(~?)([^<]*)(</code>)")


def _sub(m: re.Match[str]) -> str:
    name = m.group(3)
    if m.group(2):
        name = name.rsplit(".", 1)[-1]
    return f"{m.group(1)}{name}{m.group(4)}"


def on_page_content(html: str, **kwargs: object) -> str:
    return _ROLE.sub(_sub, html)
