"""The first hour: what a new user did, as a test each.

The user's project is a folder with ``myapp/actors.py`` (an actor class and a module
level runtime, as the README shows); the commands run as real ``python -m
solid_objects`` subprocesses from that folder (or from another one), with this
checkout's package on ``PYTHONPATH`` as an installed package would be.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import click
import pytest
from click.testing import CliRunner
from pydantic import Strict

from solid_objects import Actor, InvalidArguments, Runtime
from solid_objects.cli import main

from .conftest import count_rows

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

ACTORS = """
import json
import os

from solid_objects import Actor, Runtime
from solid_objects.admin import allow


class Counter(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


runtime = Runtime(os.environ["APP_DB"], workers=2)
runtime.register(Counter)
"""


def project(folder: Path, actors: str = ACTORS) -> Path:
    """A user's project folder holding ``myapp/actors.py``."""
    (folder / "myapp").mkdir(parents=True, exist_ok=True)
    (folder / "myapp" / "__init__.py").write_text("")
    (folder / "myapp" / "actors.py").write_text(actors)
    return folder


def solid_objects(
    *args: str, cwd: Path, url: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "APP_DB": url, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "solid_objects", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'app.db'}"


# --- 13.8: the worker checks the schema before it announces itself -------------------------


def test_worker_on_an_uninstalled_database_says_so_before_any_banner(
    db_url: str, tmp_path: Path
) -> None:
    folder = project(tmp_path / "proj")
    done = solid_objects("worker", "myapp.actors:runtime", cwd=folder, url=db_url)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: the Solid Objects tables are not installed"), done.stderr
    assert "threads" not in done.stderr and "types" not in done.stderr
    assert "solid-objects install myapp.actors:runtime" in done.stderr
    assert "--install" in done.stderr
    assert done.stdout == ""


# --- 13.9: a target that is not a runtime, a module not on the path --------------------------


def test_a_class_as_target_names_the_runtime_to_use_instead(
    tmp_path: Path, sqlite_url: str
) -> None:
    folder = project(tmp_path / "proj")
    done = solid_objects("status", "myapp.actors:Counter", cwd=folder, url=sqlite_url)
    assert done.returncode == 2, done.stderr
    assert "myapp.actors:Counter is the class Counter, not a Runtime" in done.stderr
    assert "the attribute that holds the runtime: myapp.actors:runtime" in done.stderr


def test_a_module_without_a_runtime_says_what_the_target_must_name(
    tmp_path: Path, sqlite_url: str
) -> None:
    folder = project(tmp_path / "proj", actors=ACTORS.replace("runtime", "rt"))
    done = solid_objects("status", "myapp.actors:runtime", cwd=folder, url=sqlite_url)
    assert done.returncode == 2, done.stderr
    assert "has no attribute 'runtime'" in done.stderr
    assert "myapp.actors:rt" in done.stderr


def test_from_another_folder_the_error_names_the_working_directory_and_pythonpath(
    tmp_path: Path, sqlite_url: str
) -> None:
    project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = solid_objects("status", "myapp.actors:runtime", cwd=elsewhere, url=sqlite_url)
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "No module named 'myapp'" in message
    assert f"working directory ({elsewhere})" in message
    assert f"PYTHONPATH ({ROOT / 'src'})" in message
    assert "run the command from your project's folder" in message


def test_a_missing_dependency_of_the_module_is_not_blamed_on_the_path(
    tmp_path: Path, sqlite_url: str
) -> None:
    folder = project(tmp_path / "proj", actors="import no_such_dependency_xyz\n" + ACTORS)
    done = solid_objects("status", "myapp.actors:runtime", cwd=folder, url=sqlite_url)
    assert done.returncode == 2, done.stderr
    assert "it imports 'no_such_dependency_xyz', which is not installed" in done.stderr
    assert "working directory" not in done.stderr


# --- 13.10: one exit code, one name for the target, help that reads as text ------------------


def deployment_exit_codes() -> dict[int, str]:
    """The exit-code table of docs/deployment.md: code -> meaning."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    return {int(code): meaning for code, meaning in re.findall(r"^\| (\d) \| (.+) \|$", text, re.M)}


def test_a_bad_worker_target_exits_with_the_code_deployment_md_gives(
    tmp_path: Path, sqlite_url: str
) -> None:
    folder = project(tmp_path / "proj")
    codes = deployment_exit_codes()
    (target_code,) = [code for code, meaning in codes.items() if "target that cannot be" in meaning]
    (schema_code,) = [code for code, meaning in codes.items() if "schema not installed" in meaning]
    for target in ("myapp.actors:Counter", "myapp.nothing:runtime", "myapp.actors"):
        done = solid_objects("worker", target, cwd=folder, url=sqlite_url)
        assert done.returncode == target_code, (target, done.returncode, done.stderr)
    done = solid_objects("worker", "myapp.actors:runtime", cwd=folder, url=sqlite_url)
    assert done.returncode == schema_code, done.stderr


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def test_every_help_reads_as_text_and_names_the_target_module_runtime() -> None:
    runner = CliRunner()
    for path in [(), *commands(main)]:
        result = runner.invoke(main, [*path, "--help"], prog_name="solid-objects")
        assert result.exit_code == 0, (path, result.output)
        text = result.output
        assert "`" not in text, (path, text)  # reST quoting is not rendered by click
        assert "TARGET" not in text, (path, text)
        command = main
        for name in path:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        # (the group's -A/--app option is named target too; its help says so in full)
        if not isinstance(command, click.Group) and any(p.name == "target" for p in command.params):
            assert "MODULE:RUNTIME" in text.split("\n\n", 1)[0], (path, text)


def test_dead_letters_retry_help_as_the_user_saw_it(tmp_path: Path, sqlite_url: str) -> None:
    done = solid_objects("dead-letters", "retry", "--help", cwd=tmp_path, url=sqlite_url)
    assert done.returncode == 0
    assert "``" not in done.stdout
    assert 'An id of "-" reads more ids from stdin' in " ".join(done.stdout.split())
    assert done.stdout.startswith(
        "Usage: python -m solid_objects dead-letters retry [OPTIONS] [MODULE:RUNTIME]"
    )


def test_the_log_level_default_is_one_of_the_choices_shown(tmp_path: Path, sqlite_url: str) -> None:
    done = solid_objects("--help", cwd=tmp_path, url=sqlite_url)
    text = " ".join(done.stdout.split())
    choices = re.search(r"--log-level \[([a-z|]+)\]", text)
    default = re.search(r"\[default: (\w+)\]", text)
    assert choices is not None and default is not None, text
    assert default.group(1) in choices.group(1).split("|")


# --- 13.11: arguments are strict, and the message says so -----------------------------------


class Counter(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value

    def add_text(self, n: Annotated[int, Strict(False)] = 1) -> int:
        self.value += n
        return self.value


def readme_says_about_add_n_3() -> str:
    """What the README says ``c.add(n="3")`` raises, up to its ``...``."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r'c\.add\(n="3"\)\s+# InvalidArguments: (.*?)\.\.\.\)', readme)
    assert found is not None, 'the README no longer shows c.add(n="3")'
    return found.group(1)


def test_a_string_for_an_int_is_refused_as_the_readme_says(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(workers=1) as runtime:
        c = runtime.ref(Counter, "a")
        with pytest.raises(InvalidArguments) as refused:
            c.add(n="3")  # type: ignore[arg-type]  # what the user did
        assert str(refused.value).startswith(readme_says_about_add_n_3())
        for wrong in (True, 3.0, [3]):
            with pytest.raises(InvalidArguments, match="checked strictly"):
                c.add(n=wrong)  # type: ignore[arg-type]
        assert count_rows(runtime, "messages") == 0  # refused before anything was written
        assert c.add(n=3) == 3
        assert c.add_text(n="4") == 7  # type: ignore[arg-type]  # the parameter opted out


# --- 13.15: the README's one line that lets the operator commands answer -------------------


def test_the_readmes_policy_line_makes_the_operator_commands_answer(tmp_path: Path) -> None:
    """The README's first example copied into a module: ``status`` is refused until the
    README's ``set_policy`` line is added to it, then answers."""
    from .test_docs import python_blocks

    blocks = [b.code for b in python_blocks(ROOT / "README.md") if "no-run" not in b.flags]
    example = next(code for code in blocks if "class Counter(Actor)" in code)
    (policy,) = [code for code in blocks if "admin.set_policy" in code]
    url = f"sqlite:///{tmp_path / 'unused.db'}"  # the example names its own app.db

    before = project(tmp_path / "before", actors=example)
    refused = solid_objects("status", "myapp.actors:runtime", cwd=before, url=url)
    assert refused.returncode == 1, refused.stderr
    assert "not authorized" in refused.stderr and "set_policy" in refused.stderr

    after = project(tmp_path / "after", actors=example + "\n\n" + policy + "\n")
    answered = solid_objects("status", "myapp.actors:runtime", "--json", cwd=after, url=url)
    assert answered.returncode == 0, answered.stderr
    (counter,) = json.loads(answered.stdout)["types"]
    assert (counter["actor_type"], counter["actors"]) == ("Counter", 1)
