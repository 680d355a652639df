"""The call protocol, written once for both faces.

A face (``Ref``, ``AsyncRef``) builds a :class:`~solid_objects.ref.Call` and hands it
to the client; what a call does is decided here, in one place: a query reads, a
waiting call is refused inside a turn and inside an open application transaction,
needs workers somewhere, gets a deadline, is enqueued (or run as a direct turn), and
is settled from the outcome a local worker handed over or waited for. A send joins
the application transaction the caller is in, when the integration finds one, and
is refused inside a turn. The async face differs only in running the blocking steps
on an executor thread (``offload``) and waiting without blocking the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import UnknownOperation
from ..staging import refuse_inside_turn
from .messages import settle

if TYPE_CHECKING:
    from ..ref import Call, MessageReference
    from .client import Client

T = TypeVar("T")
#: Builds the reference a waiting call reads its message through.
Reference = Callable[["Call", str], "MessageReference[Any]"]
#: Runs a blocking function on an executor thread (the async face's ``kernel.offload``).
Offload = Callable[..., Awaitable[Any]]


def _query_arguments(call: Call) -> tuple[Any, ...]:
    return (call.definition, call.actor_id, call.operation, call.args, call.kwargs)


def _begin(client: Client, call: Call) -> float:
    """What a waiting call checks before it enqueues; returns its deadline.

    Checked on the caller's own thread (the async face's event loop), before any
    step moves to an executor thread, so a call from actor code is always seen.
    """
    what = f"calling {call.actor_type}.{call.operation.name}()"
    refuse_inside_turn(what)
    client.transactions.refuse(what)
    client.transactions.enlisted("call", what)
    client.require_workers()
    return client.deadline_for(call.options.timeout)  # the timeout bounds the whole call


def _start_arguments(call: Call, deadline: float) -> tuple[Any, ...]:
    return (*_query_arguments(call), call.options, deadline)


def run(client: Client, call: Call, reference: Reference) -> Any:
    """Run ``call`` and return its committed result (or raise its failure)."""
    if call.operation.is_query:
        return client.reads.query(
            *_query_arguments(call),
            context=call.options.authorization,
            stale_ok=call.options.stale_ok,
        )
    deadline = _begin(client, call)
    message = reference(call, client.start_call(*_start_arguments(call, deadline)))
    outcome = client.waiters.take(message.id)  # a direct turn: committed already
    if outcome is not None:
        return settle(message, outcome)
    return client.waiting.wait(message, call.options.timeout, deadline)


async def run_async(client: Client, call: Call, reference: Reference, offload: Offload) -> Any:
    """:func:`run` on the async face: the blocking steps go through ``offload``."""
    if call.operation.is_query:
        context = call.options.authorization
        stale_ok = call.options.stale_ok
        return await offload(
            client.reads.query, *_query_arguments(call), context=context, stale_ok=stale_ok
        )
    deadline = _begin(client, call)
    message = reference(call, await offload(client.start_call, *_start_arguments(call, deadline)))
    outcome = client.waiters.take(message.id)  # a direct turn: committed already
    if outcome is not None:
        return settle(message, outcome)
    return await client.waiting.wait_async(message, call.options.timeout, offload, deadline)


def prepare_send(client: Client, call: Call) -> Call:
    """What a send checks and joins before it enqueues: the same ``call``, with the
    application transaction the caller is in as its ``connection`` when the
    integration finds one (``Runtime.enlist_sends``)."""
    operation = call.operation
    what = f"sending {call.actor_type}.{operation.name}()"
    if operation.is_query:
        raise UnknownOperation(
            f"{operation.name} is a query: call it directly, it does not enter the mailbox"
        )
    if call.options.connection is None:
        found = client.transactions.enlisted("send", what)
        if found is not None:
            call = replace(call, options=replace(call.options, connection=found))
    refuse_inside_turn(what)
    if call.options.connection is None:  # with one, the send writes in that transaction
        client.transactions.refuse(what)
    return call


def send_arguments(call: Call) -> tuple[Any, ...]:
    """``Client.send``'s arguments for ``call``."""
    return (*_query_arguments(call), call.options)
