"""The API reference (docs/reference/, built by MkDocs with mkdocstrings) covers the
public names, each with a docstring, and builds with warnings as errors.

The site is built the way a maintainer builds it (``mkdocs build --strict``), so a
broken cross-reference, a page missing from the navigation or an object that cannot
be found fails here. Its pages name the objects they document (``::: path``);
griffe, which renders them, is asked which public names have no docstring and which
names a public module exports that no page documents.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
#: The modules whose ``__all__`` is the public surface the reference must cover.
PUBLIC_MODULES = [
    "solid_objects",
    "solid_objects.contrib.fastapi",
    "solid_objects.contrib.starlette",
    "solid_objects.contrib.flask",
    "solid_objects.contrib.django",
    "solid_objects.contrib.idempotency",
    "solid_objects.contrib.access",
    "solid_objects.observability",
    "solid_objects.web",
]


#: ``::: path`` and its indented options, as the pages write them.
BLOCK = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.MULTILINE)


def documented_identifiers() -> list[tuple[str, bool]]:
    """Each object a page renders, and whether its members are rendered with it."""
    return [
        (block[1], "members: false" not in block[2])
        for page in sorted(REFERENCE.glob("*.md"))
        for block in BLOCK.finditer(page.read_text())
    ]


@pytest.fixture(scope="module")
def package() -> griffe.GriffeLoader:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "src")])
    loader.load("solid_objects")
    loader.resolve_aliases(implicit=True, external=False)
    return loader


def final(obj: griffe.Object | griffe.Alias) -> griffe.Object:
    return obj.final_target if obj.is_alias else obj  # type: ignore[return-value]


def walk(loader: griffe.GriffeLoader) -> tuple[set[str], list[str]]:
    """The paths the reference renders, and those of them without a docstring.

    A rendered module shows its public functions and classes; a rendered class its
    public methods (attributes are documented by their ``#:`` comments or not at all).
    """
    rendered: set[str] = set()
    undocumented: list[str] = []

    def visit(obj: griffe.Object, root: str, members: bool = True) -> None:
        if obj.path in rendered:
            return
        rendered.add(obj.path)
        if not obj.docstring and (obj.is_function or obj.is_class or obj.is_module):
            undocumented.append(obj.path)
        if members and (obj.is_class or (obj.is_module and obj.path == root)):
            for name, member in obj.members.items():
                if name.startswith("_"):
                    continue
                if member.is_alias and (obj.is_module and not member.is_exported):
                    continue  # an import, documented where it is defined
                target = final(member)
                if not target.is_attribute:
                    visit(target, root)

    for ident, members in documented_identifiers():
        target = final(loader.modules_collection.get_member(ident))
        visit(target, target.path, members)
    return rendered, undocumented


def test_every_rendered_public_name_has_a_docstring(package: griffe.GriffeLoader) -> None:
    _, undocumented = walk(package)
    assert undocumented == [], "public names without a docstring:\n" + "\n".join(undocumented)


def test_every_exported_name_is_in_the_reference(package: griffe.GriffeLoader) -> None:
    rendered, _ = walk(package)
    missing = []
    for module_path in PUBLIC_MODULES:
        module = final(package.modules_collection.get_member(module_path))
        for name in module.exports or []:
            if name.startswith("__"):
                continue
            member = final(module.members[str(name)])
            if member.is_module and str(name) in member.members:
                # ``from .dashboard import dashboard``: the function, not its module
                member = final(member.members[str(name)])
            if member.is_attribute:
                continue  # constants (OUTCOMES, EXIT_OK) are described in the guides
            if member.path not in rendered:
                missing.append(f"{module_path}.{name} ({member.path})")
    assert missing == [], "exported but in no page of docs/reference:\n" + "\n".join(missing)


def test_the_reference_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    page = (tmp_path / "reference" / "runtime" / "index.html").read_text()
    assert "solid_objects.runtime.Runtime" in page or "Runtime" in page
    assert "def install" in page or "install" in page
