"""Every ```python block in README.md and docs/*.md runs, as written.

The convention, for whoever writes the docs:

- A block fenced as ```` ```python ```` runs. The runnable blocks of one page run in
  order, in one namespace (like a session going down the page), in a fresh temporary
  folder that is the working directory, so ``Runtime("sqlite:///app.db")`` makes its
  file there. Whatever runtimes the page leaves open are closed afterwards.
- A block whose first line is a file name comment, ``# myapp/actors.py`` or
  ``# test_cart.py``, is a file: it is written to that path in the folder (which is on
  ``sys.path``) instead of run, so later blocks can import it. Files named
  ``test_*.py`` then run with pytest in a subprocess (the bundled plugin loaded, as in
  an application's project), twice in the same folder, and every test in them must
  pass both times (a reader runs ``pytest`` more than once).
- A block fenced as ```` ```ini ```` whose first line is a file name comment,
  ``# pytest.ini``, is written to that path too (configuration a page's tests need,
  such as pytest-django's ``DJANGO_SETTINGS_MODULE``); other ``ini`` blocks are not run.
- A block fenced as ```` ```python no-run ```` is an illustrative fragment (it names a
  server that is not there, an application object like ``request``, or runs forever):
  it is compiled, so it is valid Python, but not run. Mark a block ``no-run`` only when
  it cannot run on its own; anything a reader is told to copy and run must run here.

Other languages (bash, sql, yaml, ...) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from solid_objects import AsyncRuntime, Runtime

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAGS = {"no-run"}
FILE_COMMENT = re.compile(r"#\s*([\w./-]+\.py)\s*$")
CONFIG_COMMENT = re.compile(r"#\s*([\w./-]+\.(?:ini|cfg))\s*$")


@dataclass
class Block:
    page: Path
    line: int  # the line of the opening fence
    flags: set[str]
    code: str
    language: str = "python"

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def file(self) -> str | None:
        """The path a file block names on its first line, else None."""
        first = self.code.split("\n", 1)[0]
        pattern = FILE_COMMENT if self.language == "python" else CONFIG_COMMENT
        match = pattern.fullmatch(first.strip())
        return match.group(1) if match else None


def python_blocks(page: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        fence = lines[index]
        if fence.startswith("```") and fence[3:].split()[:1] in (["python"], ["py"]):
            start = index
            body: list[str] = []
            index += 1
            while index < len(lines) and not lines[index].startswith("```"):
                body.append(lines[index])
                index += 1
            assert index < len(lines), f"{page.name}:{start + 1}: unclosed ```python block"
            blocks.append(Block(page, start + 1, set(fence[3:].split()[1:]), "\n".join(body)))
        index += 1
    return blocks


def config_files(page: Path) -> list[Block]:
    """The ```ini blocks of a page that name a file on their first line."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    for index, fence in enumerate(lines):
        if fence.strip() == "```ini":
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            block = Block(page, index + 1, set(), "\n".join(lines[index + 1 : end]), "ini")
            if block.file is not None:
                found.append(block)
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_python_block_of_the_page_runs(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = python_blocks(page)
    for block in blocks:
        unknown = block.flags - FLAGS
        assert not unknown, f"{block.where}: unknown flags {unknown} (known: {FLAGS})"
        compile(block.code, block.where, "exec")
    runnable = [b for b in blocks if "no-run" not in b.flags]
    if not runnable:
        return
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for config in config_files(page):
        assert config.file is not None
        (tmp_path / config.file).write_text(config.code + "\n", encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    tests: list[str] = []
    try:
        for block in runnable:
            if block.file is not None:
                target = tmp_path / block.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.code + "\n", encoding="utf-8")
                if Path(block.file).name.startswith("test_"):
                    tests.append(block.file)
                continue
            try:
                exec(compile(block.code, block.where, "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"{block.where} raised {type(exc).__name__}: {exc}") from exc
    finally:
        for value in namespace.values():
            if isinstance(value, Runtime | AsyncRuntime):
                (value.sync if isinstance(value, AsyncRuntime) else value).close()
        for name in [m for m in sys.modules if m.split(".")[0] in _packages(tmp_path)]:
            del sys.modules[name]
    # Twice, in the same folder: a test that leaves state behind for the next run (a
    # development database, a test database kept between runs) fails the second time.
    for run in ("first", "second"):
        if not tests:
            break
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (
            f"{page.name}: {tests} failed on the {run} run:\n{done.stdout}\n{done.stderr}"
        )


def _packages(folder: Path) -> set[str]:
    """The top-level modules the page's file blocks wrote (forgotten after the page)."""
    return {p.stem for p in folder.iterdir() if p.suffix == ".py" or p.is_dir()}


def test_the_convention_finds_fences_flags_and_file_blocks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\nx = 1\n```\n```python no-run\nrequest.user\n```\n"
        "```bash\nls\n```\n```python\n# myapp/actors.py\nclass A: ...\n```\n",
        encoding="utf-8",
    )
    blocks = python_blocks(page)
    assert [(b.line, b.flags, b.file) for b in blocks] == [
        (2, set(), None),
        (5, {"no-run"}, None),
        (11, set(), "myapp/actors.py"),
    ]
