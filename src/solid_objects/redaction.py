"""Credentials out of every URL the library shows or logs.

The drivers accept a password in more places than the URL's userinfo: libpq
and psycopg take ``?password=`` and ``?sslpassword=``, PyMySQL ``?passwd=``,
Redis ``?password=``; an application may put a token in any query parameter.
SQLAlchemy's ``render_as_string(hide_password=True)`` masks only the userinfo,
so doctor output, the health endpoint, CLI errors and configuration errors
all go through :func:`redact_url` instead: one function, one list of secret
parameter names.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from sqlalchemy.engine import URL

#: What replaces a secret.
MASK = "***"

#: Query parameter names that carry a secret (matched case-insensitively, anywhere in the
#: name, so ``sslpassword``, ``ssl_key_password``, ``api_token``, ``client_secret`` match).
_SECRET_PARAMETER = re.compile(r"pass|pwd|secret|token|credential|auth|apikey|api_key", re.I)


def is_secret_parameter(name: str) -> bool:
    """True when a URL query parameter called ``name`` may carry a credential."""
    return bool(_SECRET_PARAMETER.search(name))


def redact_url(url: str | URL | None) -> str:
    """``url`` as text with its userinfo password and every secret query value masked.

    Accepts a SQLAlchemy :class:`URL` or any ``scheme://`` string (database, Redis);
    text that does not parse as a URL is masked entirely rather than shown.
    """
    if url is None:
        return "-"
    text = url.render_as_string(hide_password=False) if isinstance(url, URL) else str(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        return MASK
    if not parts.scheme or "://" not in text:
        return MASK if ("@" in text or "=" in text) else text
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}{':' + MASK if colon else ''}@{hosts}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, MASK if is_secret_parameter(k) else v) for k, v in pairs],
            safe="*/:,",
            quote_via=quote,
        )
    # Rebuilt by hand: urlunsplit drops the empty authority of sqlite:////abs/path.
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{MASK}" if parts.fragment else "")
    )
