"""MySQL and MariaDB through PyMySQL."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, event, text

from ...errors import ConfigurationError
from .base import Dialect, Tx
from .pool import ping_idle_connections, rollback_unfinished_transactions


class MySQLDialect(Dialect):
    name = family = "mysql"
    # SYSDATE(6) is the time the function runs; NOW(6) is the statement's start.
    now_ms = "CAST(FLOOR(UNIX_TIMESTAMP(SYSDATE(6)) * 1000) AS SIGNED)"
    supports_skip_locked = True
    expiry_isolation_sql = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
    scope_sql = "SELECT CONCAT(@@hostname, ':', @@port, '/', DATABASE())"
    settings_sql = (
        ("version", "SELECT VERSION()"),
        ("time_zone", "SELECT @@SESSION.time_zone"),
        ("lock_wait_timeout", "SELECT @@SESSION.innodb_lock_wait_timeout"),
    )

    def settings(self, tx: Tx) -> dict[str, str]:
        # MariaDB before 11.1 names it tx_isolation, MySQL 8 transaction_isolation.
        found = super().settings(tx)
        for _name, value in tx.rows("SHOW SESSION VARIABLES LIKE '%%isolation'"):
            found["transaction_isolation"] = str(value)
        return found

    def rolled_back(self, error: BaseException | None) -> bool:
        # ER_LOCK_DEADLOCK: InnoDB rolls back the whole transaction, and Galera reports
        # a certification failure or a brute-force abort (at COMMIT or before) with it.
        args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
        return bool(args) and args[0] == 1213

    def is_lock_timeout(self, error: BaseException | None) -> bool:
        args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
        return bool(args) and args[0] == 1205  # ER_LOCK_WAIT_TIMEOUT

    #: ``GET_LOCK`` serializes installs on one server, but a Galera node's lock is its
    #: own: installs through two nodes race, and the loser runs again (``Store.install``).
    install_retries = 10

    def lost_install_race(self, error: BaseException | None) -> bool:
        # Table exists, duplicate column, duplicate key name, duplicate entry (the
        # version row), a table skipped while another DDL changes it, a certification
        # conflict with the other node's DDL, or a statement it aborted (brute force).
        args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
        return bool(args) and args[0] in (1050, 1060, 1061, 1062, 1684, 1213, 1317)

    def bound_lock_wait(self, cursor: Any, *, in_transaction: bool) -> Callable[[], None] | None:
        # Whole seconds only: the bound is the call's remaining time rounded up.
        left = self.call_lock_wait()
        if left is None:
            return None
        cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(left))}")
        usual = int(self.lock_wait)
        return lambda: cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {usual}")

    #: Server errors that mean "not now": lock wait timeout, deadlock, disk full, table
    #: full, too many connections, shutdown, read-only, killed or timed-out statements.
    _UNAVAILABLE = frozenset(
        {1205, 1213, 1021, 1114, 1040, 1053, 1290, 1792, 1836, 1927, 3024, 1969, 1317, 4031}
    )

    def is_unavailable(self, error: BaseException | None) -> bool:
        args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
        if not args or not isinstance(args[0], int):
            return True  # raised by the client, not by a statement
        return 2000 <= args[0] < 3000 or args[0] in self._UNAVAILABLE  # 2xxx: client errors

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        # Lock waits bounded like PostgreSQL's (whole seconds here; the default is 50).
        lock_s = max(1, math.ceil(options["busy_timeout"]))
        self.lock_wait = float(lock_s)
        ping_idle_connections(engine)
        rollback_unfinished_transactions(engine)

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            if dbapi_conn.get_autocommit():  # an application engine's AUTOCOMMIT (database.py)
                dbapi_conn.autocommit(False)
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_s}")
            cur.close()

    _LOCK = "CONCAT(DATABASE(), '.solid_objects_install')"

    def byte_exact_text(self, conn: Connection, tables: Sequence[str]) -> None:
        # The default collations ignore case and accents: reminders for `tick` and
        # `Tick` (or `cafe` and `café`) would be one row. CONVERT rebuilds each table.
        for table in tables:
            conn.execute(
                text(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            )

    def lock_for_install(self, conn: Connection) -> None:
        # A session lock: DDL commits implicitly on MySQL, so no transaction can hold it.
        got = conn.execute(text(f"SELECT GET_LOCK({self._LOCK}, 60)")).scalar()
        if got != 1:
            raise ConfigurationError("could not take the install lock within 60 s")

    def unlock_after_install(self, conn: Connection) -> None:
        conn.execute(text(f"SELECT RELEASE_LOCK({self._LOCK})"))
