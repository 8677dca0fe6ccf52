"""Schema migrations of the control-plane database (PostgreSQL only: SQLite files create their own tables)."""

from __future__ import annotations

import threading

import psycopg
import pytest

from shared.errors import FailedPrecondition
from shared.state.postgres import Migration, PostgresDatabase, migrate, migrations

pytestmark = pytest.mark.integration


def applied(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as connection:
        return connection.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()


def test_migrations_apply_once_in_order(postgres_dsn):
    available = migrations()
    assert [m.version for m in available] == list(range(1, len(available) + 1))
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        assert migrate(connection) == [m.version for m in available]
        assert migrate(connection) == []
    assert applied(postgres_dsn) == [(m.version, m.name) for m in available]


def test_replicas_starting_together_apply_each_migration_once(postgres_dsn):
    results: list[list[int]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def connect_and_migrate() -> None:
        try:
            with psycopg.connect(postgres_dsn, autocommit=True) as connection:
                start.wait()
                results.append(migrate(connection))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=connect_and_migrate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results, key=len) == [[]] * 5 + [[m.version for m in migrations()]]


def test_a_changed_migration_and_a_newer_database_are_refused(postgres_dsn):
    PostgresDatabase(postgres_dsn).shutdown()
    first = migrations()[0]
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        with pytest.raises(FailedPrecondition, match=f"migration 0001_{first.name} was changed"):
            migrate(connection, [Migration(first.version, first.name, first.sql + "\n-- edited"), *migrations()[1:]])
        later = Migration(len(migrations()) + 1, "later_release", "CREATE TABLE later (id INTEGER)")
        migrate(connection, [*migrations(), later])
        with pytest.raises(FailedPrecondition, match="newer than this release"):
            migrate(connection)


def test_kbs_whose_names_differ_only_in_dash_and_underscore_stop_the_storage_name_migration(postgres_dsn):
    """They already share one Milvus collection: the migration names them instead of hiding it."""
    storage_names = next(m for m in migrations() if m.name == "kb_catalog_storage_names")
    before = [m for m in migrations() if m.version < storage_names.version]
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        migrate(connection, before)
        connection.execute("INSERT INTO kb_catalog(name, config_yaml) VALUES ('team-a', ''), ('team_a', ''), "
                           "('other', '')")
        with pytest.raises(psycopg.errors.RaiseException, match="share one vector collection: team-a, team_a"):
            migrate(connection)
        connection.execute("DELETE FROM kb_catalog WHERE name = 'team_a'")
        assert migrate(connection) == [m.version for m in migrations() if m.version >= storage_names.version]


def test_misnamed_or_missing_migration_files_are_errors(tmp_path):
    (tmp_path / "0001_first.sql").write_text("SELECT 1")
    (tmp_path / "0003_third.sql").write_text("SELECT 1")
    with pytest.raises(ValueError, match="expected version 0002"):
        migrations(tmp_path)
    (tmp_path / "2_bad name.sql").write_text("SELECT 1")
    with pytest.raises(ValueError, match="NNNN_lower_case_name.sql"):
        migrations(tmp_path)


def test_an_unreachable_database_is_named_without_its_password():
    with pytest.raises(FailedPrecondition, match=r"cannot reach the control-plane database "
                                                 r"\(postgresql://ragkb:\*\*\*@127.0.0.1:9/ragkb\)"):
        PostgresDatabase("postgresql://ragkb:s3cret@127.0.0.1:9/ragkb")


def test_connections_the_server_dropped_are_replaced_without_a_failed_call(postgres_dsn):
    from shared.state.postgres import database

    db = database(postgres_dsn)
    assert db.execute("SELECT 1").one() == (1,)
    # what a restart or failover does to a pool; the timeout waits until each backend has exited, as after a
    # restart (without it the backend may still be exiting when the next statement is sent, a race no check wins)
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        dropped = admin.execute("SELECT array_agg(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                                "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
    assert dropped and all(dropped)
    assert db.execute("SELECT 2").one() == (2,)
