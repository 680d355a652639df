"""Optional packages: an import that fails names the extra that installs it.

The core needs only SQLAlchemy, pydantic, click and cronsim; the web parts, the
framework integrations, the drivers and the instrumentation come with extras
(``pip install 'solid-objects[web]'``). A module that needs one imports it inside
``with requires_extra("web", "solid_objects.web.realtime"):``, so a user who
lacks it reads which extra to install instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


def install_hint(extra: str) -> str:
    """The two ways to install ``extra``: from the package index, from a checkout."""
    return (
        f"pip install 'solid-objects[{extra}]' (from a checkout of the repository: "
        f"pip install -e '.[{extra}]')"
    )


class MissingExtra(ModuleNotFoundError):
    """A package an extra brings is not installed; the message names the extra.

    A ``ModuleNotFoundError`` (``name`` is the missing module), so code that
    catches that keeps working.
    """

    def __init__(self, what: str, extra: str, missing: str | None) -> None:
        self.extra = extra
        package = repr(missing) if missing else "a package"
        super().__init__(
            f"{what} needs {package}, which is not installed in this environment "
            f"({sys.executable}); the {extra!r} extra brings it: {install_hint(extra)}",
            name=missing,
        )


@contextmanager
def requires_extra(extra: str, what: str) -> Iterator[None]:
    """Imports in this block come with ``extra``; one that is missing raises `MissingExtra`."""
    try:
        yield
    except MissingExtra:
        raise
    except ModuleNotFoundError as exc:
        raise MissingExtra(what, extra, exc.name) from exc
