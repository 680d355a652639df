"""The doctor's check of the authorization policies: which kinds of request are
allowed by default, and what a policy answers when asked."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from ..admin.policy import Action, deny_all
from ..authorization import (
    KINDS,
    TRUSTED_BY_DEFAULT,
    AuthorizationRequest,
    answer,
    option_name,
)
from .processes import SolidObjectsDoctorProbe
from .report import Check

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("solid_objects.doctor")


def check_authorization(runtime: Runtime, checks: list[Check]) -> None:
    """Which policies are configured, and whether one lets in a caller who is nobody.

    Each configured policy is asked once about an anonymous caller (no context, an
    unknown principal) of the doctor's probe actor: allowing it means the surface is
    open to everyone who can reach it.
    """
    parts: list[str] = []
    open_to_all: list[str] = []
    for kind in KINDS:
        policy = getattr(runtime.options, option_name(kind))
        if policy is None:
            default = "trusted" if kind in TRUSTED_BY_DEFAULT else "denied"
            parts.append(f"{kind}: {default} (no policy)")
            continue
        anonymous = AuthorizationRequest(
            kind, None, SolidObjectsDoctorProbe.__name__, "doctor-anonymous", None
        )
        parts.append(f"{kind}: {_policy_name(policy)}")
        if _allows(kind, partial(answer, policy, anonymous)):
            open_to_all.append(option_name(kind))
    admin = runtime.admin.policy
    if admin is deny_all:
        parts.append("administration: denied (no policy)")
    else:
        parts.append(f"administration: {_policy_name(admin)}")
        stranger = "doctor:anonymous-probe"
        if any(
            _allows("administration", partial(admin, Action(stranger, name)))
            for name in ("status", "actors.destroy")
        ):
            open_to_all.append("runtime.admin.set_policy")
    detail = "; ".join(parts)
    if open_to_all:
        checks.append(
            Check(
                "authorization",
                "warn",
                f"{detail}; open to everyone: {', '.join(open_to_all)} allow(s) a caller "
                "with no authorization context (or an unknown principal)",
                "make each policy allow only callers it recognizes (see docs/security.md)",
            )
        )
    else:
        checks.append(Check("authorization", "ok", detail))


def _allows(kind: str, ask: Callable[[], object]) -> bool:
    try:
        return ask() is True
    except Exception as exc:
        log.debug("the %s policy raised %r for the doctor's anonymous probe", kind, exc)
        return False


def _policy_name(policy: object) -> str:
    target = getattr(policy, "policy", policy)  # an AsyncPolicy names its function
    name = getattr(target, "__qualname__", None)
    return f"policy {name}" if isinstance(name, str) else f"policy {target!r}"
