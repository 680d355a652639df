"""Who may do what: the one check every call, send, read and destroy passes.

The policies are the runtime's ``authorize_<kind>`` options. :class:`Access` asks them
before anything touches the database, and for a stored message asks with the *stored*
request, so holding a message id or an idempotency key is never enough to read it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn

from ..authorization import (
    TRUSTED_BY_DEFAULT,
    AuthorizationRequest,
    Kind,
    answer,
    option_name,
    unwrap,
)
from ..codec import decode_json
from ..definition import ActorDefinition, Operation
from ..errors import ConfigurationError, Unauthorized
from ..options import Options
from ..store.store import MessageRow

if TYPE_CHECKING:
    from ..ref import CallOptions

log = logging.getLogger("solid_objects.client")


class Access:
    """The runtime's authorization policies, asked the same way by every path."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def authorize(
        self,
        kind: Kind,
        context: Any,
        actor_type: str,
        actor_id: str,
        operation: str | None = None,
        arguments: str | None = None,
        *,
        message_id: str | None = None,
        shown: str | None = None,
    ) -> None:
        """The one check every call passes, before it touches the database.

        Raises Unauthorized unless the ``authorize_<kind>`` policy answers True (or
        none is configured and the kind is trusted by default). ``arguments`` is the
        call's encoded JSON, so the policy sees exactly what would be stored.
        ``shown`` names the target in the error instead of the request (a read of a
        stored message must not reveal whose it is).
        """
        policy = getattr(self.options, option_name(kind))
        context, untrusted = unwrap(context)
        if policy is None:
            if kind in TRUSTED_BY_DEFAULT and not untrusted:
                return
            reason = f"no {option_name(kind)} policy is configured, and the default denies"
            if untrusted:
                reason = (
                    f"no {option_name(kind)} policy is configured, and a ref built from "
                    f"request data is denied by default: configure Runtime({option_name(kind)}"
                    "=...) (docs/security.md), or opt in to allowing every caller with the "
                    "integration's allow_all_callers=True (Django: SOLID_OBJECTS"
                    "['ALLOW_ALL_CALLERS'])"
                )
        else:
            decoded = decode_json(arguments) if arguments is not None else None
            request = AuthorizationRequest(
                kind,
                context,
                actor_type,
                actor_id,
                operation,
                MappingProxyType(decoded if isinstance(decoded, dict) else {}),
                message_id,
            )
            try:
                verdict = answer(policy, request)
            except ConfigurationError:
                raise
            except Exception as exc:  # a policy that fails denies
                log.warning("the %s policy raised %r; denying", option_name(kind), exc)
                verdict = exc
            if verdict is True:
                return
            reason = f"the {option_name(kind)} policy does not allow it"
        target = shown or f"{actor_type}({actor_id!r})" + (f".{operation}" if operation else "")
        deny(kind, target, reason, actor_type)

    def authorized_arguments(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: CallOptions,
    ) -> str:
        """A message's arguments, encoded as they will be stored, once its policy allowed them."""
        arguments = operation.encode_arguments(args, kwargs, limit=self.options.max_payload_bytes)
        self.authorize(
            "message",
            options.authorization,
            definition.actor_type,
            actor_id,
            operation.name,
            arguments,
        )
        return arguments

    def may_read(self, row: MessageRow, context: Any, shown: str | None = None) -> None:
        """Refuse, revealing nothing, a caller the policy does not let read ``row``: it is
        asked with the *stored* request, so holding an id or a key is never enough."""
        self.authorize(
            "message",
            context,
            row.actor_type,
            row.actor_id,
            row.operation,
            row.arguments,
            message_id=row.id,
            shown=shown or f"the {row.actor_type} message under this idempotency key",
        )

    def ask_anyway(
        self,
        context: Any,
        actor_type: str,
        actor_id: str | None,
        operation: str | None,
        message_id: str,
    ) -> None:
        """Ask ``authorize_message`` about a message that is not there, and ignore the
        answer: a missing id costs the policy's time like a refused one."""
        policy = self.options.authorize_message
        if policy is None:
            return
        request = AuthorizationRequest(
            "message", unwrap(context)[0], actor_type, actor_id or "", operation, {}, message_id
        )
        try:
            answer(policy, request)
        except Exception:  # a policy that fails denies; the caller is refused anyway
            pass


def deny(kind: Kind, target: str, reason: str, actor_type: str) -> NoReturn:
    """Log the refusal (for the audit trail of denied calls) and raise Unauthorized."""
    log.info(
        "denied %s %s",
        kind,
        target,
        extra={"solid_action": "call_denied", "actor_type": actor_type},
    )
    raise Unauthorized(f"{kind} {target} is not allowed: {reason}")
