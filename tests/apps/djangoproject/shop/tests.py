"""The Django tests ``manage.py test`` runs in tests/test_contrib_django.py."""

import contextlib
import threading

from django.db import connection, connections, transaction
from django.test import TestCase, TransactionTestCase
from sqlalchemy import text

from solid_objects.contrib.django import CallInsideAtomicBlock, ref, runtime, send_on_commit
from solid_objects.errors import ConfigurationError, InvalidArguments, MessageFailed, Rejected

from .actors import DjangoOrders, DjangoTally
from .models import Order


def seen_by_django(actor_id: str) -> int:
    """Messages for ``actor_id`` as Django's own connection (its transaction) sees them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM solid_messages WHERE actor_id = %s", [actor_id])
        return int(cursor.fetchone()[0])


def queued(actor_id: str) -> int:
    """Messages stored for the tally ``actor_id``, read through the runtime's engine."""
    with runtime().engine.connect() as db:
        return int(
            db.execute(
                text("SELECT count(*) FROM solid_messages WHERE actor_id = :id"), {"id": actor_id}
            ).scalar_one()
        )


class Boom(Exception):
    pass


class RuntimeOnTheTestDatabase(TestCase):
    def test_a_call_runs_on_the_test_database(self) -> None:
        assert str(runtime().engine.url.database) == str(connection.settings_dict["NAME"])
        assert ref(DjangoTally, "in-test").add(n=2) == 2
        assert queued("in-test") == 1


class SendOnCommit(TransactionTestCase):
    def test_a_rolled_back_atomic_sends_nothing(self) -> None:
        tally = ref(DjangoTally, "rolled-back")
        with contextlib.suppress(Boom), transaction.atomic():
            Order.objects.create(sku="tea")
            send_on_commit(tally.add, n=1)
            raise Boom
        assert Order.objects.count() == 0
        assert queued("rolled-back") == 0
        assert tally.add(n=0) == 0

    def test_a_committed_atomic_sends_once_after_the_commit(self) -> None:
        tally = ref(DjangoTally, "committed")
        with transaction.atomic():
            Order.objects.create(sku="tea")
            send_on_commit(tally.add, n=5)
            assert queued("committed") == 0
        assert Order.objects.count() == 1
        assert queued("committed") == 1
        assert tally.add(n=0) == 5


class OutboxOnDjangosConnection(TransactionTestCase):
    """``with_options(connection=connection).send()``: the message is in Django's transaction."""

    def test_a_rolled_back_atomic_leaves_no_message(self) -> None:
        tally = ref(DjangoTally, "outbox-rolled-back")
        with contextlib.suppress(Boom), transaction.atomic():
            Order.objects.create(sku="tea")
            tally.add.with_options(connection=connection).send(n=1)
            assert seen_by_django("outbox-rolled-back") == 1  # written in this transaction
            raise Boom
        assert Order.objects.count() == 0
        assert queued("outbox-rolled-back") == 0
        assert tally.add(n=0) == 0

    def test_a_committed_atomic_runs_the_message_exactly_once(self) -> None:
        tally = ref(DjangoTally, "outbox-committed")
        with transaction.atomic():
            Order.objects.create(sku="tea")
            sent = tally.add.with_options(connection=connection).send(n=5)
            # In Django's transaction, not yet committed: the runtime's connections
            # do not see it (send_on_commit would not have written it at all).
            assert seen_by_django("outbox-committed") == 1
            assert queued("outbox-committed") == 0
        assert Order.objects.count() == 1
        assert sent.wait(timeout=60) == 5
        assert tally.add(n=0) == 5  # ran once
        assert queued("outbox-committed") == 2

    def test_a_nested_atomic_rolled_back_alone_drops_only_its_message(self) -> None:
        tally = ref(DjangoTally, "outbox-nested")
        with transaction.atomic():
            tally.add.with_options(connection=connection).send(n=1)
            with contextlib.suppress(Boom), transaction.atomic():
                tally.add.with_options(connection=connection).send(n=10)
                raise Boom
        assert tally.add(n=0) == 1

    def test_outside_atomic_the_message_commits_at_once(self) -> None:
        tally = ref(DjangoTally, "outbox-autocommit")
        sent = tally.add.with_options(connection=connection).send(n=2)
        assert queued("outbox-autocommit") == 1
        assert sent.wait(timeout=60) == 2

    def test_another_threads_connection_is_refused(self) -> None:
        tally = ref(DjangoTally, "outbox-thread")
        refused: list[BaseException] = []

        def send_on_main_threads_connection() -> None:
            try:
                tally.add.with_options(connection=main).send(n=1)
            except BaseException as exc:
                refused.append(exc)

        main = connections["default"]  # this thread's wrapper
        worker = threading.Thread(target=send_on_main_threads_connection)
        worker.start()
        worker.join()
        assert isinstance(refused[0], ConfigurationError), refused
        with self.assertRaises(InvalidArguments):
            tally.add.with_options(connection="not a connection").send(n=1)
        assert queued("outbox-thread") == 0


class PlainRefsInsideAtomic(TransactionTestCase):
    """Without ``connection=``: inside atomic() a send joins Django's transaction and a
    call is refused; neither commits apart from the block."""

    def test_a_rolled_back_atomic_never_runs_a_plain_send(self) -> None:
        tally = ref(DjangoTally, "plain-rolled-back")
        with contextlib.suppress(Boom), transaction.atomic():
            Order.objects.create(sku="tea")
            tally.add.send(n=1)
            assert seen_by_django("plain-rolled-back") == 1  # written in this transaction
            raise Boom
        assert Order.objects.count() == 0
        assert queued("plain-rolled-back") == 0
        assert tally.add(n=0) == 0  # it never ran

    def test_a_committed_atomic_runs_a_plain_send_once(self) -> None:
        tally = ref(DjangoTally, "plain-committed")
        with transaction.atomic():
            Order.objects.create(sku="tea")
            sent = tally.add.send(n=5)
            assert queued("plain-committed") == 0  # not committed yet
        assert Order.objects.count() == 1
        assert sent.wait(timeout=60) == 5
        assert tally.add(n=0) == 5  # ran once
        assert queued("plain-committed") == 2

    def test_a_call_inside_atomic_is_refused_and_writes_nothing(self) -> None:
        tally = ref(DjangoTally, "plain-call")
        with transaction.atomic():
            Order.objects.create(sku="tea")
            with self.assertRaises(CallInsideAtomicBlock) as refused:
                tally.add(n=1)
            said = str(refused.exception)
            assert "with_options(connection=" in said and "send_on_commit" in said, said
            assert seen_by_django("plain-call") == 0
        assert Order.objects.count() == 1  # the block itself went on and committed
        assert queued("plain-call") == 0
        assert tally.add(n=0) == 0


class CommitActionsWriteModels(TransactionTestCase):
    """A commit action writes the model's table through ctx.connection, with the turn."""

    def test_the_row_commits_with_the_turn(self) -> None:
        assert ref(DjangoOrders, "o1").place(sku="tea") == 1
        assert list(Order.objects.values_list("sku", flat=True)) == ["tea"]

    def test_a_rejected_turn_leaves_no_row(self) -> None:
        with self.assertRaises(Rejected):
            ref(DjangoOrders, "o2").place(sku="")
        assert Order.objects.count() == 0

    def test_an_orm_write_from_actor_code_is_refused(self) -> None:
        with self.assertRaises(MessageFailed) as failed:
            ref(DjangoOrders, "o3").place_with_orm(sku="tea")
        assert "ApplicationWriteForbidden" in str(failed.exception), failed.exception
        assert Order.objects.count() == 0
