"""Actor classes are served without a second list, and work that no
live process serves is named as such by the worker, ``doctor`` and ``CallTimeout``.

The README's first example, copied into ``app/actors.py`` as a user would (the
class and the ``runtime = Runtime(...)`` line, no ``register()``), is served by a
real ``solid-objects worker app.actors:runtime`` process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from solid_objects import Actor, Runtime
from solid_objects.errors import CallTimeout, ConfigurationError, UnknownActorType

from .conftest import FAST

ROOT = Path(__file__).resolve().parents[1]


def readme_example(url: str) -> str:
    """The README's first python block up to its ``runtime = Runtime(...)`` line, on ``url``."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    source = block.group(1).split("runtime.install()")[0]
    assert 'runtime = Runtime("sqlite:///app.db")' in source and "register" not in source
    return source.replace('Runtime("sqlite:///app.db")', f"Runtime({url!r})")


def wait_for(predicate: Callable[[], bool], what: str, process: subprocess.Popen[str]) -> None:
    for _ in range(3000):
        if predicate():
            return
        if process.poll() is not None:
            raise AssertionError(f"the worker exited with {process.returncode} before {what}")
        try:
            process.wait(0.01)
        except subprocess.TimeoutExpired:
            pass
    raise AssertionError(f"timed out waiting for {what}")


class WorkerProcess:
    def __init__(self, folder: Path, target: str) -> None:
        self.log = folder / f"{target.replace(':', '_')}.log"
        self._file = self.log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "solid_objects", "worker", target],
            cwd=folder,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])},
            stdout=self._file,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_for(lambda: "solid-objects worker" in self.output(), "its banner", self.process)

    def output(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._file.close()


@pytest.fixture
def app_folder(tmp_path: Path, db_url: str) -> Iterator[Path]:
    """``app/actors.py``: the README's example as a module; ``app/bare.py``: a runtime only."""
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "actors.py").write_text(readme_example(db_url))
    (package / "bare.py").write_text(
        f"from solid_objects import Runtime\nruntime = Runtime({db_url!r})\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "app" or m.startswith("app.")]:
            del sys.modules[name]


def test_the_readme_example_as_a_module_is_served_by_a_worker_process(
    app_folder: Path, db_url: str
) -> None:
    from app.actors import Counter  # type: ignore[import-not-found]

    caller = Runtime(db_url, workers=0, **FAST)
    caller.install()
    worker = WorkerProcess(app_folder, "app.actors:runtime")
    try:
        assert "'Counter'" in worker.output().split("types", 1)[1].splitlines()[0]
        c = caller.ref(Counter, "a")
        assert c.add(n=2) == 2
        assert c.add.send(n=3).wait(timeout=20) == 5
        assert "no live process serves" not in worker.output()
    finally:
        worker.stop()
        caller.close()


def test_work_no_live_process_serves_is_named_by_worker_doctor_and_call_timeout(
    app_folder: Path, db_url: str
) -> None:
    from app.actors import Counter

    caller = Runtime(db_url, workers=0, **FAST)
    caller.install()
    c = caller.ref(Counter, "a")
    c.add.send(n=1)  # waiting before any worker starts
    worker = WorkerProcess(app_folder, "app.bare:runtime")  # a module that defines no actor
    try:
        wait_for(
            lambda: "for actor type 'Counter'" in worker.output(), "the warning", worker.process
        )
        output = worker.output()
        assert "serves no actor types" in output
        assert (
            "1 message(s) for actor type 'Counter' are waiting and no live process serves" in output
        )
        with pytest.raises(
            CallTimeout, match="no live process serves actor type 'Counter'"
        ) as timeout:
            c.with_options(timeout=0.5).add(n=1)
        assert "is a `solid-objects worker` process running" not in str(timeout.value)
        (backlog,) = [
            check for check in caller.doctor(round_trip=False).checks if check.name == "backlog"
        ]
        assert backlog.status == "warn"
        assert "no live process serves Counter (2 waiting)" in backlog.detail
        assert backlog.advice is not None and "solid-objects worker" in backlog.advice
    finally:
        worker.stop()
        caller.close()


# --- in-process: which classes a runtime serves -------------------------------------------


def test_a_runtime_serves_every_actor_class_defined_in_its_process(
    make_runtime: Callable[..., Runtime],
) -> None:
    worker = make_runtime(workers=2)
    caller = make_runtime(workers=0)

    class LateArrival(Actor):  # defined after the worker runtime was built
        seen: int = 0

        def see(self) -> int:
            self.seen += 1
            return self.seen

    assert "LateArrival" in worker.registry.types()
    with worker:
        assert caller.ref(LateArrival, "x").see() == 1  # run by the worker, never registered there


class Restricted(Actor):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


class Hidden(Actor, auto_register=False):
    n: int = 0


def test_actors_restricts_the_types_and_register_still_adds(
    make_runtime: Callable[..., Runtime],
) -> None:
    only = make_runtime(workers=1, actors=[Restricted])
    assert only.registry.types() == ("Restricted",)
    only.register(Hidden)
    assert only.registry.types() == ("Hidden", "Restricted")
    anything = make_runtime(workers=1)
    assert "Restricted" in anything.registry.types()
    assert "Hidden" not in anything.registry.types()  # auto_register=False: only if registered
    with pytest.raises(UnknownActorType, match="actors="):
        only.registry.get("Unlisted")
    with pytest.raises(ConfigurationError, match="list of Actor classes"):
        make_runtime(actors=Restricted)
    with pytest.raises(ConfigurationError, match="Actor classes"):
        make_runtime(actors=["Restricted"])


def test_two_classes_with_one_actor_type_are_served_only_once_one_is_registered(
    make_runtime: Callable[..., Runtime],
) -> None:
    def define(value: int) -> type[Actor]:
        class Twin(Actor):
            actor_type = "TwinType"
            v: int = value

        Twin.__qualname__ = f"Twin{value}"  # two different classes, not a redefinition
        return Twin

    first, second = define(1), define(2)
    # Defined as two classes with one name each time the test runs: a redefinition of
    # the same module and qualified name replaces the earlier class instead.
    rt = make_runtime(workers=1)
    with pytest.raises(UnknownActorType, match="several classes"):
        rt.registry.get("TwinType")
    assert "TwinType" not in rt.registry.types()
    assert "TwinType" in rt.registry.ambiguous()
    rt.register(second)
    assert rt.registry.get("TwinType").cls is second
    assert first is not second
