"""MkDocs hooks for the documentation site (``mkdocs.yml``).

The guides mark code blocks for ``tests/test_docs.py`` with a flag after the language
(```` ```python no-run ````), which Python-Markdown's fenced code does not accept as an
info string; the flag is for the test runner, so the site drops it.
"""

from __future__ import annotations

import re
from typing import Any

_FLAGGED_FENCE = re.compile(r"^(\s*```[\w+-]+) [\w -]+$", re.MULTILINE)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Keep the language of a flagged fence, drop the test runner's flags."""
    return _FLAGGED_FENCE.sub(r"\1", markdown)
