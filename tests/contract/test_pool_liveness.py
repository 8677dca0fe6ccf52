"""The control-plane pool hands out only live connections: connections the server closed while they sat
idle in the pool (a restart, a failover, an administrator) cost no failed request."""

from __future__ import annotations

import psycopg
import pytest

from shared.state.postgres import PostgresDatabase

pytestmark = pytest.mark.integration


def test_connections_the_server_closed_while_idle_are_replaced_before_use(postgres_dsn):
    database = PostgresDatabase(postgres_dsn, max_size=3)
    try:
        with database.transaction() as first, database.transaction() as second:  # two connections in the pool
            first.execute("SELECT 1")
            second.execute("SELECT 1")
        pids = {row[0] for row in database.execute("SELECT pg_backend_pid()").rows}
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            # the timeout waits until each backend has exited: a backend still exiting races any check
            killed = admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                                   "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
        assert len(killed) >= 2 and all(done for done, in killed)
        for _ in range(4):  # every pooled connection was closed under the pool; each request still succeeds
            assert database.execute("SELECT 41 + 1").rows == [(42,)]
        assert not pids & {row[0] for row in database.execute("SELECT pg_backend_pid()").rows}
    finally:
        database.shutdown()
