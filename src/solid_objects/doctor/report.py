"""What the doctor and the health check report: one :class:`Check` per finding, with
the advice in the words of the command the user runs (``manage.py solid_objects`` on
Django)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    pass


Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    #: What to do about it (None when all is well).
    advice: str | None = None


@dataclass(frozen=True)
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings are allowed)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def status(self) -> Status:
        statuses = {c.status for c in self.checks}
        return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


#: The runtime the Django app builds from settings, which ``manage.py solid_objects``
#: supplies to every command (its management command's ``TARGET``).
DJANGO_APP = "solid_objects.contrib.django:runtime"


#: A command of the advice: ``solid-objects <command> {app}``.
_COMMAND = re.compile(r"solid-objects ((?:[a-z-]+ )*?)\{app\}")


def for_app(check: Check, app: str) -> Check:
    """The advice's commands as the user runs them: ``manage.py solid_objects`` on Django."""
    if check.advice is None:
        return check
    if app == DJANGO_APP:
        advice = _COMMAND.sub(
            lambda m: "python manage.py solid_objects " + m.group(1).rstrip(), check.advice
        )
    else:
        advice = check.advice.replace("{app}", app)
    return dataclasses.replace(check, advice=advice)
