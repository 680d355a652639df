"""The documented install lines, in fresh virtualenvs, and what the docs run after them.

Each virtualenv gets exactly one install line, copied from the page that shows it:
README's "Try it" line (``pip install -e .`` in the checkout) and the lines of
``docs/frameworks.md`` (``pip install -e "../solid-objects[fastapi,testing]"`` from a
project folder next to the checkout). pip installs from the machine's package index
(a local mirror here), with dependencies, as a user's would. Then the commands the
docs give next run: ``uvicorn``, ``TestClient`` (httpx), ``flask``, ``django-admin``;
and where an extra is missing, the import says which extra to install.

One virtualenv per install line, shared by the module's tests; the module runs on one
xdist worker so the installs do not compete for the CPU.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fresh_virtualenvs")]

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ROOT / "docs" / "frameworks.md"


def install_lines(page: Path) -> list[str]:
    """The ``pip install`` lines of a page's bash blocks, comments stripped."""
    lines: list[str] = []
    in_bash = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_bash = line.strip() == "```bash"
            continue
        if in_bash and line.startswith("pip install"):
            lines.append(line.split("  #", 1)[0].strip())
    return lines


def documented(extras: str) -> str:
    """The frameworks page's install line for ``extras``, e.g. ``fastapi,testing``."""
    found = [line for line in install_lines(FRAMEWORKS) if f"[{extras}]" in line]
    assert found, f"docs/frameworks.md shows no install line with [{extras}]"
    return found[0]


class Virtualenv:
    def __init__(self, where: Path) -> None:
        self.where = where
        venv.create(where, with_pip=True, symlinks=True)
        self.bin = where / "bin"

    def run(
        self, command: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``command`` through a shell whose PATH starts with the virtualenv's bin, as
        after ``source .venv/bin/activate``."""
        environment = {
            key: value
            for key, value in os.environ.items()
            if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
        }
        environment.update(
            PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            VIRTUAL_ENV=str(self.where),
            **(env or {}),
        )
        return subprocess.run(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def command(self, name: str, cwd: Path) -> None:
        """``name`` is on PATH from this virtualenv (not from the machine's)."""
        found = self.run(f"command -v {name}", cwd)
        assert found.stdout.strip() == str(self.bin / name), (name, found.stdout, found.stderr)

    def install(self, line: str, cwd: Path) -> None:
        done = self.run(line, cwd)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder next to a checkout named ``solid-objects``, as the docs assume."""
    base = tmp_path_factory.mktemp("workspace")
    (base / "solid-objects").symlink_to(ROOT, target_is_directory=True)
    (base / "project").mkdir()
    return base / "project"


@pytest.fixture(scope="module")
def virtualenv(
    tmp_path_factory: pytest.TempPathFactory, project: Path
) -> Callable[[str], Virtualenv]:
    """One fresh virtualenv per documented install line, made on first use."""
    made: dict[str, Virtualenv] = {}

    def make(line: str) -> Virtualenv:
        if line not in made:
            env = Virtualenv(tmp_path_factory.mktemp("venv") / ".venv")
            # README's line runs in the checkout; the frameworks page's from the project.
            env.install(line, ROOT if line == README_LINE else project)
            made[line] = env
        return made[line]

    return make


#: README's "Try it": python3 -m venv .venv && .venv/bin/pip install -e . && ...
README_LINE = "pip install -e ."


def test_the_readme_shows_the_install_line_used_here() -> None:
    readme = (ROOT / "README.md").read_text()
    assert f".venv/bin/{README_LINE} &&" in readme


def test_the_readme_venv_runs_the_cli_and_names_the_extra_of_every_optional_import(
    virtualenv: Callable[[str], Virtualenv],
) -> None:
    env = virtualenv(README_LINE)
    version = env.run("solid-objects --version", ROOT)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "solid-objects, version 0.1.0"

    # python -m examples.live_counter, as the README says, with only the core installed
    counter = env.run("python -m examples.live_counter --port 0", ROOT, timeout=60)
    assert counter.returncode == 1
    last = counter.stderr.strip().splitlines()[-1]
    assert last.startswith("solid_objects.extras.MissingExtra: examples.live_counter needs "), last
    assert "'starlette', which is not installed" in last, last
    assert "the 'web' extra brings it: pip install 'solid-objects[web]'" in last, last
    assert "pip install -e '.[web]'" in last, last

    # every module that needs an extra, imported in the same bare environment
    modules = {
        "solid_objects.web": "web",
        "solid_objects.web.dashboard": "web",
        "solid_objects.web.realtime": "web",
        "solid_objects.web.local": "web",
        "solid_objects.contrib.starlette": "fastapi",
        "solid_objects.contrib.fastapi": "fastapi",
        "solid_objects.contrib.flask": "flask",
        "solid_objects.contrib.django": "django",
        "solid_objects.contrib.django.apps": "django",
        "solid_objects.observability.prometheus": "metrics",
        "solid_objects.observability.otel": "otel",
        "examples.live_counter": "web",
        "examples.fastapi_shop.app": "fastapi",
        "examples.fastapi_shop.__main__": "fastapi",
        "examples.flask_app": "flask",
        "examples.django_shop.__main__": "django",
    }
    script = (
        "import importlib, json, sys\n"
        "out = {}\n"
        f"for name in {sorted(modules)!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        out[name] = None\n"
        "    except ImportError as exc:\n"
        "        out[name] = [type(exc).__name__, getattr(exc, 'extra', None), str(exc)]\n"
        "    for loaded in [m for m in sys.modules if m.startswith(('examples', 'solid_objects.web', 'solid_objects.contrib', 'solid_objects.observability.'))]:\n"  # noqa: E501
        "        del sys.modules[loaded]\n"
        "print(json.dumps(out))\n"
    )
    done = env.run(f"python -c {shlex.quote(script)}", ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for name, extra in modules.items():
        assert found[name] is not None, f"{name} imported without its extra"
        kind, named, text = found[name]
        assert (kind, named) == ("MissingExtra", extra), (name, found[name])
        assert f"pip install 'solid-objects[{extra}]'" in text, (name, text)

    # the driver of a URL: the runtime names the extra too
    runtime = env.run(
        "python -c 'from solid_objects import Runtime; "
        'Runtime("postgresql+psycopg://u@127.0.0.1:1/x")\'',
        ROOT,
        timeout=60,
    )
    assert runtime.returncode == 1
    assert "install solid-objects[postgres]" in runtime.stderr.strip().splitlines()[-1]


def test_the_fastapi_line_brings_uvicorn_the_test_client_and_pytest(
    virtualenv: Callable[[str], Virtualenv], project: Path
) -> None:
    env = virtualenv(documented("fastapi,testing"))
    for command in ("uvicorn", "pytest"):
        env.command(command, project)
    served = env.run("uvicorn --help", project)
    assert served.returncode == 0, served.stderr
    assert "Usage: uvicorn [OPTIONS] APP" in served.stdout
    # a TestClient request through the library's lifespan, as the page's tests do
    (project / "tiny.py").write_text(
        "from fastapi import FastAPI\n"
        "from fastapi.testclient import TestClient\n"
        "from solid_objects import Actor, AsyncRuntime\n"
        "from solid_objects.contrib.fastapi import exception_handlers, lifespan\n\n"
        "class Tally(Actor):\n"
        "    n: int = 0\n\n"
        "    def add(self) -> int:\n"
        "        self.n += 1\n"
        "        return self.n\n\n"
        "runtime = AsyncRuntime('sqlite:///tiny.db')\n"
        "app = FastAPI(lifespan=lifespan(runtime), exception_handlers=exception_handlers())\n\n"
        "@app.post('/tally')\n"
        "async def tally() -> int:\n"
        "    return await runtime.ref(Tally, 't').add()\n\n"
        "def test_tally() -> None:\n"
        "    with TestClient(app) as client:\n"
        "        assert client.post('/tally').status_code == 200\n\n"
        "import anyio  # the async examples' plugin\n"
    )
    tested = env.run("pytest -q -p no:cacheprovider tiny.py", project, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "1 passed" in tested.stdout


def test_a_server_url_without_its_driver_names_the_extra_in_the_test_plugin(
    virtualenv: Callable[[str], Virtualenv], project: Path
) -> None:
    """``pytest --solid-db postgresql+psycopg://...`` where psycopg is not installed."""
    env = virtualenv(documented("fastapi,testing"))
    env.command("pytest", project)
    (project / "test_on_a_server.py").write_text(
        "def test_uses_the_server(solid_db_url: str) -> None:\n    assert solid_db_url\n"
    )
    done = env.run(
        "pytest -q -p no:cacheprovider test_on_a_server.py "
        "--solid-db postgresql+psycopg://postgres@127.0.0.1:5432/test",
        project,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ConfigurationError: no driver for 'postgresql+psycopg'" in done.stdout, done.stdout
    assert "install solid-objects[postgres]" in done.stdout, done.stdout
    assert not re.search(r"^E\s+ModuleNotFoundError", done.stdout, re.MULTILINE), done.stdout


def test_the_flask_line_brings_flask_and_pytest(
    virtualenv: Callable[[str], Virtualenv], project: Path
) -> None:
    env = virtualenv(documented("flask,testing"))
    for command in ("flask", "pytest"):
        env.command(command, project)
        done = env.run(f"{command} --help", project)
        assert done.returncode == 0, (command, done.stderr)


def test_the_django_line_brings_django_admin(
    virtualenv: Callable[[str], Virtualenv], project: Path
) -> None:
    line = documented("django")
    env = virtualenv(line)
    env.command("django-admin", project)
    done = env.run("django-admin --version", project)
    assert done.returncode == 0, done.stderr
    # both of the page's Django install lines are this one
    assert install_lines(FRAMEWORKS).count(line) == 2


def test_the_pages_show_no_install_line_that_fails_until_the_package_is_published() -> None:
    """Until it is on PyPI, ``pip install "solid-objects[...]"`` finds no distribution."""
    for page in (ROOT / "README.md", FRAMEWORKS):
        for line in install_lines(page):
            assert not re.fullmatch(r"pip install ['\"]?solid-objects\[[\w,]+\]['\"]?", line), (
                page.name,
                line,
            )
