"""The formatted traceback stored with a failed turn, effect attempt or commit.

A stored error says what failed (``KeyError('missing')``); its traceback says
where. It is kept with the message or effect row, so the CLI, the dashboard and
the admin API show it long after the log line scrolled away. Two bounds apply
before it is written: its size (:data:`LIMIT`, keeping the innermost frames,
where the exception was raised) and its secrets (credentials in URLs and
``password=...`` pairs are masked as :mod:`.redaction` masks them elsewhere).
"""

from __future__ import annotations

import re
import traceback

from .redaction import MASK, is_secret_parameter, redact_url

#: Longest traceback stored, in characters; longer ones lose their outermost frames.
LIMIT = 16 * 1024

#: A ``scheme://...`` URL up to whitespace or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
#: ``name=value`` or ``name: value`` (quoted or bare) where ``name`` may carry a secret.
_PAIR = re.compile(r"""([A-Za-z_][\w\-]*)(\s*[=:]\s*)('[^']*'|"[^"]*"|[^\s,;)&'"]+)""")


def redact_text(text: str) -> str:
    """``text`` with every URL's credentials and every secret-named value masked."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)

    def pair(m: re.Match[str]) -> str:
        name, sep, value = m.group(1), m.group(2), m.group(3)
        if not is_secret_parameter(name) or value == MASK or value.startswith("//"):
            return m.group(0)
        quote = value[0] if value[:1] in ("'", '"') else ""
        return f"{name}{sep}{quote}{MASK}{quote}"

    return _PAIR.sub(pair, text)


def format_traceback(exc: BaseException, *, limit: int = LIMIT) -> str | None:
    """The redacted, bounded traceback of ``exc``; None when it was never raised
    (an error built by the library to describe a refusal has no frames)."""
    if exc.__traceback__ is None and exc.__cause__ is None and exc.__context__ is None:
        return None
    text = redact_text("".join(traceback.format_exception(exc)))
    return bound(text, limit)


def bound(text: str, limit: int = LIMIT) -> str:
    """``text`` cut to ``limit`` characters by dropping whole lines after the first,
    so the innermost frames and the exception line survive."""
    if len(text) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    head = lines[0]
    kept: list[str] = []
    size = len(head) + 64
    for line in reversed(lines[1:]):
        if size + len(line) > limit:
            break
        kept.append(line)
        size += len(line)
    if not kept:  # one enormous exception line: keep its end
        return head + "  ...\n" + text[-(limit - len(head) - 6) :]
    omitted = len(lines) - 1 - len(kept)
    return head + f"  ... {omitted} lines omitted ...\n" + "".join(reversed(kept))
